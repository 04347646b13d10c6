//! The MySQL and MariaDB backend: a pool of connections, one actor's row lock per turn.
//!
//! It works as the PostgreSQL backend does. A turn runs in one InnoDB transaction at READ
//! COMMITTED and locks its actor's row (`SELECT .. FOR UPDATE`), so two processes never run
//! the same actor at once while different actors run in parallel. Workers skip actors whose
//! row another turn holds, and claim due reminders and effects with `SKIP LOCKED` (MySQL
//! 8.0 and MariaDB 10.6 have it). A process that dies mid-turn loses its connection, and the
//! server rolls the turn back. Lock waits are bounded by `innodb_lock_wait_timeout` (whole
//! seconds) and, on MariaDB, statements by `max_statement_time`. Effect leases run on the
//! server's clock.
//!
//! A warm turn's round trips: `BEGIN` (one multi-statement string that keeps the session's
//! own bounds aside, sets the turn's, its isolation, and starts the transaction), the lock,
//! the mailbox's head, the turn's writes, and `COMMIT` between the restore of the session's
//! bounds and of its `autocommit` (one string again; two on a Galera node, where the
//! `COMMIT` must lead its string to learn of an abort: see [`CommitPacket::Leading`]). The lock and the head stay two statements: one statement
//! with the head's columns as subqueries correlated with the locked row (current, but
//! seven subqueries) made MariaDB 10.11 slower than the round trip it saves.
//!
//! The statements are the ones the other backends share, written with numbered parameters
//! and spelled for MySQL by [`statement`] when first run; the few whose form differs (no
//! `RETURNING`, no `ON CONFLICT .. DO NOTHING`, no `UPDATE` that reads its own table) are
//! the statement files' MySQL forms, chosen by the dialect.
//! There is no `LISTEN`: a commit that left work rings a bell row that other processes'
//! idle workers read at a short interval ([`wake_ups`]); watchers poll.

pub(crate) mod errors;
mod migration_lock;
mod migrations;
mod probe;
pub(crate) mod statement;
#[cfg(feature = "test-support")]
pub(crate) mod test_database;
pub(crate) mod text;
mod wake_ups;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool};
use sqlx::{Executor, MySql};

use self::migrations::{applied, migrate, MIGRATIONS};
pub(crate) use self::text::Text;
use self::wake_ups::Bell;
use super::failover::{Failover, Host};
use super::instances::{lock_row, RowLocks};
use super::owned_transaction::CommitPacket;
use super::query::{get, On, Row};
use super::server_pool::{Server, ServerOptions, ServerPool, ServerTransaction, TransactionOwn};
use super::{
    require_current, ActorLock, Bounds, Counters, LockedActor, ReadConnections, Reads, SchemaMode,
    Store, Transaction, WorkNotices,
};
use crate::error::{Error, Result};

/// The collation the migrations name: MariaDB's binary collation without padding.
const NO_PAD_BINARY: &str = "utf8mb4_nopad_bin";

/// MySQL 8's binary collation without padding, where the server has no [`NO_PAD_BINARY`].
const MYSQL_NO_PAD_BINARY: &str = "utf8mb4_0900_bin";

/// Which server speaks: they differ in how a statement's time is bounded, and in whether a
/// `DELETE` returns what it deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    MariaDb,
    MySql,
}

/// The MySQL store.
pub(crate) struct MySqlStore {
    /// The pool on the endpoint, which the failover waits for to accept writes again after a
    /// connection to it was lost (a restart, a switch behind a proxy). Connections turns left
    /// clean are parked for the next turns: no pool check between them.
    server: ServerPool<MySql>,
    /// Rung after each commit that left work, for other processes' idle workers.
    bell: Bell,
    counters: Arc<Counters>,
    flavor: Flavor,
    /// How a turn's `COMMIT` is sent: leading a string of its own on a Galera node.
    commit_packet: CommitPacket,
}

