//! The SQLite backend: one writer connection for every turn, a few readers beside it.
//!
//! SQLite allows one writer at a time. Every turn therefore runs on the single writer
//! connection, in a `BEGIN IMMEDIATE` transaction: callers queue for the connection instead
//! of busy-waiting on the file lock, and turns that queue together share one transaction and
//! one fsync ([`group_commit`]). Snapshots and outcome reads use
//! separate read connections, which WAL lets run beside the writer. Another process on the
//! same file is waited for (`busy_timeout`) only until the caller's deadline. On an
//! application's own pool, each turn takes a connection and a transaction of its own.

pub(crate) mod errors;
mod file;
mod group_commit;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqliteConnection};

pub use self::file::{Durability, IntoSqliteFile, SqliteFile};
use self::group_commit::{GroupCommit, GroupMember, GroupWriter, Opening};
use super::instances::{
    begin_then_instance_and_head, savepoint_then_instance_and_head, INSTANCE_AND_HEAD,
};
use super::owned_transaction::OwnedTransaction;
use super::query::{query, On, Row};
use super::{
    rows, ActorLock, Bounds, Counters, LockedActor, ReadConnections, Reads, SchemaMode, Store,
    Transaction, Version, WorkNotices, WriteConnection,
};
use crate::error::Result;
use crate::store::ErrorKinds;

/// The schema, applied in order at start; each entry runs once per database.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "actors",
        include_str!("../../../migrations/sqlite/0001_actors.sql"),
    ),
    (
        2,
        "effects",
        include_str!("../../../migrations/sqlite/0002_effects.sql"),
    ),
    (
        3,
        "lock-free mailboxes",
        include_str!("../../../migrations/sqlite/0003_lock_free_mailboxes.sql"),
    ),
    (
        4,
        "effect claims",
        include_str!("../../../migrations/sqlite/0004_effect_claims.sql"),
    ),
    (
        5,
        "lifecycle",
        include_str!("../../../migrations/sqlite/0005_lifecycle.sql"),
    ),
    (
        7,
        "administration",
        include_str!("../../../migrations/sqlite/0007_administration.sql"),
    ),
    (
        11,
        "activity",
        include_str!("../../../migrations/sqlite/0011_activity.sql"),
    ),
    (
        14,
        "stalls",
        include_str!("../../../migrations/sqlite/0014_stalls.sql"),
    ),
    (
        15,
        "activity tally",
        include_str!("../../../migrations/sqlite/0015_activity_tally.sql"),
    ),
    (
        16,
        "trace context",
        include_str!("../../../migrations/sqlite/0016_trace_context.sql"),
    ),
];

/// How long a statement outside a caller's deadline waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How the SQLite store opens its file.
#[derive(Debug, Clone)]
pub(crate) struct SqliteOptions {
    pub(crate) file: SqliteFile,
    pub(crate) group_commit: GroupCommit,
    pub(crate) schema: SchemaMode,
}

/// How many actors' turns a worker pass runs at once on the writer: they queue for it
/// together and share group commits.
const CONCURRENT_TURNS: usize = 8;

/// How many SQLite virtual-machine steps run between two looks at the interrupt flag.
const INTERRUPT_CHECK_EVERY: i32 = 1_000;

/// Where the store's write transactions run.
enum Writer {
    /// The runtime's own writer connection, with group commit.
    Grouped(GroupWriter),
    /// An application's pool: a connection and a transaction per turn.
    Pooled(SqlitePool),
}

/// The SQLite store.
pub(crate) struct SqliteStore {
    writer: Writer,
    readers: SqlitePool,
    counters: Arc<Counters>,
    /// Set when a turn is abandoned (its handler ran past the turn timeout, or its caller
    /// went away) while its own SQL may still run: the writer's progress handler then
    /// interrupts that statement, so the writer is free again at once. Cleared when the
    /// next transaction takes the writer.
    interrupt: Arc<AtomicBool>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the migrations; with
    /// [`SchemaMode::RequireCurrent`], first checks them on a read-only connection, and
    /// neither creates the file nor writes to it unless they are this build's.
    pub(crate) async fn open(options: SqliteOptions) -> Result<Self> {
        let path = options.file.path();
        match options.schema {
            SchemaMode::Migrate => create_private(path, options.file.mode)?,
            SchemaMode::RequireCurrent => {
                let reader = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(SqliteConnectOptions::new().filename(path).read_only(true))
                    .await?;
                let applied = applied(&reader).await;
                reader.close().await;
                super::require_current(applied?, MIGRATIONS)?;
            }
        }
        let synchronous = match options.file.durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        };
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let interrupt = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&interrupt);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(3600))
            .idle_timeout(None)
            .max_lifetime(None)
            .after_connect(move |connection, _| {
                let flag = Arc::clone(&flag);
                Box::pin(async move {
                    let mut handle = connection.lock_handle().await?;
                    handle.set_progress_handler(INTERRUPT_CHECK_EVERY, move || {
                        !flag.load(Ordering::Acquire)
                    });
                    Ok(())
                })
            })
            .connect_with(connect.clone())
            .await?;
        if options.schema == SchemaMode::Migrate {
            migrate(&writer).await?;
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(connect.read_only(true))
            .await?;
        let counters = Arc::<Counters>::default();
        Ok(Self {
            writer: Writer::Grouped(GroupWriter::new(
                writer,
                options.group_commit,
                BUSY_TIMEOUT,
                Arc::clone(&interrupt),
                Arc::clone(&counters),
            )),
            readers,
            counters,
            interrupt,
        })
    }
}

