//! The PostgreSQL backend: a pool of connections, one actor's row lock per turn.
//!
//! A turn locks its actor's row (`SELECT .. FOR UPDATE`), so two processes never run the
//! same actor at once, while different actors run in parallel on different connections.
//! Workers skip actors whose row another turn holds (`SKIP LOCKED`) and take due reminders
//! the same way, so any number of processes on any number of hosts share the work. A process
//! that dies mid-turn loses its connection, and PostgreSQL rolls the turn back.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{PgConnection, Postgres};

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
        include_str!("../../migrations/postgres/0001_actors.sql"),
    ),
    (
        2,
        "effects",
        include_str!("../../migrations/postgres/0002_effects.sql"),
    ),
];

/// Serialises concurrent migrators (several processes starting at once).
const MIGRATION_LOCK: i64 = 0x736f_6c69_645f_6f62;

/// The PostgreSQL store.
pub(crate) struct PostgresStore {
    /// One pool serves turns and reads alike.
    readers: PgPool,
    counters: Arc<Counters>,
}

impl PostgresStore {
    /// Connects with up to `connections` connections and applies the migrations.
    pub(crate) async fn open(url: &str, connections: u32) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(3600))
            .connect(url)
            .await?;
        migrate(&pool).await?;
        Ok(Self {
            readers: pool,
            counters: Arc::default(),
        })
    }
}

/// Applies the migrations this database has not seen yet, under an advisory lock.
async fn migrate(pool: &PgPool) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS solid_schema_migrations (
            version BIGINT PRIMARY KEY, description TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&mut *tx)
    .await?;
    for (version, description, sql) in MIGRATIONS {
        let applied = sqlx::query("SELECT 1 FROM solid_schema_migrations WHERE version = $1")
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if !applied {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO solid_schema_migrations (version, description) VALUES ($1, $2)",
            )
            .bind(version)
            .bind(description)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// A transaction on one pooled connection.
struct PostgresTransaction {
    tx: sqlx::Transaction<'static, Postgres>,
    counters: Arc<Counters>,
}

impl PostgresTransaction {
    async fn select_instance(
        &mut self,
        actor: ActorKey<'_, '_>,
        lock: &str,
    ) -> Result<Option<Instance>> {
        self.counters.statement();
        let sql = format!("{SELECT_INSTANCE} {lock}");
        let row = sqlx::query(&sql)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_optional(&mut *self.tx)
            .await?;
        row.map(|row| rows::instance(&row)).transpose()
    }
}

sql_backend! {
    store: PostgresStore,
    readers: readers,
    transaction: PostgresTransaction,
    database: Postgres,
    skip_locked: " FOR UPDATE SKIP LOCKED",
    store_items: {
        async fn begin(&self) -> Result<Box<dyn Transaction>> {
            let tx = self.readers.begin().await?;
            Ok(Box::new(PostgresTransaction {
                tx,
                counters: Arc::clone(&self.counters),
            }))
        }

        async fn close(&self) {
            self.readers.close().await;
        }
    },
    transaction_items: {
        async fn lock_instance(&mut self, actor: ActorKey<'_, '_>) -> Result<Instance> {
            if let Some(instance) = self.select_instance(actor, "FOR UPDATE").await? {
                return Ok(instance);
            }
            self.counters.statement();
            sqlx::query(
                "INSERT INTO solid_instances (actor_type, actor_id, updated_at) VALUES ($1, $2, 0)
                 ON CONFLICT (actor_type, actor_id) DO NOTHING",
            )
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .execute(&mut *self.tx)
            .await?;
            Ok(self
                .select_instance(actor, "FOR UPDATE")
                .await?
                .unwrap_or_else(Instance::fresh))
        }

        async fn try_lock_instance(
            &mut self,
            actor: ActorKey<'_, '_>,
        ) -> Result<Option<Instance>> {
            self.select_instance(actor, "FOR UPDATE SKIP LOCKED").await
        }

        fn postgres(&mut self) -> Option<&mut PgConnection> {
            Some(&mut *self.tx)
        }
    }
}
