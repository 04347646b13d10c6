//! The statements of `solid_instances`, the actors' rows, and the traits that run them on
//! any backend: [`InstanceReads`] outside a transaction, [`InstanceWrites`] inside one, and
//! the row lock of the server backends ([`lock_row`]).
//!
//! Only an actor's own turns lock its row; everything else that reaches an actor appends a
//! message row without that lock.

#[cfg(feature = "sqlite")]
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;

use super::dialect::PerDialect;
use super::messages::{destroy_ready_messages, HEAD_OF_MAILBOX};
use super::query::{query, Dialect};
use super::reminders::{Doomed, ReminderWrites};
use super::{
    rows, ActorKey, ActorLock, Bounds, CommittedActor, Instance, InstanceWrite, LockWait,
    LockedActor, ReadConnections, StateNotice, StoredMessage, Version, WriteConnection,
};
use crate::error::{Error, Result};

/// How many times a turn's lock creates again the row of its actor that the transaction
/// holding it deleted meanwhile (see [`FORGET_NEVER_LIVED`]) before it gives up, as a
/// conflict: the turn then runs again.
pub(crate) const RELOCKS: usize = 8;

/// An actor's row (`$1`, `$2`: the actor).
pub(crate) const SELECT_INSTANCE: &str =
    "SELECT state, revision, incarnation, state_version, paused_at
     FROM solid_instances WHERE actor_type = $1 AND actor_id = $2";

/// [`SELECT_INSTANCE`], locked until commit, skipping a row another transaction holds; the
/// state is left out (`NULL`) when the row is still at the version the caller holds in
/// memory, incarnation `$3` and revision `$4` (`-1`: none).
pub(crate) const LOCK_INSTANCE_UNLESS_HELD: &str =
    "SELECT CASE WHEN incarnation = $3 AND revision = $4 THEN NULL ELSE state END AS state,
            revision, incarnation, state_version, paused_at
     FROM solid_instances WHERE actor_type = $1 AND actor_id = $2 FOR UPDATE SKIP LOCKED";

/// [`LOCK_INSTANCE_UNLESS_HELD`], waiting for a transaction that holds the row.
pub(crate) const LOCK_INSTANCE: &str =
    "SELECT CASE WHEN incarnation = $3 AND revision = $4 THEN NULL ELSE state END AS state,
            revision, incarnation, state_version, paused_at
     FROM solid_instances WHERE actor_type = $1 AND actor_id = $2 FOR UPDATE";

/// SQLite's lock of an actor (its transaction already holds the database's write lock): the
/// actor's row (`$1`, `$2`) beside the head of its mailbox as of `$3`
/// ([`HEAD_OF_MAILBOX`]), as one outer-joined row; the state is left out (`NULL`) when the
/// row is still at the version the caller holds in memory, incarnation `$4` and revision
/// `$5` (`-1`: none).
#[cfg(feature = "sqlite")]
pub(crate) const INSTANCE_AND_HEAD: &str = concat!(
    "SELECT CASE WHEN i.incarnation = $4 AND i.revision = $5 THEN NULL ELSE i.state END
            AS state,
        i.revision, i.incarnation, i.state_version, i.paused_at,
        h.id, h.operation,
        h.arguments, h.attempts, h.available_at, h.message_incarnation,
        h.scheduled_for",
    traced!(", h.traceparent"),
    "
 FROM (SELECT 1) AS one
 LEFT JOIN solid_instances i ON i.actor_type = $1 AND i.actor_id = $2
 LEFT JOIN (SELECT id, operation, arguments, attempts, available_at,
                   incarnation AS message_incarnation, scheduled_for",
    traced!(read "traceparent"),
    "
            FROM solid_messages
            WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
              AND (attempts > 0 OR available_at <= $3)
            ORDER BY id LIMIT 1) AS h ON 1 = 1"
);

/// [`INSTANCE_AND_HEAD`] behind the `BEGIN IMMEDIATE` that takes the database's write lock
/// for it: a new group commit's first turn, in one hand-off to SQLite's worker thread.
#[cfg(feature = "sqlite")]
pub(crate) fn begin_then_instance_and_head() -> &'static str {
    static TEXT: LazyLock<String> =
        LazyLock::new(|| format!("BEGIN IMMEDIATE; {INSTANCE_AND_HEAD}"));
    &TEXT
}

/// [`INSTANCE_AND_HEAD`] behind the savepoint of a turn that joins a group commit, in one
/// hand-off to SQLite's worker thread.
#[cfg(feature = "sqlite")]
pub(crate) fn savepoint_then_instance_and_head() -> &'static str {
    static TEXT: LazyLock<String> =
        LazyLock::new(|| format!("SAVEPOINT solid_member; {INSTANCE_AND_HEAD}"));
    &TEXT
}