impl SqliteStore {
    /// Uses an application's pool for turns and reads alike, and applies the migrations (or,
    /// with [`SchemaMode::RequireCurrent`], checks them). Its
    /// connections are left as the application set them: no progress handler (a statement
    /// a handler left running is waited for, not interrupted), and their own busy timeout
    /// for another process's write lock. Closing the runtime leaves the pool open.
    pub(crate) async fn with_pool(pool: SqlitePool, schema: SchemaMode) -> Result<Self> {
        match schema {
            SchemaMode::Migrate => migrate(&pool).await?,
            SchemaMode::RequireCurrent => {
                super::require_current(applied(&pool).await?, MIGRATIONS)?
            }
        }
        Ok(Self {
            writer: Writer::Pooled(pool.clone()),
            readers: pool,
            counters: Arc::default(),
            interrupt: Arc::default(),
        })
    }
}

/// Creates the database file with `mode` if it does not exist yet; SQLite gives its `-wal`
/// and `-shm` files the database file's permissions.
#[cfg(unix)]
fn create_private(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path);
    match created {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(sqlx::Error::Io(error).into()),
    }
}

#[cfg(not(unix))]
fn create_private(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

/// The migrations this database has applied; `None` if it has no solid-objects schema.
async fn applied(pool: &SqlitePool) -> Result<Option<Vec<i64>>> {
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sqlite_master
         WHERE type = 'table' AND name = 'solid_schema_migrations'",
    )
    .fetch_one(pool)
    .await?;
    if tables == 0 {
        return Ok(None);
    }
    let versions = sqlx::query_scalar("SELECT version FROM solid_schema_migrations")
        .fetch_all(pool)
        .await?;
    Ok(Some(versions))
}

/// Applies the migrations this database has not seen yet, each in its own transaction.
async fn migrate(pool: &SqlitePool) -> Result<()> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS solid_schema_migrations (
            version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)",
    )
    .execute(pool)
    .await?;
    for (version, description, sql) in MIGRATIONS {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let applied = sqlx::query("SELECT 1 FROM solid_schema_migrations WHERE version = ?1")
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if !applied {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO solid_schema_migrations (version, description, applied_at)
                 VALUES (?1, ?2, datetime('now'))",
            )
            .bind(version)
            .bind(description)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// A write transaction: a member of the writer's group, or a transaction of its own on an
/// application's pool.
enum WriteTransaction {
    Grouped(GroupMember),
    Pooled(OwnedTransaction<Sqlite>),
}

impl WriteTransaction {
    async fn commit(self) -> Result<()> {
        match self {
            Self::Grouped(member) => member.commit().await,
            Self::Pooled(tx) => tx.commit().await,
        }
    }

    async fn rollback(self) -> Result<()> {
        match self {
            Self::Grouped(member) => member.rollback().await,
            Self::Pooled(tx) => tx.rollback().await,
        }
    }

    /// Whether committing it is a commit of its own, not a group's.
    fn commits_alone(&self) -> bool {
        matches!(self, Self::Pooled(_))
    }

    fn poison(&mut self) {
        match self {
            Self::Grouped(member) => member.poison(),
            Self::Pooled(tx) => tx.poison(),
        }
    }
}

impl std::ops::Deref for WriteTransaction {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        match self {
            Self::Grouped(member) => member.connection_ref(),
            Self::Pooled(tx) => tx,
        }
    }
}

impl std::ops::DerefMut for WriteTransaction {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            Self::Grouped(member) => member.connection(),
            Self::Pooled(tx) => tx,
        }
    }
}

