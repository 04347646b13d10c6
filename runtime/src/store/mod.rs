//! The only place SQL lives: two small traits, one file per backend.
//!
//! The engine speaks in rows ([`Instance`], [`StoredMessage`], ...) and never in SQL text, so
//! a backend is one file implementing [`Store`] and [`Transaction`]. SQLite and PostgreSQL
//! share their statements (`shared.rs`, `$N` placeholders) and row decoding (`rows.rs`), and
//! each adds only how a transaction begins and locks its actor; a backend whose SQL differs
//! more implements the traits directly. Times are microseconds since the Unix epoch, always
//! passed as parameters.

#[macro_use]
mod shared;

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod rows;
pub(crate) mod sqlite;

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::error::Result;

/// The address of one actor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActorKey<'t, 'i> {
    pub(crate) actor_type: &'t str,
    pub(crate) actor_id: &'i str,
}

/// An actor's row: its state and its mailbox counters.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// The state as JSON; `None` until a turn first commits state.
    pub(crate) state: Option<String>,
    pub(crate) revision: i64,
    /// The sequence number the next enqueued message gets.
    pub(crate) next_sequence: i64,
    /// How many of its messages are ready (waiting or due).
    pub(crate) unfinished: i64,
}

impl Instance {
    /// The row of an actor that has never been written.
    pub(crate) fn fresh() -> Self {
        Self {
            state: None,
            revision: 0,
            next_sequence: 1,
            unfinished: 0,
        }
    }
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoredStatus {
    Ready,
    Completed,
    Rejected,
    Dead,
}

impl StoredStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Completed => "completed",
            Self::Rejected => "rejected",
            Self::Dead => "dead",
        }
    }

    pub(crate) fn parse(stored: &str) -> Option<Self> {
        [Self::Ready, Self::Completed, Self::Rejected, Self::Dead]
            .into_iter()
            .find(|status| status.as_str() == stored)
    }
}

/// A message waiting in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct StoredMessage {
    pub(crate) id: i64,
    pub(crate) sequence: i64,
    pub(crate) operation: String,
    pub(crate) arguments: String,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
}

/// How a message row stands after a write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MessageProgress<'a> {
    pub(crate) status: StoredStatus,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    pub(crate) result: Option<&'a str>,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) finished_at: Option<i64>,
}

/// A message row to insert.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewMessage<'a> {
    pub(crate) sequence: i64,
    pub(crate) operation: &'a str,
    pub(crate) arguments: &'a str,
    pub(crate) request_id: &'a str,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) created_at: i64,
    pub(crate) progress: MessageProgress<'a>,
}

/// A message row as stored, for callers, operators and idempotency checks.
#[derive(Debug, Clone)]
pub(crate) struct MessageRecord {
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) sequence: i64,
    pub(crate) operation: String,
    pub(crate) arguments: String,
    pub(crate) request_id: String,
    pub(crate) status: StoredStatus,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    pub(crate) result: Option<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) finished_at: Option<i64>,
}

/// How to find one message.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MessageLookup<'a> {
    Id(i64),
    RequestId(&'a str),
    IdempotencyKey(ActorKey<'a, 'a>, &'a str),
}

/// The new values of an actor's row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InstanceWrite<'a> {
    /// The new state, or `None` to keep the stored one.
    pub(crate) state: Option<&'a str>,
    pub(crate) revision: i64,
    pub(crate) next_sequence: i64,
    pub(crate) unfinished: i64,
    pub(crate) updated_at: i64,
}

/// A reminder to store (or move).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReminderWrite<'a> {
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
    pub(crate) due_at: i64,
    pub(crate) arguments: &'a str,
}

/// A reminder taken from the store because it is due.
#[derive(Debug, Clone)]
pub(crate) struct DueReminder {
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// An effect a turn emits, to insert with the turn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewEffect<'a> {
    pub(crate) effect_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) payload: &'a str,
    pub(crate) created_at: i64,
}

/// An effect a worker claimed (its attempts already counting this one).
#[derive(Debug, Clone)]
pub(crate) struct ClaimedEffect {
    pub(crate) id: i64,
    pub(crate) effect_id: String,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) payload: String,
    pub(crate) attempts: i64,
}

/// An effect that failed for good, for operators.
#[derive(Debug, Clone)]
pub(crate) struct DeadEffectRecord {
    pub(crate) id: i64,
    pub(crate) effect_id: String,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) payload: String,
    pub(crate) attempts: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) finished_at: Option<i64>,
}

/// Where an effect stands after an attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EffectProgress<'a> {
    /// `ready` (to retry at `available_at`), `done` or `dead`.
    pub(crate) status: &'static str,
    pub(crate) available_at: i64,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) finished_at: Option<i64>,
}

/// Counts of the work the store did, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Write transactions committed.
    pub transactions: u64,
    /// SQL statements run inside write transactions, not counting BEGIN and COMMIT.
    pub statements: u64,
}

/// The counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    transactions: AtomicU64,
    statements: AtomicU64,
}

impl Counters {
    pub(crate) fn statement(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn transaction(&self) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            transactions: self.transactions.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
        }
    }
}