/// PostgreSQL's lock of an actor in one round trip (the function of migration 10): the
/// actor's row (`$1`, `$2`) locked, created first if missing, waiting for another
/// transaction's lock if `$3` (otherwise no row while another holds it), beside the head of
/// its mailbox as of `$4` read after the lock was taken; the state is left out (`NULL`) when
/// the row is still at the version the caller holds in memory, incarnation `$5` and revision
/// `$6` (`-1`: none).
///
/// With the `opentelemetry` feature, the head's `traceparent` is read beside the function's
/// row by the head's id, a scalar subquery that reads the primary key (the function's columns
/// stay those of migration 12; a join of the function's row, which the planner counts as a
/// thousand rows, read the whole mailbox table on every turn). It reads with the statement's
/// snapshot, taken before the lock's wait: a head committed during that wait comes without
/// its trace context (its turn's span keeps the parent `tracing` gives it).
#[cfg(feature = "postgres")]
pub(crate) const LOCK_ACTOR_AND_HEAD: &str = concat!(
    "SELECT l.*",
    traced!(
        ", (SELECT SUBSTR(m.traceparent, 1, 56) FROM solid_messages m WHERE m.id = l.id)
         AS traceparent"
    ),
    " FROM solid_lock_actor($1, $2, $3, $4, $5, $6) AS l"
);

/// Creates the actor's row (`$1`, `$2`) if it is missing.
pub(crate) fn create_instance(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite | Dialect::Postgres => {
            "INSERT INTO solid_instances (actor_type, actor_id, updated_at)
             VALUES ($1, $2, 0)
             ON CONFLICT (actor_type, actor_id) DO NOTHING"
        }
        Dialect::MySql => {
            "INSERT INTO solid_instances (actor_type, actor_id, updated_at)
             VALUES ($1, $2, 0)
             ON DUPLICATE KEY UPDATE actor_type = actor_type"
        }
    }
}

/// Whether the actor (`$1`, `$2`) has a row.
pub(crate) const INSTANCE_EXISTS: &str =
    "SELECT 1 FROM solid_instances WHERE actor_type = $1 AND actor_id = $2";

/// Deletes the actor's (`$1`, `$2`) row if it never held state: its first incarnation, no
/// revision, not paused (a row that a server's lock created for a turn that was rejected).
pub(crate) const FORGET_NEVER_LIVED: &str = "DELETE FROM solid_instances
     WHERE actor_type = $1 AND actor_id = $2 AND state IS NULL AND revision = 0
       AND incarnation = 1 AND paused_at IS NULL";

/// Whether an operator paused the actor (`$1`, `$2`).
pub(crate) const IS_PAUSED: &str = "SELECT 1 FROM solid_instances
     WHERE actor_type = $1 AND actor_id = $2 AND paused_at IS NOT NULL";

/// Writes the actor's (`$1`, `$2`) state `$3`, revision `$4`, state version `$5` at `$6`,
/// creating its row if needed.
pub(crate) const WRITE_INSTANCE: &str = "INSERT INTO solid_instances
         (actor_type, actor_id, state, revision, state_version, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
         state = excluded.state,
         revision = excluded.revision,
         state_version = excluded.state_version,
         updated_at = excluded.updated_at";

/// Starts the actor's (`$1`, `$2`) next incarnation at `$3`, from no state.
pub(crate) const NEXT_INCARNATION: &str =
    "INSERT INTO solid_instances (actor_type, actor_id, incarnation, updated_at)
     VALUES ($1, $2, 2, $3)
     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
         state = NULL, revision = solid_instances.revision + 1,
         incarnation = solid_instances.incarnation + 1,
         updated_at = excluded.updated_at";

/// Pauses the actor (`$1`, `$2`) at `$3` unless it is paused, creating its row if needed.
///
/// MySQL counts a row an upsert found unchanged as affected: there the row is made sure of
/// first ([`create_instance`]), then paused by [`PAUSE_EXISTING`].
pub(crate) const PAUSE: &str = "INSERT INTO solid_instances
         (actor_type, actor_id, updated_at, paused_at)
     VALUES ($1, $2, 0, $3)
     ON CONFLICT (actor_type, actor_id) DO UPDATE
         SET paused_at = excluded.paused_at
         WHERE solid_instances.paused_at IS NULL";

/// Pauses the existing row of the actor (`$1`, `$2`) at `$3` unless it is paused (MySQL).
pub(crate) const PAUSE_EXISTING: &str = "UPDATE solid_instances SET paused_at = $3
     WHERE actor_type = $1 AND actor_id = $2
       AND paused_at IS NULL";

/// Resumes the actor (`$1`, `$2`) if it is paused.
pub(crate) const RESUME: &str = "UPDATE solid_instances SET paused_at = NULL
     WHERE actor_type = $1 AND actor_id = $2 AND paused_at IS NOT NULL";

/// The versions of the actors in the JSON array `$1` of `[type, id]` pairs that have a row.
pub(crate) fn versions(dialect: Dialect) -> &'static str {
    static VERSIONS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT i.actor_type, i.actor_id, i.incarnation, i.revision
             FROM {}
             JOIN solid_instances i ON i.actor_type = j.actor_type AND i.actor_id = j.actor_id",
            dialect.json_actor_pairs("$1"),
        )
    });
    VERSIONS.get(dialect)
}

