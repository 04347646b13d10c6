//! The only place SQL lives: the statements as named items grouped by table, small traits
//! by concern that run them on any backend, and a file (or folder) per backend.
//!
//! The engine speaks in rows ([`Instance`], [`StoredMessage`], ...) and never in SQL text.
//! Each table's file (`instances.rs`, `messages.rs`, `reminders.rs`, `effects.rs`,
//! `failed_attempts.rs`, and `admin.rs` for the operators' views and the audit log,
//! `activity.rs` for the operators' charts, `turns.rs` for the statement that ends a turn in
//! both of its tables) holds every statement on it once,
//! as a named constant with its doc comment, and the traits that run them: a reads trait
//! implemented for every store ([`ReadConnections`]) and a writes trait implemented for
//! every transaction ([`WriteConnection`]), each once, for all backends. Where backends
//! spell a statement differently, its item is a function of the [`Dialect`](query::Dialect):
//! that is the one mechanism for dialect differences. A backend file adds only its
//! connections: how it opens and migrates, how a transaction begins, commits and locks its
//! actor, and what it can tell operators. Rows decode in `rows.rs`. Times are microseconds
//! since the Unix epoch, always passed as parameters.
//!
//! A mailbox is ordered by message id. Only an actor's own turns lock its row in
//! `solid_instances`; everything else that reaches an actor (an enqueue, a message from
//! another actor, a fired reminder) appends a message row without that lock. A turn
//! therefore never waits for a second actor's lock, and two actors that send to each other
//! cannot deadlock.

/// `$sql` in a build with the `opentelemetry` feature, and nothing in one without: the part
/// of a statement that reads or writes a `traceparent` column (see
/// [`TraceContext`](crate::trace_context::TraceContext)), so that a build without the feature
/// runs the statements it ran before the column existed.
///
/// `traced!(read "m.traceparent")` is the column read as `, ... AS traceparent`, cut at 56
/// characters: one more than a valid `traceparent` has, so that whatever longer a row holds
/// (SQLite's column takes any text) is read as no context without being read whole.
#[cfg(feature = "opentelemetry")]
macro_rules! traced {
    (read $column:literal) => {
        concat!(", SUBSTR(", $column, ", 1, 56) AS traceparent")
    };
    ($sql:literal) => {
        $sql
    };
}

/// `$sql` in a build with the `opentelemetry` feature, and nothing in one without.
#[cfg(not(feature = "opentelemetry"))]
macro_rules! traced {
    (read $column:literal) => {
        ""
    };
    ($sql:literal) => {
        ""
    };
}

pub(crate) mod activity;
pub(crate) mod activity_tallies;
pub(crate) mod admin;
pub(crate) mod admin_rows;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod connect;
mod dialect;
pub(crate) mod effects;
mod error_kind;
pub(crate) mod errors;
mod failed_attempts;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod failover;
pub(crate) mod instances;
pub(crate) mod messages;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod migration_steps;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod migration_waits;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
mod owned_transaction;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod query;
pub(crate) mod reminders;
mod rows;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod server_pool;
#[cfg(feature = "simulation")]
pub(crate) mod simulated;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
#[cfg(all(feature = "test-support", any(feature = "postgres", feature = "mysql")))]
pub(crate) mod test_databases;
mod turns;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

pub(crate) use self::activity::ActivityReads;
pub(crate) use self::activity_tallies::TallyWrites;
pub(crate) use self::admin::{AdminReads, AdminWrites};
pub(crate) use self::effects::{EffectReads, EffectWrites};
pub(crate) use self::errors::ErrorKinds;
pub(crate) use self::instances::{InstanceReads, InstanceWrites};
pub(crate) use self::messages::{MessageReads, MessageWrites};
use self::query::{Dialect, On};
pub(crate) use self::reminders::{Doomed, ReminderReads, ReminderWrites};
pub(crate) use self::turns::{TurnMessage, TurnWrites};
use crate::error::Result;
use crate::trace_context::TraceContext;

/// What a store does, as it opens, with the solid-objects schema the database holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchemaMode {
    /// Creates it, or applies the migrations it lacks: what an application's runtime does.
    Migrate,
    /// Writes nothing to a database whose schema is not exactly this build's: one without
    /// the schema, one that lacks migrations and one from a newer build are refused.
    RequireCurrent,
}