/// A database the runtime keeps its actors in.
#[async_trait]
pub(crate) trait Store: Send + Sync + 'static {
    /// Starts a write transaction; on SQLite it holds the database's write lock.
    async fn begin(&self) -> Result<Box<dyn Transaction>>;

    /// Reads an actor's committed row, outside any write transaction.
    async fn read_instance(&self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>>;

    /// Reads one message, outside any write transaction.
    async fn message(&self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>>;

    /// The dead letters, oldest first, at most `limit`.
    async fn dead_letters(&self, limit: i64) -> Result<Vec<MessageRecord>>;

    /// The effects that failed for good, oldest first, at most `limit`.
    async fn dead_effects(&self, limit: i64) -> Result<Vec<DeadEffectRecord>>;

    /// Actors that have a message available at `now`, at most `limit` of them.
    async fn ready_actors(&self, now: i64, limit: i64) -> Result<Vec<(String, String)>>;

    /// The counters of work done so far.
    fn stats(&self) -> Stats;

    /// Closes the connections.
    async fn close(&self);
}

/// One write transaction. Dropping it without [`commit`](Transaction::commit) rolls it back.
#[async_trait]
pub(crate) trait Transaction: Send {
    /// The actor's row, locked until commit on backends with row locks (waiting for another
    /// transaction that holds it), and created first if missing, so that two writers cannot
    /// both allocate the same sequence number.
    async fn lock_instance(&mut self, actor: ActorKey<'_, '_>) -> Result<Instance>;

    /// The actor's row, locked until commit, or `None` if it does not exist or another
    /// transaction holds it (a worker then moves on to another actor).
    async fn try_lock_instance(&mut self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>>;

    /// The actor's lowest-sequence ready message.
    async fn next_message(&mut self, actor: ActorKey<'_, '_>) -> Result<Option<StoredMessage>>;

    /// Inserts a message row; returns its id.
    async fn insert_message(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: &NewMessage<'_>,
    ) -> Result<i64>;

    /// Records a message's progress: finished, or waiting for a retry.
    async fn update_message(
        &mut self,
        message_id: i64,
        progress: &MessageProgress<'_>,
    ) -> Result<()>;

    /// Writes the actor's row, creating it if needed.
    async fn write_instance(
        &mut self,
        actor: ActorKey<'_, '_>,
        write: &InstanceWrite<'_>,
    ) -> Result<()>;

    /// Allocates the next sequence number for a new ready message (creating the row if
    /// needed) and counts it as unfinished; returns the sequence.
    async fn allocate_sequence(&mut self, actor: ActorKey<'_, '_>, now: i64) -> Result<i64>;

    /// Stores a reminder, replacing the one with the same name and key.
    async fn upsert_reminder(
        &mut self,
        actor: ActorKey<'_, '_>,
        reminder: &ReminderWrite<'_>,
    ) -> Result<()>;

    /// Deletes the reminder with this name and key, if any.
    async fn delete_reminder(
        &mut self,
        actor: ActorKey<'_, '_>,
        name: &str,
        key: &str,
    ) -> Result<()>;

    /// Removes and returns up to `limit` reminders due at `now`, earliest first.
    async fn take_due_reminders(&mut self, now: i64, limit: i64) -> Result<Vec<DueReminder>>;

    /// Stores an effect the turn emitted, ready to run once the turn commits.
    async fn insert_effect(
        &mut self,
        actor: ActorKey<'_, '_>,
        effect: &NewEffect<'_>,
    ) -> Result<()>;

    /// Claims up to `limit` effects named `name` that are due at `now` (ready, or running
    /// with an expired lease), leasing them until `lease_until`.
    async fn claim_effects(
        &mut self,
        name: &str,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedEffect>>;

    /// Records an effect's attempt.
    async fn finish_effect(&mut self, id: i64, progress: &EffectProgress<'_>) -> Result<()>;

    /// Makes a dead effect ready again at `now` with its attempts reset; false if it is not
    /// dead (already retried, say).
    async fn revive_effect(&mut self, id: i64, now: i64) -> Result<bool>;

    /// Reads one message inside this transaction.
    async fn message(&mut self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>>;

    /// Deletes finished (completed or rejected) messages that finished before `before`,
    /// except each actor's newest `keep_keyed` finished messages that carry an idempotency
    /// key, and the effects done before `before`; returns how many rows were deleted.
    async fn prune_finished(&mut self, before: i64, keep_keyed: i64) -> Result<u64>;

    /// Marks the point the handler's own SQL writes roll back to on a rejection or failure.
    async fn savepoint(&mut self) -> Result<()>;

    /// Undoes everything since [`savepoint`](Transaction::savepoint) and releases it.
    async fn rollback_to_savepoint(&mut self) -> Result<()>;

    /// Keeps everything since [`savepoint`](Transaction::savepoint) and releases it.
    async fn release_savepoint(&mut self) -> Result<()>;

    /// The SQLite connection this transaction runs on, if it is SQLite.
    fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        None
    }

    /// The PostgreSQL connection this transaction runs on, if it is PostgreSQL.
    #[cfg(feature = "postgres")]
    fn postgres(&mut self) -> Option<&mut sqlx::PgConnection> {
        None
    }

    /// Commits.
    async fn commit(self: Box<Self>) -> Result<()>;
}
