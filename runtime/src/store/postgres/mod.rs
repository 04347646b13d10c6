//! The PostgreSQL backend: a pool of connections, one actor's row lock per turn.
//!
//! A turn locks its actor's row (`SELECT .. FOR UPDATE`), so two processes never run the
//! same actor at once, while different actors run in parallel on different connections.
//! Workers skip actors whose row another turn holds (`SKIP LOCKED`) and take due reminders
//! and effects the same way, so any number of processes on any number of hosts share the
//! work. A process that dies mid-turn loses its connection, and PostgreSQL rolls the turn
//! back. Every wait is bounded inside the server: `lock_timeout` from the caller's deadline
//! while a caller waits for an actor, and `statement_timeout` for each statement of a turn.
//! Effect leases run on the server's clock, so a host whose clock is ahead cannot take work
//! that another host is still running.

pub(crate) mod errors;
mod hosts;
mod index_steps;
mod listener;
mod migrations;
mod probe;
#[cfg(feature = "test-support")]
pub(crate) mod test_database;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{PgConnection, Pool, Postgres};
use tokio::time::Instant;

use self::hosts::Host;
use self::listener::Listener;
use self::migrations::{applied, migrate, MIGRATIONS};
use super::failover::{self, Failover};
use super::instances::{LOCK_ACTOR_AND_HEAD, RELOCKS};
use super::query::{get, query, On};
use super::server_pool::{Server, ServerOptions, ServerPool, ServerTransaction};
use super::{
    require_current, rows, ActorLock, Bounds, Counters, LockWait, LockedActor, ReadConnections,
    Reads, SchemaMode, StateNotice, StateNotices, Store, Transaction, Version, WorkNotices,
    WriteConnection,
};
use crate::error::{Error, Result};
use crate::store::ErrorKinds;

/// The channel a commit that leaves work notifies (by the triggers of migration 6).
const WORK_CHANNEL: &str = "solid_objects_work";

/// The channel a commit that changes an actor's state notifies with `[type, id, incarnation,
/// revision]` (by the triggers of migration 9), for watchers.
const STATE_CHANNEL: &str = "solid_objects_state";

/// The PostgreSQL store.
pub(crate) struct PostgresStore {
    /// The pool on the host of the database's that accepts writes.
    server: ServerPool<Postgres>,
    counters: Arc<Counters>,
}

impl PostgresStore {
    /// Connects with up to the options' `connections` connections, the first within their
    /// `connect_timeout`, to the host of their `url` that accepts writes (libpq's multi-host
    /// form lists several), and applies the migrations (or, with
    /// [`SchemaMode::RequireCurrent`], checks them).
    pub(crate) async fn open(options: ServerOptions<'_>) -> Result<Self> {
        let hosts = hosts::hosts(options.url)?;
        if hosts.len() == 1 {
            return Self::open_on(hosts, 0, &options).await;
        }
        let deadline = Instant::now() + options.connect_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let writable = failover::first_writable(&hosts, left).await?;
            let opened = Self::open_on(hosts.clone(), writable, &options).await;
            match opened {
                // The host went away between the search and the pool's first statements (a
                // failover under way): look for the one that accepts writes again.
                Err(error)
                    if (error.is_connection_lost()
                        || matches!(error, crate::error::Error::Unreachable { .. }))
                        && Instant::now() < deadline =>
                {
                    tracing::warn!(%error, "the PostgreSQL host went away during start-up; looking again");
                }
                opened => return opened,
            }
        }
    }

    /// Opens the pool on the host at `writable` of `hosts`, and migrates.
    async fn open_on(
        hosts: Vec<Host>,
        writable: usize,
        options: &ServerOptions<'_>,
    ) -> Result<Self> {
        let failover = Failover::new(hosts, writable, options.connect_timeout);
        let pool = ServerPool::open(&failover, options).await?;
        Self::following(ServerPool::opened(pool, failover), options.schema).await
    }

    /// Uses an application's pool, and applies the migrations (or, with
    /// [`SchemaMode::RequireCurrent`], checks them). Closing the runtime leaves the pool open.
    pub(crate) async fn with_pool(pool: PgPool, schema: SchemaMode) -> Result<Self> {
        let options = (*pool.connect_options()).clone();
        let host = Host {
            name: format!("{}:{}", options.get_host(), options.get_port()),
            host: options.get_host().to_owned(),
            port: options.get_port(),
            options,
        };
        Self::following(ServerPool::of_application(pool, host), schema).await
    }

    /// The store on the connections of `server`, once its schema is as `schema` says.
    async fn following(server: ServerPool<Postgres>, schema: SchemaMode) -> Result<Self> {
        let pool = &server.readers;
        match schema {
            SchemaMode::Migrate => migrate(pool).await?,
            SchemaMode::RequireCurrent => require_current(applied(pool).await?, MIGRATIONS)?,
        }
        Ok(Self {
            server,
            counters: Arc::default(),
        })
    }

    /// The pool.
    fn pool(&self) -> &Pool<Postgres> {
        &self.server.readers
    }
}