/// Whether a database whose `solid_schema_migrations` table holds `applied` (`None`: there
/// is no such table) has exactly the migrations of `known`, this build's.
///
/// # Errors
///
/// [`Error::NoSchema`](crate::Error::NoSchema), [`Error::SchemaFromNewerBuild`] or
/// [`Error::SchemaOutOfDate`], as the case is.
///
/// [`Error::SchemaFromNewerBuild`]: crate::Error::SchemaFromNewerBuild
/// [`Error::SchemaOutOfDate`]: crate::Error::SchemaOutOfDate
pub(crate) fn require_current(
    applied: Option<Vec<i64>>,
    known: &[(i64, &str, &str)],
) -> Result<()> {
    let Some(applied) = applied else {
        return Err(crate::Error::NoSchema);
    };
    let newest = applied.iter().copied().max().unwrap_or_default();
    let newest_known = known
        .iter()
        .map(|(version, ..)| *version)
        .max()
        .unwrap_or_default();
    if newest > newest_known {
        return Err(crate::Error::SchemaFromNewerBuild {
            applied: newest,
            known: newest_known,
        });
    }
    if known.iter().any(|(version, ..)| !applied.contains(version)) {
        return Err(crate::Error::SchemaOutOfDate {
            applied: newest,
            known: newest_known,
        });
    }
    Ok(())
}

/// The address of one actor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActorKey<'t, 'i> {
    pub(crate) actor_type: &'t str,
    pub(crate) actor_id: &'i str,
}

/// An actor's row: its state.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// The state as JSON; `None` until a turn first commits state.
    pub(crate) state: Option<String>,
    pub(crate) revision: i64,
    /// Which life of the actor this is: destroying it starts the next.
    pub(crate) incarnation: i64,
    /// The version of the actor's state type that wrote `state`.
    pub(crate) state_version: i64,
    /// Whether an operator paused the actor: it runs nothing until resumed.
    pub(crate) paused: bool,
}

impl Instance {
    /// Whether the actor never held state: its first incarnation, never written, not paused
    /// (or it has no row at all).
    pub(crate) fn never_lived(&self) -> bool {
        self.state.is_none() && self.revision == 0 && self.incarnation == 1 && !self.paused
    }

    /// Where this row stands: its incarnation and revision.
    pub(crate) fn version(&self) -> Version {
        Version {
            incarnation: self.incarnation,
            revision: self.revision,
        }
    }
}

/// A stored operation and its arguments (a ready message's, or a scheduled reminder's).
#[derive(Debug)]
pub(crate) struct StoredArguments {
    /// The message's or the reminder's row id.
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    /// The operation (a reminder's name).
    pub(crate) operation: String,
    /// The arguments as stored (JSON text).
    pub(crate) arguments: String,
}

/// Where an actor's committed state stands: which life of the actor, and which revision in
/// it. A later commit is greater: a turn adds one to the revision, and destroying an actor
/// adds one to its incarnation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    pub(crate) incarnation: i64,
    pub(crate) revision: i64,
}

impl Version {
    /// No version any row has: what a lock binds when the caller holds no state in memory.
    pub(crate) const NONE: Version = Version {
        incarnation: -1,
        revision: -1,
    };
}

/// A notice that some process committed a state of an actor.
#[derive(Debug, Clone)]
pub(crate) struct StateNotice {
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) version: Version,
}

impl Default for Instance {
    /// An actor never written: its first incarnation, no state.
    fn default() -> Self {
        Self {
            state: None,
            revision: 0,
            incarnation: 1,
            state_version: 1,
            paused: false,
        }
    }
}

/// What a turn's lock does when another transaction holds its actor's row, or the row is
/// missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockWait {
    /// Waits for a turn elsewhere until the transaction's deadline (then an error that
    /// [`Error::is_busy`](crate::error::Error::is_busy) recognises); creates a missing row.
    Wait,
    /// Skips an actor another transaction holds (`None`); creates a missing row.
    Skip,
    /// Skips an actor another transaction holds, and one whose row is missing (`None`):
    /// creating the row would wait for another transaction that inserts it too.
    SkipMissing,
}