impl MySqlStore {
    /// Connects with up to the options' `connections` connections, the first within their
    /// `connect_timeout`, and applies the migrations (or, with
    /// [`SchemaMode::RequireCurrent`], checks them).
    pub(crate) async fn open(options: ServerOptions<'_>) -> Result<Self> {
        let endpoint: MySqlConnectOptions = options.url.parse()?;
        let failover = Failover::new(vec![endpoint_of(endpoint)], 0, options.connect_timeout);
        let pool = ServerPool::open(&failover, &options).await?;
        Self::following(ServerPool::opened(pool, failover), options.schema).await
    }

    /// Uses an application's pool, and applies the migrations (or, with
    /// [`SchemaMode::RequireCurrent`], checks them). Closing the runtime leaves the pool open.
    pub(crate) async fn with_pool(pool: MySqlPool, schema: SchemaMode) -> Result<Self> {
        let host = endpoint_of((*pool.connect_options()).clone());
        Self::following(ServerPool::of_application(pool, host), schema).await
    }

    /// The store on the connections of `server`, whose endpoint the failover waits for after
    /// a lost connection, once its schema is as `schema` says.
    async fn following(server: ServerPool<MySql>, schema: SchemaMode) -> Result<Self> {
        let pool = &server.readers;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(pool)
            .await?;
        let flavor = if version.contains("MariaDB") {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        };
        let commit_packet = match galera(pool).await? {
            true => CommitPacket::Leading,
            false => CommitPacket::Shared,
        };
        match schema {
            SchemaMode::Migrate => migrate(pool).await?,
            SchemaMode::RequireCurrent => require_current(applied(pool).await?, MIGRATIONS)?,
        }
        Ok(Self {
            bell: Bell::beside(pool),
            server,
            counters: Arc::default(),
            flavor,
            commit_packet,
        })
    }

    /// The statement that begins a turn's transaction: the session's own bounds kept aside,
    /// the turn's set, its isolation, and the transaction.
    ///
    /// The transaction runs with `autocommit` off, and its end puts it back as it was after its
    /// `COMMIT` or `ROLLBACK` ([`AFTER_END`]):
    /// a transaction the server ends by itself (a Galera node's applier aborts it for a
    /// write another node committed first; a handler's own `ROLLBACK`) leaves the statements
    /// after it in a new transaction that the turn's failed end rolls back, where with
    /// `autocommit` on each would have been committed on its own (a handler's writes
    /// applied twice, seen on a Galera cluster).
    ///
    /// On a session whose `autocommit` was already off (an application's pool can set it so),
    /// an earlier read left a transaction open, in which the isolation cannot be set: the
    /// `COMMIT` before it ends that one, as `START TRANSACTION` would end it anyway.
    ///
    /// The transaction's first statement is a savepoint its `COMMIT` releases first
    /// ([`ALIVE`]): a transaction the server aborted while the turn was between statements
    /// (which MariaDB's Galera does without telling the statements after the abort in the
    /// same string) is not the one the `COMMIT` would end, and the release, failing, keeps
    /// that `COMMIT` from running. On Galera the `COMMIT` also leads a string of its own
    /// ([`CommitPacket::Leading`]), so an abort after the release is reported to it.
    ///
    /// On a Galera node the `START TRANSACTION` waits until the node has applied every
    /// transaction the cluster committed before it (`wsrep_sync_wait`, set for that statement
    /// only): a message enqueued and acknowledged through another node is then in this
    /// transaction's view, and a message enqueued here gets a later id than it (each node
    /// hands out `AUTO_INCREMENT` ids past only the rows it has applied), so one caller's
    /// messages run in the order they were acknowledged, through whichever node.
    fn begin_statement(&self, bounds: &Bounds) -> String {
        let (causal, after) = match self.commit_packet {
            CommitPacket::Leading => (
                "SET @solid_sync_wait = @@SESSION.wsrep_sync_wait, SESSION wsrep_sync_wait = 1; ",
                "SET SESSION wsrep_sync_wait = @solid_sync_wait; ",
            ),
            CommitPacket::Shared => ("", ""),
        };
        format!(
            "{}; {}; SET SESSION autocommit = 0; COMMIT; \
             SET TRANSACTION ISOLATION LEVEL READ COMMITTED; {causal}START TRANSACTION; \
             {after}SAVEPOINT solid_alive",
            self.flavor.keep_statement(),
            self.flavor.bound_statements(bounds.statement)
        )
    }
}