/// A write transaction on the writer connection.
struct SqliteTransaction {
    tx: WriteTransaction,
    counters: Arc<Counters>,
    interrupt: Arc<AtomicBool>,
}

impl ReadConnections for SqliteStore {
    fn readers(&self) -> On<'_> {
        On::SqlitePool(&self.readers)
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn reads(&self) -> &dyn Reads {
        self
    }

    async fn begin(&self, bounds: Bounds) -> Result<Box<dyn Transaction>> {
        // Waits for another process's write lock end at the caller's deadline, inside
        // SQLite, so nothing is left waiting behind a caller that gave up. An
        // application's own connections keep the busy timeout it gave them.
        let tx = match &self.writer {
            Writer::Grouped(writer) => {
                let busy_until = tokio::time::Instant::now() + bounds.remaining();
                let member = writer
                    .begin(
                        bounds.deadline,
                        busy_until,
                        bounds.alone,
                        bounds.locks_first,
                    )
                    .await?;
                WriteTransaction::Grouped(member)
            }
            Writer::Pooled(pool) => WriteTransaction::Pooled(
                OwnedTransaction::begin(
                    pool,
                    None,
                    bounds.deadline,
                    "BEGIN IMMEDIATE".to_owned(),
                    &|| {},
                )
                .await?,
            ),
        };
        let interrupt = Arc::clone(&self.interrupt);
        Ok(Box::new(SqliteTransaction {
            tx,
            counters: Arc::clone(&self.counters),
            interrupt,
        }))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn single_writer(&self) -> bool {
        true
    }

    fn concurrent_turns(&self) -> usize {
        match self.writer {
            Writer::Grouped(_) => CONCURRENT_TURNS,
            Writer::Pooled(_) => 1,
        }
    }

    async fn close(&self) {
        // An application's pools stay open.
        if let Writer::Grouped(writer) = &self.writer {
            writer.close().await;
            self.readers.close().await;
        }
    }

    async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>> {
        Ok(None)
    }

    fn schema(&self) -> (&'static str, i64) {
        (
            "sqlite",
            MIGRATIONS.last().map_or(0, |migration| migration.0),
        )
    }

    async fn settings(&self) -> Result<Vec<(String, String)>> {
        let version: String = sqlx::query_scalar("SELECT sqlite_version()")
            .fetch_one(&self.readers)
            .await?;
        let journal_mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&self.readers)
            .await?;
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&self.readers)
            .await?;
        let synchronous = match synchronous {
            0 => "off",
            1 => "normal",
            2 => "full",
            _ => "extra",
        };
        Ok(vec![
            ("sqlite_version".to_owned(), version),
            ("journal_mode".to_owned(), journal_mode),
            ("synchronous".to_owned(), synchronous.to_owned()),
        ])
    }

    async fn database_micros(&self) -> Result<Option<i64>> {
        Ok(None)
    }
}

impl WriteConnection for SqliteTransaction {
    fn on(&mut self) -> On<'_> {
        On::Sqlite(&mut self.tx)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn poison(&mut self) {
        // Whatever the abandoned handler's SQL still runs is interrupted.
        self.interrupt.store(true, Ordering::Release);
        self.tx.poison();
    }
}

#[async_trait]
impl Transaction for SqliteTransaction {
    async fn lock_actor(&mut self, lock: ActorLock<'_, '_>) -> Result<Option<LockedActor>> {
        // BEGIN IMMEDIATE holds the database's write lock: no other turn runs, and the
        // lock's `wait` has nothing to wait for.
        let ActorLock {
            actor, now, known, ..
        } = lock;
        self.counters.statement();
        let known = known.unwrap_or(Version::NONE);
        let opening = match &self.tx {
            WriteTransaction::Grouped(member) => member.opening(),
            WriteTransaction::Pooled(_) => Opening::Done,
        };
        let row = match (&mut self.tx, opening) {
            (WriteTransaction::Grouped(member), Opening::Begin | Opening::Savepoint) => {
                let text = if opening == Opening::Begin {
                    begin_then_instance_and_head()
                } else {
                    savepoint_then_instance_and_head()
                };
                let lock = sqlx::query(text)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(now)
                    .bind(known.incarnation)
                    .bind(known.revision);
                match member.open_with(lock).await {
                    Ok(row) => row.map(Row::Sqlite),
                    // Another process held the file past the busy timeout the connection
                    // had: the BEGIN alone waits the rest of the bound, then the lock runs.
                    Err(error) if error.is_busy() && member.opening() == Opening::Begin => {
                        member.open().await?;
                        None
                    }
                    Err(error) => return Err(error),
                }
            }
            _ => None,
        };
        let row = match row {
            Some(row) => row,
            None => {
                query(INSTANCE_AND_HEAD)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(now)
                    .bind(known.incarnation)
                    .bind(known.revision)
                    .fetch_one(self.on())
                    .await?
            }
        };
        rows::locked_actor(&row).map(Some)
    }