/// What [`Transaction::lock_actor`] locks, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActorLock<'t, 'i> {
    /// The actor whose row is locked.
    pub(crate) actor: ActorKey<'t, 'i>,
    /// What the lock does when another transaction holds the row, or the row is missing.
    pub(crate) wait: LockWait,
    /// The time the head of the mailbox is read as of, in microseconds.
    pub(crate) now: i64,
    /// The version of a state the caller holds in memory: a row still at it is locked
    /// without its state being read.
    pub(crate) known: Option<Version>,
}

impl<'t, 'i> ActorLock<'t, 'i> {
    /// Locks `actor` as of `now`, waiting for a turn elsewhere (and creating a missing row),
    /// with no state held in memory.
    pub(crate) fn waiting(actor: ActorKey<'t, 'i>, now: i64) -> Self {
        Self {
            actor,
            wait: LockWait::Wait,
            now,
            known: None,
        }
    }
}

/// An actor locked by a transaction: its row and the head of its mailbox.
#[derive(Debug, Clone)]
pub(crate) struct LockedActor {
    pub(crate) instance: Instance,
    /// The lowest-id ready message, if any (due or not).
    pub(crate) head: Option<StoredMessage>,
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoredStatus {
    Ready,
    Completed,
    Rejected,
    Dead,
    /// Its actor was destroyed before it ran.
    Destroyed,
}

impl StoredStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Completed => "completed",
            Self::Rejected => "rejected",
            Self::Dead => "dead",
            Self::Destroyed => "destroyed",
        }
    }

    pub(crate) fn parse(stored: &str) -> Option<Self> {
        [
            Self::Ready,
            Self::Completed,
            Self::Rejected,
            Self::Dead,
            Self::Destroyed,
        ]
        .into_iter()
        .find(|status| status.as_str() == stored)
    }
}

/// A message waiting in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct StoredMessage {
    pub(crate) id: i64,
    pub(crate) operation: String,
    pub(crate) arguments: String,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    /// The incarnation a fired reminder's message belongs to; `None`: the current one.
    pub(crate) incarnation: Option<i64>,
    /// For a reminder's message, the time its occurrence was scheduled for.
    pub(crate) scheduled_for: Option<i64>,
    /// The context of the span that sent it: its turn's span continues that trace.
    pub(crate) trace: TraceContext,
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
    /// When the attempt this progress records failed (it leaves a row in
    /// `solid_failed_attempts` beside the message's); `None` for any other progress.
    pub(crate) failed_at: Option<i64>,
}

/// A message row to insert.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewMessage<'a> {
    pub(crate) operation: &'a str,
    pub(crate) arguments: &'a str,
    pub(crate) request_id: &'a str,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) created_at: i64,
    pub(crate) progress: MessageProgress<'a>,
    /// For a fired reminder: the incarnation it belongs to and its occurrence's time.
    pub(crate) incarnation: Option<i64>,
    pub(crate) scheduled_for: Option<i64>,
    /// The context of the span that sent it (a caller's, a turn's, an effect run's).
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub(crate) trace: TraceContext,
}

/// A message row as stored, for callers, operators and idempotency checks.
#[derive(Debug, Clone)]
pub(crate) struct MessageRecord {
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) operation: String,
    pub(crate) arguments: String,
    pub(crate) request_id: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) status: StoredStatus,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    pub(crate) result: Option<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) finished_at: Option<i64>,
    /// The message an operator's retry of this dead letter enqueued.
    pub(crate) retried_as: Option<i64>,
    /// For a fired reminder (or an effect's reply): the incarnation it belongs to, and the
    /// time its occurrence was scheduled for.
    pub(crate) incarnation: Option<i64>,
    pub(crate) scheduled_for: Option<i64>,
}

/// An actor as committed, read without locking it.
#[derive(Debug, Clone)]
pub(crate) struct CommittedActor {
    /// Its row, if a turn ever wrote one.
    pub(crate) instance: Option<Instance>,
    /// Whether its mailbox holds no ready message.
    pub(crate) mailbox_empty: bool,
}