/// A failed release of [`ALIVE`] (1305: no such savepoint) as what it means: the server
/// aborted the transaction; any other error as it is.
fn aborted_by_the_server(error: Error) -> Error {
    match &error {
        Error::Database(sqlx::Error::Database(database))
            if database
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|mysql| mysql.number() == 1305) =>
        {
            Error::TransactionAborted {
                reason: database.message().to_owned(),
            }
        }
        _ => error,
    }
}

/// Releases the savepoint a turn's transaction began with: it fails (1305, the savepoint
/// does not exist) when the server aborted that transaction and the statements since ran in
/// a new one, and the `COMMIT` after it then does not run.
const ALIVE: &str = "RELEASE SAVEPOINT solid_alive";

/// What follows a turn's `COMMIT` or `ROLLBACK`: `autocommit` as the session had it.
const AFTER_END: &str = "SET SESSION autocommit = @solid_autocommit";

impl Flavor {
    /// Keeps the session's own bounds in user variables, for [`Flavor::restore_statement`]:
    /// MySQL has no setting that ends with the transaction (PostgreSQL's `SET LOCAL`), and a
    /// pooled connection (the application's, say) must not keep a turn's bounds.
    fn keep_statement(self) -> &'static str {
        match self {
            Self::MariaDb => {
                "SET @solid_lock_wait = @@SESSION.innodb_lock_wait_timeout, \
                 @solid_statement_time = @@SESSION.max_statement_time, \
                 @solid_autocommit = @@SESSION.autocommit"
            }
            Self::MySql => {
                "SET @solid_lock_wait = @@SESSION.innodb_lock_wait_timeout, \
                 @solid_autocommit = @@SESSION.autocommit"
            }
        }
    }

    /// What a turn's transaction runs just before its `COMMIT`: the session's own bounds put
    /// back, and the release of [`ALIVE`] (which fails if the server aborted the transaction).
    fn before_commit(self) -> String {
        format!("{}; {ALIVE}", self.restore_statement())
    }

    /// Puts back the session's own bounds: the transaction's last statement before its
    /// `COMMIT` or `ROLLBACK`, sent with it.
    fn restore_statement(self) -> &'static str {
        match self {
            Self::MariaDb => {
                "SET SESSION innodb_lock_wait_timeout = @solid_lock_wait, \
                 max_statement_time = @solid_statement_time"
            }
            Self::MySql => "SET SESSION innodb_lock_wait_timeout = @solid_lock_wait",
        }
    }

    /// `SET SESSION` statements that end each lock wait, and on MariaDB each statement,
    /// within `timeout`.
    fn bound_statements(self, timeout: Duration) -> String {
        let seconds = whole_seconds(timeout);
        match self {
            Self::MariaDb => format!(
                "SET SESSION innodb_lock_wait_timeout = {seconds}, \
                 max_statement_time = {:.3}",
                timeout.as_secs_f64().max(0.001)
            ),
            Self::MySql => format!("SET SESSION innodb_lock_wait_timeout = {seconds}"),
        }
    }
}

/// A duration as `innodb_lock_wait_timeout` takes it: whole seconds, rounded up, at least
/// one.
fn whole_seconds(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
        .clamp(1, 1 << 30)
}

/// Whether the server is a node of a Galera cluster (`wsrep_on`; MySQL has no such
/// variable).
async fn galera(pool: &MySqlPool) -> Result<bool> {
    let wsrep: Option<(Text, Text)> = sqlx::query_as("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(pool)
        .await?;
    Ok(wsrep.is_some_and(|(_, value)| value.0.eq_ignore_ascii_case("ON")))
}

/// The one endpoint of a MySQL URL (a server, or a proxy in front of several), as the
/// failover tries it.
fn endpoint_of(options: MySqlConnectOptions) -> Host<MySql> {
    let host = options.get_socket().map_or_else(
        || options.get_host().to_owned(),
        |socket| socket.display().to_string(),
    );
    let port = options.get_port();
    Host {
        name: format!("{host}:{port}"),
        host,
        port,
        options,
    }
}

/// A transaction on one pooled connection.
type MySqlTransaction = ServerTransaction<MySql, TurnForm>;

impl Server for MySql {
    fn on(connection: &mut MySqlConnection) -> On<'_> {
        On::MySql(connection)
    }

    fn pool_on<'e>(pool: &'e MySqlPool, lost: &'e (dyn Fn() + Sync)) -> On<'e> {
        On::MySqlPool(pool, lost)
    }
}