    fn sqlite(&mut self) -> Option<&mut SqliteConnection> {
        Some(&mut *self.tx)
    }

    fn group_budget(&self) -> Option<tokio::time::Instant> {
        match &self.tx {
            WriteTransaction::Grouped(member) => member.budget(),
            WriteTransaction::Pooled(_) => None,
        }
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        let alone = self.tx.commits_alone();
        self.tx.commit().await?;
        self.counters.committed(alone);
        Ok(())
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.tx.rollback().await
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Row};

    use super::MIGRATIONS;
    use crate::store::activity::{
        activity_tallies, actor_tallies, due_reminders, waiting_effects, waiting_messages,
    };
    use crate::store::activity_tallies::{fold_activity, fold_actor_activity};
    use crate::store::admin::{ACTOR_TYPES, FINISHED_SINCE, OUTSTANDING_COUNTS};
    use crate::store::query::Dialect;

    /// SQLite's plan for `sql` on a database of this build's schema, a step per line.
    async fn plan(connection: &mut sqlx::SqliteConnection, sql: &str) -> Vec<String> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .fetch_all(connection)
            .await
            .expect("the statement is planned");
        rows.iter().map(|row| row.get::<String, _>(3)).collect()
    }

    /// Every statement of the charts and of the overview reads the index it names, and reads
    /// no table of messages, effects or failed attempts row by row: a page's time follows
    /// what its window holds, not what the retention period keeps.
    #[tokio::test]
    async fn the_charts_and_the_overview_read_indexes_never_whole_tables() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("plans.db").display()
        );
        let mut connection = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("it opens");
        for (_, _, migration) in MIGRATIONS {
            sqlx::raw_sql(migration)
                .execute(&mut connection)
                .await
                .expect("the migration runs");
        }
        let statements = [
            (
                activity_tallies(Dialect::Sqlite),
                "solid_activity USING PRIMARY KEY",
            ),
            (activity_tallies(Dialect::Sqlite), "solid_messages_finished"),
            (
                activity_tallies(Dialect::Sqlite),
                "solid_messages_reminders",
            ),
            (
                activity_tallies(Dialect::Sqlite),
                "solid_failed_attempts_at",
            ),
            (activity_tallies(Dialect::Sqlite), "solid_effects_finished"),
            (
                actor_tallies(Dialect::Sqlite),
                "solid_actor_activity USING PRIMARY KEY",
            ),
            (actor_tallies(Dialect::Sqlite), "solid_messages_finished"),
            (
                actor_tallies(Dialect::Sqlite),
                "solid_failed_attempts_actor",
            ),
            (waiting_messages(), "solid_messages_ready"),
            (due_reminders(), "solid_reminders_due"),
            (waiting_effects(), "solid_effects_due"),
            (fold_activity(Dialect::Sqlite), "solid_messages_finished"),
            (fold_activity(Dialect::Sqlite), "solid_messages_reminders"),
            (fold_activity(Dialect::Sqlite), "solid_failed_attempts_at"),
            (fold_activity(Dialect::Sqlite), "solid_effects_finished"),
            (fold_actor_activity(), "solid_messages_finished"),
            (fold_actor_activity(), "solid_failed_attempts_at"),
            (OUTSTANDING_COUNTS, "solid_messages_dead"),
            (OUTSTANDING_COUNTS, "solid_effects_finished"),
            (ACTOR_TYPES, "solid_messages_mailbox"),
            (FINISHED_SINCE, "solid_messages_finished"),
        ];
        for (statement, index) in statements {
            let steps = plan(&mut connection, statement).await;
            assert!(
                steps.iter().any(|step| step.contains(index)),
                "{index} is not read: {steps:#?}\n{statement}"
            );
            for table in ["solid_messages", "solid_effects", "solid_failed_attempts"] {
                let whole = steps.iter().find(|step| {
                    step.starts_with(&format!("SCAN {table}")) && !step.contains("INDEX")
                });
                assert_eq!(
                    whole, None,
                    "{table} is read whole: {steps:#?}\n{statement}"
                );
            }
        }
    }
}