/// A duration as PostgreSQL's `lock_timeout`/`statement_timeout` take it: whole
/// milliseconds, at least one (zero would mean no limit).
fn millis(duration: Duration) -> u128 {
    duration.as_millis().clamp(1, i32::MAX as u128)
}

/// A transaction on one pooled connection.
type PostgresTransaction = ServerTransaction<Postgres, ()>;

impl Server for Postgres {
    fn on(connection: &mut PgConnection) -> On<'_> {
        On::Postgres(connection)
    }

    fn pool_on<'e>(pool: &'e PgPool, lost: &'e (dyn Fn() + Sync)) -> On<'e> {
        On::PostgresPool(pool, lost)
    }
}

impl ReadConnections for PostgresStore {
    fn readers(&self) -> On<'_> {
        self.server.readers()
    }
}

/// Watchers' leases: renews (or adds) the watcher `$1`'s rows for the actors in the JSON
/// array `$2` of `[type, id]` pairs to `$3` microseconds from now, and deletes its other
/// rows and every row whose lease ran out, on the server's clock, in one statement.
const ANNOUNCE_WATCHED: &str = "WITH keys AS (
         SELECT DISTINCT j.pair->>0 AS actor_type, j.pair->>1 AS actor_id
         FROM jsonb_array_elements($2::jsonb) AS j(pair)
     ),
     clock AS (
         SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT AS now
     ),
     gone AS (
         DELETE FROM solid_watched w USING clock
         WHERE (w.watcher = $1 OR w.expires_at <= clock.now)
           AND NOT (w.watcher = $1 AND EXISTS (
               SELECT 1 FROM keys k
               WHERE k.actor_type = w.actor_type AND k.actor_id = w.actor_id))
     )
     INSERT INTO solid_watched (actor_type, actor_id, watcher, expires_at)
     SELECT k.actor_type, k.actor_id, $1, clock.now + $3 FROM keys k, clock
     ON CONFLICT (actor_type, actor_id, watcher)
         DO UPDATE SET expires_at = excluded.expires_at";

/// The server's clock in microseconds.
const SERVER_MICROS: &str = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT";

#[async_trait]
impl Store for PostgresStore {
    fn reads(&self) -> &dyn Reads {
        self
    }