/// Reads of the actors' rows, outside any write transaction.
#[async_trait]
pub(crate) trait InstanceReads: Send + Sync {
    /// Reads an actor's committed row and whether its mailbox is empty, outside any write
    /// transaction.
    async fn read_actor(&self, actor: ActorKey<'_, '_>, now: i64) -> Result<CommittedActor>;

    /// Reads an actor's committed row (`None` if it has none), outside any write
    /// transaction and without its mailbox.
    async fn read_instance(&self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>>;

    /// The versions of those of `actors` (a JSON array of `[type, id]` pairs) that have a
    /// row, in one read.
    async fn versions(&self, actors: &str) -> Result<Vec<StateNotice>>;
}

#[async_trait]
impl<S: ReadConnections> InstanceReads for S {
    async fn read_actor(&self, actor: ActorKey<'_, '_>, now: i64) -> Result<CommittedActor> {
        let instance = self.read_instance(actor).await?;
        let head = query(HEAD_OF_MAILBOX)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(now)
            .fetch_optional(self.readers())
            .await?;
        Ok(CommittedActor {
            instance,
            mailbox_empty: head.is_none(),
        })
    }

    async fn read_instance(&self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>> {
        query(SELECT_INSTANCE)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_optional_row(self.readers(), rows::instance)
            .await
    }

    async fn versions(&self, actors: &str) -> Result<Vec<StateNotice>> {
        query(versions(self.dialect()))
            .bind(actors)
            .fetch_rows(self.readers(), rows::state_notice)
            .await
    }
}

/// A turn's writes to the actors' rows, inside a transaction.
#[async_trait]
pub(crate) trait InstanceWrites: Send {
    /// Whether an operator paused the actor (without locking it).
    async fn is_paused(&mut self, actor: ActorKey<'_, '_>) -> Result<bool>;

    /// Writes the actor's state, creating its row if needed.
    async fn write_instance(
        &mut self,
        actor: ActorKey<'_, '_>,
        write: &InstanceWrite<'_>,
    ) -> Result<()>;

    /// Ends the actor's current incarnation: deletes its reminders, ends its ready messages
    /// as destroyed, and starts the next incarnation from no state.
    async fn destroy_actor(&mut self, actor: ActorKey<'_, '_>, now: i64) -> Result<()>;

    /// Deletes the actor's row if it never held state ([`FORGET_NEVER_LIVED`]), so that a
    /// rejected turn of an actor that never existed leaves no row. SQLite's lock creates no
    /// row, so there it sends nothing.
    async fn forget_never_lived(&mut self, actor: ActorKey<'_, '_>) -> Result<()>;
}

#[async_trait]
impl<T: WriteConnection> InstanceWrites for T {
    async fn is_paused(&mut self, actor: ActorKey<'_, '_>) -> Result<bool> {
        self.counters().statement();
        let paused = query(IS_PAUSED)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_optional(self.on())
            .await?;
        Ok(paused.is_some())
    }