/// The head of a mailbox whose operation this build does not know.
#[derive(Debug, Clone)]
pub(crate) struct UnknownHead {
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) operation: String,
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
    pub(crate) state: &'a str,
    pub(crate) revision: i64,
    pub(crate) state_version: i64,
    pub(crate) updated_at: i64,
}

/// A reminder to store (or move).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReminderWrite<'a> {
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
    pub(crate) due_at: i64,
    pub(crate) arguments: &'a str,
    pub(crate) incarnation: i64,
    /// For a recurring reminder: its interval in microseconds, and what to do with missed
    /// occurrences (`latest` or `all`).
    pub(crate) every: Option<i64>,
    pub(crate) missed: Option<&'a str>,
    /// The context of the turn that scheduled it, which its occurrences' turns continue.
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub(crate) trace: TraceContext,
}

/// A reminder taken from the store because it is due.
#[derive(Debug, Clone)]
pub(crate) struct DueReminder {
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
    pub(crate) due_at: i64,
    pub(crate) incarnation: i64,
    pub(crate) every: Option<i64>,
    pub(crate) missed: Option<String>,
    /// The context of the turn that scheduled it.
    pub(crate) trace: TraceContext,
}

/// A scheduled reminder as an operator lists it.
#[derive(Debug, Clone)]
pub(crate) struct ReminderRecord {
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) due_at: i64,
    pub(crate) every: Option<i64>,
    pub(crate) missed: Option<String>,
}

/// An effect a turn emits, to insert with the turn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewEffect<'a> {
    pub(crate) effect_id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) payload: &'a str,
    pub(crate) created_at: i64,
    pub(crate) incarnation: i64,
    pub(crate) on_success: Option<&'a str>,
    pub(crate) on_failure: Option<&'a str>,
    /// The context of the turn that emitted it, which its runs continue.
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub(crate) trace: TraceContext,
}

/// An effect a worker claimed (its attempts already counting this one).
#[derive(Debug, Clone)]
pub(crate) struct ClaimedEffect {
    pub(crate) id: i64,
    pub(crate) effect_id: String,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) payload: String,
    pub(crate) attempts: i64,
    /// The claim's number, which never repeats for one effect: the lease's token, which
    /// finishing checks.
    pub(crate) claims: i64,
    /// The incarnation of the actor whose turn emitted it; its replies belong to it.
    pub(crate) incarnation: i64,
    /// The commands its outcome goes to, as stored (`StoredReply` JSON).
    pub(crate) on_success: Option<String>,
    pub(crate) on_failure: Option<String>,
    /// When the turn that emitted it committed (by the runtime's clock).
    pub(crate) created_at: i64,
    /// The error of its last attempt: a failure the handler returned, or, if this claim
    /// took it over from a runner whose lease ran out, that that runner stopped.
    pub(crate) last_error: Option<String>,
    /// The context of the turn that emitted it.
    pub(crate) trace: TraceContext,
}

/// Unfinished effects of one kind, for operators.
#[derive(Debug, Clone)]
pub(crate) struct PendingEffects {
    pub(crate) name: String,
    pub(crate) count: i64,
    pub(crate) oldest_created_at: i64,
}

/// Where an effect stands after an attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EffectProgress<'a> {
    /// `ready` (to retry at `available_at`), `done` or `dead`.
    pub(crate) status: &'static str,
    /// Attempts made (a claim that found no attempt left does not count).
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) finished_at: Option<i64>,
}

/// What retention deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retention {
    /// Completed, rejected and destroyed messages and done effects that finished before
    /// this time.
    pub(crate) finished_before: i64,
    /// Dead letters and dead effects that died before this time (`None`: keep them).
    pub(crate) dead_before: Option<i64>,
    /// Each actor's newest finished messages with an idempotency key that are kept anyway.
    pub(crate) keep_keyed: i64,
}

