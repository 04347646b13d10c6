//! The SQLite backend: one writer connection for every turn, a few readers beside it.
//!
//! SQLite allows one writer at a time. Every turn therefore runs on the single writer
//! connection, in a `BEGIN IMMEDIATE` transaction: callers queue for the connection in the
//! pool instead of busy-waiting on the file lock. Snapshots and outcome reads use separate
//! read connections, which WAL lets run beside the writer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqliteConnection};

use super::{
    rows, ActorKey, ClaimedEffect, Counters, DeadEffectRecord, DueReminder, EffectProgress,
    Instance, InstanceWrite, MessageLookup, MessageProgress, MessageRecord, NewEffect, NewMessage,
    ReminderWrite, Stats, Store, StoredMessage, Transaction,
};
use crate::error::Result;

/// The schema, applied in order at start; each entry runs once per database.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "actors",
        include_str!("../../migrations/sqlite/0001_actors.sql"),
    ),
    (
        2,
        "effects",
        include_str!("../../migrations/sqlite/0002_effects.sql"),
    ),
];

/// How hard SQLite works to keep a commit through a power loss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// WAL with `synchronous = FULL`: a committed turn survives a power loss. The default.
    #[default]
    Full,
    /// WAL with `synchronous = NORMAL`: a committed turn survives a crash of the process, but
    /// the last turns before a power loss may be lost. Several times faster on slow disks.
    Normal,
}

/// The SQLite store.
pub(crate) struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    counters: Arc<Counters>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the migrations.
    pub(crate) async fn open(path: &Path, durability: Durability) -> Result<Self> {
        let synchronous = match durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(3600))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await?;
        migrate(&writer).await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await?;
        Ok(Self {
            writer,
            readers,
            counters: Arc::default(),
        })
    }
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

/// A write transaction on the writer connection.
struct SqliteTransaction {
    tx: sqlx::Transaction<'static, Sqlite>,
    counters: Arc<Counters>,
}

sql_backend! {
    store: SqliteStore,
    readers: readers,
    transaction: SqliteTransaction,
    database: Sqlite,
    skip_locked: "",
    store_items: {
        async fn begin(&self) -> Result<Box<dyn Transaction>> {
            let tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
            Ok(Box::new(SqliteTransaction {
                tx,
                counters: Arc::clone(&self.counters),
            }))
        }

        async fn close(&self) {
            self.readers.close().await;
            self.writer.close().await;
        }
    },
    transaction_items: {
        async fn lock_instance(&mut self, actor: ActorKey<'_, '_>) -> Result<Instance> {
            // BEGIN IMMEDIATE already holds the database's write lock: nobody else can create
            // the row or allocate a sequence until this transaction ends.
            Ok(self.try_lock_instance(actor).await?.unwrap_or_else(Instance::fresh))
        }

        async fn try_lock_instance(
            &mut self,
            actor: ActorKey<'_, '_>,
        ) -> Result<Option<Instance>> {
            self.counters.statement();
            let row = sqlx::query(SELECT_INSTANCE)
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .fetch_optional(&mut *self.tx)
                .await?;
            row.map(|row| rows::instance(&row)).transpose()
        }

        fn sqlite(&mut self) -> Option<&mut SqliteConnection> {
            Some(&mut *self.tx)
        }
    }
}