    async fn write_instance(
        &mut self,
        actor: ActorKey<'_, '_>,
        write: &InstanceWrite<'_>,
    ) -> Result<()> {
        self.counters().statement();
        query(WRITE_INSTANCE)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(write.state)
            .bind(write.revision)
            .bind(write.state_version)
            .bind(write.updated_at)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn forget_never_lived(&mut self, actor: ActorKey<'_, '_>) -> Result<()> {
        if self.dialect() == Dialect::Sqlite {
            return Ok(());
        }
        self.counters().statement();
        query(FORGET_NEVER_LIVED)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn destroy_actor(&mut self, actor: ActorKey<'_, '_>, now: i64) -> Result<()> {
        self.delete_reminders(actor, Doomed::Every, now).await?;
        self.counters().statement();
        query(destroy_ready_messages(self.dialect()))
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(now)
            .execute(self.on())
            .await?;
        self.counters().statement();
        query(NEXT_INCARNATION)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(now)
            .execute(self.on())
            .await?;
        Ok(())
    }
}

/// A transaction of a server backend (PostgreSQL, MySQL), which locks actors by their rows.
#[async_trait]
pub(crate) trait RowLocks: WriteConnection {
    /// The transaction's bounds.
    fn bounds(&self) -> Bounds;

    /// Bounds the statements that follow, and their lock waits, by `timeout`.
    async fn set_timeouts(&mut self, timeout: Duration) -> Result<()>;
}

/// The row lock of the server backends: a turn locks its actor's row
/// (`SELECT .. FOR UPDATE`, creating it if missing), skips the actor if another turn holds
/// it, or waits for it until the caller's deadline, inside the server, so that a caller
/// that gives up leaves no connection queued behind the lock; then it reads its mailbox's
/// head.
///
/// `None` if another turn holds it and the caller does not [`LockWait::Wait`], or if the row
/// is missing and it says [`LockWait::SkipMissing`].
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) async fn lock_row<T: RowLocks>(
    tx: &mut T,
    lock: ActorLock<'_, '_>,
) -> Result<Option<LockedActor>> {
    let ActorLock {
        actor,
        wait,
        now,
        known,
    } = lock;
    if let Some(instance) = select_instance(tx, actor, LOCK_INSTANCE_UNLESS_HELD, known).await? {
        return locked(tx, actor, instance, now).await;
    }
    // The row is missing, or another turn holds it.
    if wait == LockWait::SkipMissing {
        return Ok(None);
    }
    if wait == LockWait::Skip {
        if instance_exists(tx, actor).await? {
            return Ok(None);
        }
        create(tx, actor).await?;
        return match select_instance(tx, actor, LOCK_INSTANCE_UNLESS_HELD, known).await? {
            Some(instance) => locked(tx, actor, instance, now).await,
            None => Ok(None),
        };
    }
    let bounds = tx.bounds();
    tx.set_timeouts(bounds.until_deadline()).await?;
    for _ in 0..RELOCKS {
        create(tx, actor).await?;
        // A row this waited for, deleted by the transaction that held it (the rejected turn
        // of an actor that never held state), is created again.
        if let Some(instance) = select_instance(tx, actor, LOCK_INSTANCE, known).await? {
            tx.set_timeouts(bounds.remaining()).await?;
            return locked(tx, actor, instance, now).await;
        }
    }
    Err(Error::TransactionAborted {
        reason: format!(
            "the row of {} {} was deleted {RELOCKS} times while this turn waited for it",
            actor.actor_type, actor.actor_id
        ),
    })
}

/// The actor's row, locked by `lock` ([`LOCK_INSTANCE`] or [`LOCK_INSTANCE_UNLESS_HELD`]),
/// without its state if it is still at the `known` version.
async fn select_instance<T: WriteConnection>(
    tx: &mut T,
    actor: ActorKey<'_, '_>,
    lock: &'static str,
    known: Option<Version>,
) -> Result<Option<Instance>> {
    tx.counters().statement();
    let known = known.unwrap_or(Version::NONE);
    query(lock)
        .bind(actor.actor_type)
        .bind(actor.actor_id)
        .bind(known.incarnation)
        .bind(known.revision)
        .fetch_optional_row(tx.on(), rows::instance)
        .await
}

/// Creates the actor's row if it is missing (waiting, within the lock timeout, for a
/// transaction elsewhere that is creating it).
async fn create<T: WriteConnection>(tx: &mut T, actor: ActorKey<'_, '_>) -> Result<()> {
    tx.counters().statement();
    query(create_instance(tx.dialect()))
        .bind(actor.actor_type)
        .bind(actor.actor_id)
        .execute(tx.on())
        .await?;
    Ok(())
}

async fn instance_exists<T: WriteConnection>(tx: &mut T, actor: ActorKey<'_, '_>) -> Result<bool> {
    tx.counters().statement();
    let row = query(INSTANCE_EXISTS)
        .bind(actor.actor_type)
        .bind(actor.actor_id)
        .fetch_optional(tx.on())
        .await?;
    Ok(row.is_some())
}

/// The locked actor with the head of its mailbox, read after the lock (so with a snapshot
/// that sees every turn of the actor that committed before it).
async fn locked<T: WriteConnection>(
    tx: &mut T,
    actor: ActorKey<'_, '_>,
    instance: Instance,
    now: i64,
) -> Result<Option<LockedActor>> {
    tx.counters().statement();
    let row = query(HEAD_OF_MAILBOX)
        .bind(actor.actor_type)
        .bind(actor.actor_id)
        .bind(now)
        .fetch_optional(tx.on())
        .await?;
    let head: Option<StoredMessage> = row.map(|row| rows::stored_message(&row)).transpose()?;
    Ok(Some(LockedActor { instance, head }))
}