    async fn begin(&self, bounds: Bounds) -> Result<Box<dyn Transaction>> {
        // One round trip: the bounds travel with BEGIN. Each statement, and each lock
        // wait inside one (a handler's own SQL included), ends within `statement`.
        let statement = millis(bounds.statement);
        let begin = format!(
            "BEGIN; SET LOCAL lock_timeout = '{statement}ms'; \
             SET LOCAL statement_timeout = '{statement}ms'"
        );
        Ok(Box::new(PostgresTransaction {
            tx: self.server.begin(bounds.deadline, begin).await?,
            counters: Arc::clone(&self.counters),
            own: (),
        }))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    async fn reconnect(&self, deadline: Instant) -> Result<()> {
        self.server.reconnect(deadline).await
    }

    async fn close(&self) {
        self.server.close().await;
    }

    async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>> {
        let listener = Listener::start(self.pool(), &self.server.failover, WORK_CHANNEL).await?;
        Ok(Some(Box::new(Notices {
            listener,
            counters: Arc::clone(&self.counters),
        })))
    }

    async fn listen_states(&self) -> Result<Option<Box<dyn StateNotices>>> {
        let listener = Listener::start(self.pool(), &self.server.failover, STATE_CHANNEL).await?;
        Ok(Some(Box::new(StateListener { listener })))
    }

    async fn announce_watched(&self, watcher: &str, actors: &str, lease: Duration) -> Result<()> {
        query(ANNOUNCE_WATCHED)
            .bind(watcher)
            .bind(actors)
            .bind(i64::try_from(lease.as_micros()).unwrap_or(i64::MAX))
            .execute(self.readers())
            .await?;
        Ok(())
    }

    fn schema(&self) -> (&'static str, i64) {
        (
            "postgres",
            MIGRATIONS.last().map_or(0, |migration| migration.0),
        )
    }

    async fn settings(&self) -> Result<Vec<(String, String)>> {
        let mut settings = Vec::new();
        for name in [
            "server_version",
            "default_transaction_isolation",
            "synchronous_commit",
            "max_connections",
            "TimeZone",
        ] {
            let value: String = sqlx::query_scalar("SELECT current_setting($1)")
                .bind(name)
                .fetch_one(self.pool())
                .await?;
            settings.push((name.to_owned(), value));
        }
        Ok(settings)
    }

    async fn database_micros(&self) -> Result<Option<i64>> {
        let now = query(SERVER_MICROS).fetch_scalar(self.readers()).await?;
        Ok(Some(now))
    }
}

#[async_trait]
impl Transaction for PostgresTransaction {
    async fn lock_actor(&mut self, lock: ActorLock<'_, '_>) -> Result<Option<LockedActor>> {
        // One round trip: the function locks (or skips, or waits until the transaction's
        // lock_timeout), then reads the head with a snapshot taken after the lock.
        let (actor, known) = (lock.actor, lock.known.unwrap_or(Version::NONE));
        for _ in 0..RELOCKS {
            self.counters.statement();
            let row = query(LOCK_ACTOR_AND_HEAD)
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(match lock.wait {
                    LockWait::Wait => Some(true),
                    LockWait::Skip => Some(false),
                    LockWait::SkipMissing => None,
                })
                .bind(lock.now)
                .bind(known.incarnation)
                .bind(known.revision)
                .fetch_optional(self.on())
                .await?;
            // A row the function waited for, deleted by the transaction that held it (the
            // rejected turn of an actor that never held state): nothing is locked, so the
            // function runs again, creating the row anew.
            if let Some(row) = &row {
                let vanished = get::<Option<i64>>(row, "revision")?.is_none();
                if vanished && lock.wait == LockWait::Wait {
                    continue;
                }
            }
            return row.map(|row| rows::locked_actor(&row)).transpose();
        }
        Err(Error::TransactionAborted {
            reason: format!(
                "the row of {} {} was deleted {RELOCKS} times while this turn waited for it",
                actor.actor_type, actor.actor_id
            ),
        })
    }

    fn postgres(&mut self) -> Option<&mut PgConnection> {
        Some(&mut *self.tx)
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        self.tx.commit().await?;
        // A commit of its own: the group commits are SQLite's writer's.
        self.counters.committed(true);
        Ok(())
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.tx.rollback().await
    }
}

/// `LISTEN` for work on a connection of its own ([`Listener`]).
struct Notices {
    listener: Listener,
    counters: Arc<Counters>,
}

#[async_trait]
impl WorkNotices for Notices {
    /// Returns at a notice, and also once the connection was lost and listens again: the
    /// notices sent while it was away are gone, so the workers look for their work.
    async fn next(&mut self) -> Result<()> {
        if self.listener.next().await?.is_some() {
            self.counters.work_notice();
        }
        Ok(())
    }
}

/// `LISTEN` for committed states on a connection of its own ([`Listener`]).
struct StateListener {
    listener: Listener,
}

#[async_trait]
impl StateNotices for StateListener {
    async fn next(&mut self) -> Result<Option<StateNotice>> {
        loop {
            // `None`: the connection was lost (notices sent meanwhile are gone), and it
            // listens again.
            let Some(notification) = self.listener.next().await? else {
                return Ok(None);
            };
            let payload = notification.payload();
            match serde_json::from_str::<(String, String, i64, i64)>(payload) {
                Ok((actor_type, actor_id, incarnation, revision)) => {
                    return Ok(Some(StateNotice {
                        actor_type,
                        actor_id,
                        version: Version {
                            incarnation,
                            revision,
                        },
                    }))
                }
                Err(error) => {
                    tracing::warn!(%error, payload, "a state notice that does not read; ignored");
                }
            }
        }
    }
}