/// How long the waits of one transaction may last, enforced by the database itself so a
/// caller that gives up leaves nothing waiting behind it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The caller's deadline: for a connection, for the database's write lock (SQLite) and
    /// for the actor's row lock (PostgreSQL).
    pub(crate) deadline: Instant,
    /// The longest one statement, or one wait inside the database, may last (the turn
    /// timeout, or less if the caller's deadline comes first): PostgreSQL's
    /// `statement_timeout` and `lock_timeout`, and on MySQL a cap on any lock wait but the
    /// caller's wait for its actor (a PostgreSQL caller whose deadline is further than the
    /// turn timeout waits again, in a new transaction, until its deadline).
    pub(crate) statement: Duration,
    /// Run outside any group commit (SQLite): a turn that ran past its group's budget once
    /// runs again as the first of a group of its own, with no budget. PostgreSQL has no
    /// groups.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) alone: bool,
    /// The transaction's first statement is [`Transaction::lock_actor`] (a turn's): on
    /// SQLite that statement then carries the `BEGIN` (or a group member's savepoint).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) locks_first: bool,
}

impl Bounds {
    /// The time left until the deadline, at most one statement's bound and at least a
    /// millisecond (a zero would mean "no limit" to the databases).
    pub(crate) fn remaining(&self) -> Duration {
        self.until_deadline().min(self.statement)
    }

    /// The time left until the deadline, at least a millisecond: how long a caller waits for
    /// its actor's lock.
    pub(crate) fn until_deadline(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }
}

/// Counts of the work the store did, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Write transactions committed.
    pub transactions: u64,
    /// Commits the database made durable: one per transaction, except on SQLite, where one
    /// commit carries every transaction of its group ([`GroupCommit`](crate::GroupCommit)).
    pub commits: u64,
    /// SQL statements run inside write transactions, not counting BEGIN and COMMIT.
    pub statements: u64,
    /// Notices of work committed by another process that reached this runtime's workers
    /// (PostgreSQL's `LISTEN`, MySQL's wake-up bell; always 0 on SQLite, whose workers
    /// poll).
    pub work_notices: u64,
    /// Transactions waiting for SQLite's writer at this moment, a gauge (0 on PostgreSQL,
    /// and on an application's own SQLite pool, whose waits are sqlx's).
    pub waiting_for_writer: u64,
    /// Turns of synchronous calls written inside another call's transaction, as members of
    /// its group ([`GroupCommit`](crate::GroupCommit)): they are in no count of
    /// `transactions` of their own.
    pub grouped_turns: u64,
    /// Passes the runtime's workers made over the due reminders, the ready mailboxes and the
    /// due effects, idle polls included (an idle pass may begin no transaction).
    pub worker_passes: u64,
    /// Turns that conflicted with another transaction (a Galera node certified another
    /// write first, a PostgreSQL serialization failure or deadlock) and were run again or
    /// left for a later pass: never counted as a failed attempt.
    pub conflicts: u64,
    /// Turns whose commit went unanswered (the connection was lost at `COMMIT`) and whose
    /// message was read back to learn whether it was kept.
    pub commits_in_doubt: u64,
}

/// The counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    transactions: AtomicU64,
    commits: AtomicU64,
    statements: AtomicU64,
    work_notices: AtomicU64,
    waiting_for_writer: AtomicU64,
    grouped_turns: AtomicU64,
    worker_passes: AtomicU64,
    conflicts: AtomicU64,
    commits_in_doubt: AtomicU64,
}