/// What a MySQL transaction keeps beside its connection: its bounds, and how its server
/// bounds statements and commits.
#[derive(Debug, Clone, Copy)]
struct TurnForm {
    bounds: Bounds,
    flavor: Flavor,
    commit_packet: CommitPacket,
}

impl TransactionOwn for TurnForm {
    fn deletes_return_rows(&self) -> bool {
        self.flavor == Flavor::MariaDb
    }
}

#[async_trait]
impl RowLocks for MySqlTransaction {
    fn bounds(&self) -> Bounds {
        self.own.bounds
    }

    async fn set_timeouts(&mut self, timeout: Duration) -> Result<()> {
        self.counters.statement();
        let bounds = self.own.flavor.bound_statements(timeout);
        self.tx.execute(bounds.as_str()).await?;
        Ok(())
    }
}

impl ReadConnections for MySqlStore {
    fn readers(&self) -> On<'_> {
        self.server.readers()
    }
}

/// The server's clock in microseconds.
const SERVER_MICROS: &str = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";

/// The server's variables that matter to operators.
const SETTINGS: &str = "SHOW VARIABLES WHERE Variable_name IN ('version', 'transaction_isolation',
     'tx_isolation', 'innodb_flush_log_at_trx_commit', 'max_connections',
     'max_allowed_packet', 'time_zone')";

#[async_trait]
impl Store for MySqlStore {
    fn reads(&self) -> &dyn Reads {
        self
    }

    async fn begin(&self, bounds: Bounds) -> Result<Box<dyn Transaction>> {
        // One round trip: the bounds and the isolation travel with the BEGIN.
        let begin = self.begin_statement(&bounds);
        let tx = self.server.begin(bounds.deadline, begin).await?;
        Ok(Box::new(MySqlTransaction {
            tx: tx.close_if_abandoned(),
            counters: Arc::clone(&self.counters),
            own: TurnForm {
                bounds,
                flavor: self.flavor,
                commit_packet: self.commit_packet,
            },
        }))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn work_committed(&self) {
        self.bell.ring();
    }

    async fn reconnect(&self, deadline: Instant) -> Result<()> {
        self.server.reconnect(deadline).await
    }

    async fn close(&self) {
        self.bell.close().await;
        self.server.close().await;
    }

    async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>> {
        Ok(Some(Box::new(
            self.bell.listener(Arc::clone(&self.counters)),
        )))
    }

    fn schema(&self) -> (&'static str, i64) {
        (
            "mysql",
            MIGRATIONS.last().map_or(0, |migration| migration.0),
        )
    }

    async fn settings(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::raw_sql(SETTINGS)
            .fetch_all(&self.server.readers)
            .await?;
        rows.into_iter()
            .map(Row::MySql)
            .map(|row| Ok((get(&row, 0)?, get(&row, 1)?)))
            .collect()
    }

    async fn database_micros(&self) -> Result<Option<i64>> {
        let now = sqlx::query_scalar(SERVER_MICROS)
            .fetch_one(&self.server.readers)
            .await?;
        Ok(Some(now))
    }
}

#[async_trait]
impl Transaction for MySqlTransaction {
    async fn lock_actor(&mut self, lock: ActorLock<'_, '_>) -> Result<Option<LockedActor>> {
        lock_row(self, lock).await
    }

    fn mysql(&mut self) -> Option<&mut MySqlConnection> {
        Some(&mut *self.tx)
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        let TurnForm {
            flavor,
            commit_packet,
            ..
        } = self.own;
        self.tx
            .commit_around(&flavor.before_commit(), AFTER_END, commit_packet)
            .await
            .map_err(aborted_by_the_server)?;
        // A commit of its own: the group commits are SQLite's writer's.
        self.counters.committed(true);
        Ok(())
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.tx
            .rollback_around(self.own.flavor.restore_statement(), AFTER_END)
            .await
    }
}