impl Counters {
    pub(crate) fn statement(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn transaction(&self) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn grouped_turn(&self) {
        self.grouped_turns.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn commit_in_doubt(&self) {
        self.commits_in_doubt.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn worker_pass(&self) {
        self.worker_passes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn commit(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a committed transaction, and its commit if it was one of its own (not a
    /// group's, whose commit the group counts).
    pub(crate) fn committed(&self, alone: bool) {
        self.transaction();
        if alone {
            self.commit();
        }
    }

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn work_notice(&self) {
        self.work_notices.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a transaction waiting for the writer until the guard drops.
    #[cfg(feature = "sqlite")]
    pub(crate) fn wait_for_writer(&self) -> WaitingForWriter<'_> {
        self.waiting_for_writer.fetch_add(1, Ordering::AcqRel);
        WaitingForWriter(self)
    }

    /// Whether any transaction waits for the writer.
    #[cfg(feature = "sqlite")]
    pub(crate) fn writer_awaited(&self) -> bool {
        self.waiting_for_writer.load(Ordering::Acquire) > 0
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            transactions: self.transactions.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            work_notices: self.work_notices.load(Ordering::Relaxed),
            waiting_for_writer: self.waiting_for_writer.load(Ordering::Acquire),
            grouped_turns: self.grouped_turns.load(Ordering::Relaxed),
            worker_passes: self.worker_passes.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            commits_in_doubt: self.commits_in_doubt.load(Ordering::Relaxed),
        }
    }
}

/// A transaction counted as waiting for the writer while it exists.
#[cfg(feature = "sqlite")]
pub(crate) struct WaitingForWriter<'c>(&'c Counters);

#[cfg(feature = "sqlite")]
impl Drop for WaitingForWriter<'_> {
    fn drop(&mut self) {
        self.0.waiting_for_writer.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A store's read connections, on which the reads traits run their statements.
pub(crate) trait ReadConnections: Send + Sync {
    /// Where reads run: the store's read pool.
    fn readers(&self) -> On<'_>;

    /// The SQL the store speaks.
    fn dialect(&self) -> Dialect {
        self.readers().dialect()
    }
}

/// A write transaction's connection, on which the writes traits run their statements.
pub(crate) trait WriteConnection: Send {
    /// Where the transaction's statements run.
    fn on(&mut self) -> On<'_>;

    /// The SQL the transaction speaks.
    fn dialect(&mut self) -> Dialect {
        self.on().dialect()
    }

    /// The store's counters, which count each statement.
    fn counters(&self) -> &Counters;

    /// Marks the connection as in an unknown state: it is closed, not reused, when the
    /// transaction is dropped.
    fn poison(&mut self);

    /// Whether a `DELETE` can return the rows it deleted (`RETURNING`): SQLite, PostgreSQL
    /// and MariaDB can, MySQL cannot.
    fn deletes_return_rows(&mut self) -> bool {
        self.dialect() != Dialect::MySql
    }
}

/// Every read of a store, by concern: what the engine lends the client and the operators'
/// API, which read the store but write only through the engine.
pub(crate) trait Reads:
    InstanceReads + MessageReads + ReminderReads + EffectReads + AdminReads + ActivityReads
{
}

impl<S: ReadConnections> Reads for S {}

/// A database the runtime keeps its actors in: its reads by concern, and what each backend
/// does its own way.
#[async_trait]
pub(crate) trait Store:
    ReadConnections
    + InstanceReads
    + MessageReads
    + ReminderReads
    + EffectReads
    + AdminReads
    + ActivityReads
    + Send
    + Sync
    + 'static
{
    /// The store's reads, by concern.
    fn reads(&self) -> &dyn Reads;

    /// Starts a write transaction within `bounds`; on SQLite it holds the database's write
    /// lock. A wait past the deadline ends in an error that
    /// [`Error::is_busy`](crate::error::Error::is_busy) recognises.
    async fn begin(&self, bounds: Bounds) -> Result<Box<dyn Transaction>>;

    /// Notices of the states any process commits, for watchers; `None` where the database
    /// has none to give (SQLite: watchers poll the revisions, and commits in this process
    /// reach them directly).
    async fn listen_states(&self) -> Result<Option<Box<dyn StateNotices>>> {
        Ok(None)
    }

    /// Says that the runtime `watcher` listens for the commits of `actors` (a JSON array of
    /// `[type, id]` pairs, every actor it watches) for `lease` from now, so their commits
    /// notify; forgets the actors it no longer watches, and the leases that ran out. Nothing
    /// where commits are not notified (SQLite).
    async fn announce_watched(
        &self,
        _watcher: &str,
        _actors: &str,
        _lease: Duration,
    ) -> Result<()> {
        Ok(())
    }

    /// Waits, until `deadline`, for the database to accept writes again after a connection
    /// to it was lost (a server restarting, a failover under way): `Ok` once it does,
    /// [`Error::DatabaseUnavailable`](crate::Error::DatabaseUnavailable) at the deadline.
    /// A store that cannot tell (SQLite, MySQL) returns at once, and the next transaction
    /// finds out.
    async fn reconnect(&self, _deadline: Instant) -> Result<()> {
        Ok(())
    }

    /// Tells other processes, where the database carries no notice of its own, that a
    /// transaction just committed work (MySQL rings its bell; PostgreSQL's triggers notify,
    /// and SQLite's processes poll). It never waits.
    fn work_committed(&self) {}

    /// The counters of work done so far.
    fn counters(&self) -> &Counters;

    /// What the counters have counted so far.
    fn stats(&self) -> Stats {
        self.counters().snapshot()
    }

    /// How many actors' turns one worker pass runs at once: on SQLite's writer with group
    /// commit, turns that queue together share a commit; elsewhere one at a time.
    fn concurrent_turns(&self) -> usize {
        1
    }

    /// Whether one transaction writes at a time (SQLite): turns of different actors then
    /// never run side by side, and the writer groups their commits itself.
    fn single_writer(&self) -> bool {
        false
    }

    /// Closes the connections.
    async fn close(&self);

    /// Notices of work committed by any process, for idle workers; `None` where the
    /// database has none to give (SQLite: its workers poll, and commits in this process wake
    /// them directly).
    async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>>;

    /// The backend's name, and the newest schema version this build knows.
    fn schema(&self) -> (&'static str, i64);

    /// The settings that matter to operators, by name.
    async fn settings(&self) -> Result<Vec<(String, String)>>;

    /// The database server's clock in microseconds, where it has its own.
    async fn database_micros(&self) -> Result<Option<i64>>;
}

/// Notices that some process committed work.
#[async_trait]
pub(crate) trait WorkNotices: Send {
    /// Waits for the next notice, or for a moment when notices may have been lost (the
    /// connection that carries them came back): either way the workers look for work.
    async fn next(&mut self) -> Result<()>;
}

/// Notices of states committed by any process.
#[async_trait]
pub(crate) trait StateNotices: Send {
    /// Waits for the next notice; `None` when notices may have been lost (the connection
    /// dropped, and the next call connects again).
    async fn next(&mut self) -> Result<Option<StateNotice>>;
}

/// One write transaction: its writes by concern, and how the backend locks an actor and
/// ends the transaction.
///
/// Dropped without [`commit`](Transaction::commit), it rolls back; a
/// transaction dropped while its state is unknown (in the middle of beginning, committing,
/// or after a savepoint failed) closes its connection instead of returning it to the pool.
#[async_trait]
pub(crate) trait Transaction:
    WriteConnection
    + InstanceWrites
    + MessageWrites
    + ReminderWrites
    + EffectWrites
    + AdminWrites
    + TallyWrites
    + TurnWrites
    + Savepoints
{
    /// Locks the actor's row until commit (creating it first if missing, so that two callers
    /// of a new actor take turns, unless the lock's `wait` says otherwise) and reads the head
    /// of its mailbox; `wait` says what it does when another transaction holds the actor, or
    /// its row is missing. The head is as of the lock's `now`.
    ///
    /// When the row is still at the lock's `known` version (a state the caller holds in
    /// memory), its state is not read: the locked instance has that version and no state.
    async fn lock_actor(&mut self, lock: ActorLock<'_, '_>) -> Result<Option<LockedActor>>;

    /// When this transaction must be done by for the sake of the group commit it joined
    /// (SQLite): earlier members wait for it. `None` outside a group, or as its first member.
    fn group_budget(&self) -> Option<Instant> {
        None
    }

    /// The SQLite connection this transaction runs on, if it is SQLite.
    #[cfg(feature = "sqlite")]
    fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        None
    }

    /// The PostgreSQL connection this transaction runs on, if it is PostgreSQL.
    #[cfg(feature = "postgres")]
    fn postgres(&mut self) -> Option<&mut sqlx::PgConnection> {
        None
    }

    /// The connection, on MySQL and MariaDB.
    #[cfg(feature = "mysql")]
    fn mysql(&mut self) -> Option<&mut sqlx::MySqlConnection> {
        None
    }

    /// Commits.
    async fn commit(self: Box<Self>) -> Result<()>;

    /// Rolls back now, so its locks are released before the caller goes on (dropping a
    /// transaction rolls back too, but on PostgreSQL only once the pool gets the connection
    /// back).
    async fn rollback(self: Box<Self>) -> Result<()>;
}

/// The savepoint a turn's handler writes behind: its own SQL rolls back to it on a
/// rejection or failure.
#[async_trait]
pub(crate) trait Savepoints: Send {
    /// Marks the point the handler's own SQL writes roll back to on a rejection or failure.
    async fn savepoint(&mut self) -> Result<()>;

    /// Undoes everything since [`savepoint`](Savepoints::savepoint) and releases it.
    async fn rollback_to_savepoint(&mut self) -> Result<()>;

    /// Keeps everything since [`savepoint`](Savepoints::savepoint) and releases it.
    async fn release_savepoint(&mut self) -> Result<()>;

    /// Marks where the turn of a group's member begins, inside the group's transaction.
    async fn member_savepoint(&mut self) -> Result<()>;

    /// Undoes everything since [`member_savepoint`](Savepoints::member_savepoint); the
    /// savepoint stays, and the group's `COMMIT` ends it.
    async fn rollback_member(&mut self) -> Result<()>;
}

/// Sets the savepoint of a turn.
const SAVEPOINT: &str = "SAVEPOINT solid_turn";

/// Undoes everything since [`SAVEPOINT`].
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT solid_turn";

/// Releases [`SAVEPOINT`].
const RELEASE_SAVEPOINT: &str = "RELEASE SAVEPOINT solid_turn";

/// Sets the savepoint of a group's member.
const MEMBER_SAVEPOINT: &str = "SAVEPOINT solid_grouped";

/// Undoes everything since [`MEMBER_SAVEPOINT`].
const ROLLBACK_MEMBER: &str = "ROLLBACK TO SAVEPOINT solid_grouped";

/// Runs a savepoint statement; if it fails, nobody knows what the transaction holds any
/// more (a handler may have ended it behind the runtime's back), so its connection is not
/// reused.
async fn on_savepoint<T: WriteConnection>(tx: &mut T, sql: &'static str) -> Result<()> {
    let done = query::query(sql).execute(tx.on()).await;
    if done.is_err() {
        tx.poison();
    }
    done?;
    Ok(())
}

#[async_trait]
impl<T: WriteConnection> Savepoints for T {
    async fn savepoint(&mut self) -> Result<()> {
        self.counters().statement();
        on_savepoint(self, SAVEPOINT).await
    }

    async fn rollback_to_savepoint(&mut self) -> Result<()> {
        self.counters().statement();
        on_savepoint(self, ROLLBACK_TO_SAVEPOINT).await?;
        on_savepoint(self, RELEASE_SAVEPOINT).await
    }

    async fn release_savepoint(&mut self) -> Result<()> {
        self.counters().statement();
        on_savepoint(self, RELEASE_SAVEPOINT).await
    }

    async fn member_savepoint(&mut self) -> Result<()> {
        self.counters().statement();
        on_savepoint(self, MEMBER_SAVEPOINT).await
    }

    async fn rollback_member(&mut self) -> Result<()> {
        self.counters().statement();
        on_savepoint(self, ROLLBACK_MEMBER).await
    }
}

#[cfg(test)]
mod tests {
    use super::query::Dialect;
    use super::{effects, instances, messages, reminders};

    /// Every statement that reads or writes a `traceparent` column, in each dialect.
    fn traced_statements() -> Vec<&'static str> {
        let mut statements = vec![
            messages::HEAD_OF_MAILBOX,
            reminders::UPSERT_REMINDER,
            effects::INSERT_EFFECT,
            effects::CLAIMED_EFFECT,
            #[cfg(feature = "sqlite")]
            instances::INSTANCE_AND_HEAD,
            #[cfg(feature = "postgres")]
            instances::LOCK_ACTOR_AND_HEAD,
        ];
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            statements.push(reminders::due_reminders(dialect));
            statements.push(effects::claim_effect(dialect));
        }
        statements
    }

    #[test]
    fn only_a_build_with_the_trace_context_names_its_column() {
        for statement in traced_statements() {
            assert_eq!(
                statement.contains("traceparent"),
                cfg!(feature = "opentelemetry"),
                "{statement}"
            );
        }
    }
}
