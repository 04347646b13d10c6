//! The engine, the only layer that writes: it runs turns against a store. No SQL text here.
//!
//! Each of the engine's jobs is a file named for it, holding that job's functions and, where
//! the job keeps state of its own, its type; [`Engine`] holds the store, the configuration
//! and those types, and no file reaches into another job's state. No function on the turn
//! path is longer than a screen: a turn is named steps, in the order it takes them.
//!
//! - registry: `registry` ([`Registry`]: the actor types by stored name, with their runners);
//! - calls: `call` (synchronous calls; `Call`, a call in progress, whose steps are its
//!   methods), `ask` (ordered reads and snapshots), `enqueue` (messages at a mailbox's
//!   tail), `destroy` (ending an incarnation);
//! - groups: `groups` ([`Groups`]: calls that share one transaction, their leaders and
//!   members), `call_in_group` (a call's turn as a group's member);
//! - one mailbox step: `mailbox_step` (lock the actor, take the head, decode it, run its turn);
//! - one turn: `one_turn` (the handler to the commit, step by step), `settle` (what a
//!   handler's result commits), `turn_writes` (a completed turn's writes, checked and written);
//! - attempts: `attempts` (how many a message gets, and counting one outside a turn);
//! - reminders: `reminders` (firing due ones, listing an actor's; `UnreadableReminders`);
//! - workers: `workers` (a pass over ready actors; `Workers`: claims, stalls, samples);
//! - upkeep: `upkeep` (retention, unhandled effects, unknown operations), `activity_fold`
//!   (the charts' tallies of the minutes that ended), `dead_letters`
//!   (an operator's retry) and `pause` (an operator's pause and resume);
//! - effects: `effects` (claims, leases, outcomes and replies; `EffectKinds`);
//! - watchers: `watchers` (`Watchers`: commits told to the actors' subscribers);
//! - conflicts: `conflicts` (a transaction that lost to another's write, run again);
//! - `written` (a turn's writes before its commit, or why it committed nothing);
//! - and `outcome`, what a caller sees of a finished message.
//!
//! The rule behind all of it: every way a turn can fail is an attempt on its message, which
//! backs off and ends as completed, rejected or dead. Only three things commit nothing and
//! count nothing: a conflict with another transaction (the turn runs again at once), a
//! caller whose deadline passed (the message stays for later), and an operation this build
//! does not know (left for a build that knows it). A turn whose `COMMIT` ended in doubt (its
//! connection was lost with it, or its group commit failed) is read back by its message:
//! found, it committed once; not found once the actor's lock is held again, it runs again.

mod activity_fold;
mod ask;
mod attempts;
mod call;
mod call_in_group;
mod conflicts;
mod core;
mod destroy;
mod effect_kinds;
mod effects;
mod enqueue;
mod groups;
mod mailbox_step;
mod one_turn;
mod operator_writes;
mod outcome;
mod registry;
mod reminders;
mod settle;
mod state_cache;
mod tail;
mod turn_writes;
mod upkeep;
mod watchers;
mod workers;
mod written;

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::actor::Actor;
use crate::error::{Error, Result};
use crate::limits::{Limits, RetryPolicy};
use crate::store::{ActorKey, Instance, LockWait, Reads, Stats, Store, WorkNotices};
use crate::time::clock::Clock;

// The stored-time conversions (the `time` leaf), in scope for the engine's files.
pub(crate) use self::core::Core;
use crate::time::{from_micros, micros};
pub(crate) use activity_fold::ActivityFold;
pub(crate) use call::CallOptions;
pub(crate) use call::Calls;
pub(crate) use destroy::Destroy;
pub(crate) use effect_kinds::EffectKinds;
pub(crate) use effects::{effect_span, Effects};
pub(crate) use enqueue::EnqueueOptions;
pub(crate) use one_turn::Turns;
pub(crate) use operator_writes::OperatorWrites;
pub(crate) use outcome::{stored_rejection, Outcome};
pub(crate) use registry::Registry;
pub(crate) use reminders::Reminders;
pub(crate) use state_cache::StateCache;
pub(crate) use upkeep::Upkeep;
pub(crate) use watchers::{shut_down, Subscription, Watchers};
pub(crate) use workers::WorkerPass;
pub(crate) use workers::{Pass, TurnErrors};

/// How often a caller waiting on another task's turn looks at its message again, at most.
const WAIT_POLL: Duration = Duration::from_millis(25);

/// How many entries the engine's in-memory maps hold at most, so that nothing a database or
/// a caller does can grow them without bound.
const MAP_CAPACITY: usize = 10_000;

/// What an engine is configured with.
#[derive(Clone)]
pub(crate) struct EngineConfig {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) limits: Limits,
    pub(crate) retry: RetryPolicy,
    /// How long a handler may run before it is abandoned and its attempt counted.
    pub(crate) turn_timeout: Duration,
    /// How long a claimed effect belongs to its runner without a renewal.
    pub(crate) effect_lease: Duration,
    /// How long an effect handler may run before it is abandoned and its attempt counted.
    pub(crate) effect_timeout: Duration,
    /// How the turns of calls that arrive together share a transaction.
    pub(crate) group_commit: crate::limits::GroupCommit,
    /// How often watchers poll for commits of other processes where none are notified.
    pub(crate) watch_poll: Duration,
    /// Whether watchers `LISTEN` for other processes' commits where the database can.
    pub(crate) listen: bool,
    /// The most bytes of committed state text kept in memory between turns (0: none).
    pub(crate) state_cache_bytes: usize,
}

/// Runs turns against a store: the [`Core`] every job borrows, and the state of each job
/// that keeps one. Each job is a small type built here over what it needs.
pub(crate) struct Engine {
    core: Core,
    /// The actor types this runtime can run.
    registry: Registry,
    /// The effect kinds this runtime has handlers for, with their retry policies.
    effect_kinds: Arc<EffectKinds>,
    /// What the workers of this process share.
    workers: workers::Workers,
    /// Reminder rows that did not read, left alone for a while.
    unreadable_reminders: reminders::UnreadableReminders,
    /// The watched actors, told of every commit that changes a state.
    watchers: Arc<Watchers>,
    /// The large states this process committed, so its next turns need not read them back.
    states: StateCache,
    /// The groups of synchronous calls whose turns share a transaction.
    groups: groups::Groups,
    /// Since when this process's folds of the charts' tallies wait for older transactions.
    folds_held_back: activity_fold::HeldBack,
}

/// What the doctor reports of a database ([`Engine::describe_database`]).
pub(crate) struct DatabaseFacts {
    /// `sqlite`, `postgres` or `mysql`.
    pub(crate) backend: &'static str,
    /// The newest migration this build knows.
    pub(crate) known_migration: i64,
    /// The migrations the database has applied.
    pub(crate) applied_migrations: Vec<i64>,
    /// Its settings that matter to operators, by name.
    pub(crate) settings: Vec<(String, String)>,
    /// Its clock, in microseconds, where it has one of its own (a server).
    pub(crate) clock_micros: Option<i64>,
}

/// What one turn did.
#[derive(Debug)]
pub(crate) struct TurnReport {
    /// The turn's message; `None` for a fresh call's rejection that kept no row.
    pub(crate) message_id: Option<i64>,
    pub(crate) outcome: Outcome,
}

/// What asking an actor to run its next message did.
#[derive(Debug)]
pub(crate) enum Step {
    /// A turn ran (or a failed attempt was counted).
    Ran(TurnReport),
    /// The mailbox has nothing ready.
    Idle,
    /// The head of the mailbox is not due until `until` (strict order holds the rest).
    Blocked {
        message_id: i64,
        until: DateTime<Utc>,
        /// Its failed attempts so far: 0 for a message enqueued with a delay.
        attempts: i64,
    },
    /// Another turn (in another task or process) held the actor, or the database, until
    /// the caller's deadline.
    Busy,
}

impl Step {
    /// What the message `message_id` waits on, said to a caller whose time ran out after
    /// this step.
    pub(crate) fn waiting_on(&self, message_id: i64) -> String {
        match self {
            Self::Blocked {
                message_id: ahead,
                until,
                attempts,
            } => {
                let whose = if *ahead == message_id {
                    "it".to_owned()
                } else {
                    format!("message {ahead} ahead of it")
                };
                // Only a message that failed heads its mailbox before it is due.
                format!("{whose} failed {attempts} times and is retried at {until}")
            }
            Self::Ran(_) | Self::Idle | Self::Busy => {
                "the actor's earlier messages, which another task or process was running".to_owned()
            }
        }
    }
}

/// How a turn takes its actor's lock (a row lock on PostgreSQL; SQLite's single writer
/// already excludes every other turn).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lock {
    /// Skip an actor whose lock another turn holds: workers move on to other actors.
    Skip,
    /// Wait for the lock until the caller's deadline: callers wait for the actor.
    WaitUntil(Instant),
}

impl Lock {
    fn waits(self) -> bool {
        matches!(self, Self::WaitUntil(_))
    }

    /// What the store's lock does when another turn holds the actor.
    fn wait(self) -> LockWait {
        match self {
            Self::Skip => LockWait::Skip,
            Self::WaitUntil(_) => LockWait::Wait,
        }
    }

    fn deadline(self) -> Option<Instant> {
        match self {
            Self::Skip => None,
            Self::WaitUntil(deadline) => Some(deadline),
        }
    }
}

impl Engine {
    /// An engine over `store`, with no actor types or effect handlers registered yet.
    pub(crate) fn new(store: Arc<dyn Store>, config: EngineConfig) -> Self {
        crate::metrics::describe();
        let watchers = Arc::new(Watchers::new(config.watch_poll, config.listen));
        let across_actors = !store.single_writer();
        let effect_kinds = Arc::new(EffectKinds::new(config.retry));
        Self {
            groups: groups::Groups::new(config.group_commit, across_actors),
            registry: Registry::new(Arc::clone(&effect_kinds)),
            workers: workers::Workers::default(),
            unreadable_reminders: reminders::UnreadableReminders::default(),
            folds_held_back: activity_fold::HeldBack::default(),
            effect_kinds,
            watchers,
            states: StateCache::new(config.state_cache_bytes),
            core: Core::new(store, config),
        }
    }

    /// The store, the configuration, the clock and the wake-ups every job works through.
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// The actor types this runtime can run.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The effect handlers of this runtime.
    pub(crate) fn effect_kinds(&self) -> &EffectKinds {
        &self.effect_kinds
    }

    /// Makes `A` known to this engine, so workers and the testing API can run its messages;
    /// in a runtime that runs effects, refuses a type that declares an effect it has no
    /// handler for (the start refuses those of the types the builder named).
    pub(crate) fn register<A: Actor>(&self) -> Result<()> {
        self.registry.register::<A>()
    }

    /// A new watcher of an actor.
    pub(crate) fn subscribe(&self, actor_type: &'static str, actor_id: &str) -> Subscription {
        self.watchers
            .subscribe(self.core.shared_store(), actor_type, actor_id)
    }

    /// The watched actors (and the runtime's closing signal they end on).
    pub(crate) fn watchers(&self) -> &Watchers {
        &self.watchers
    }

    /// The store's reads, which the client and the operators' API make directly: they write
    /// only through the engine's jobs.
    pub(crate) fn reads(&self) -> &dyn Reads {
        self.core.store().reads()
    }

    /// The counts of the work the store did so far.
    pub(crate) fn stats(&self) -> Stats {
        self.core.store().stats()
    }

    /// Counts a pass of a worker of this runtime.
    pub(crate) fn count_worker_pass(&self) {
        self.core.store().counters().worker_pass();
    }

    /// Notices of work committed by other processes, where the store carries them.
    pub(crate) async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>> {
        self.core.store().listen().await
    }

    /// Waits, until `deadline`, for the database to accept writes again after a lost
    /// connection.
    pub(crate) async fn reconnect(&self, deadline: Instant) -> Result<()> {
        self.core.store().reconnect(deadline).await
    }

    /// What the doctor reports of the database: its backend, the migrations this build knows
    /// and those applied, its settings that matter, and its clock.
    pub(crate) async fn describe_database(&self) -> Result<DatabaseFacts> {
        let store = self.core.store();
        let (backend, known_migration) = store.schema();
        Ok(DatabaseFacts {
            backend,
            known_migration,
            applied_migrations: store.applied_migrations().await?,
            settings: store.settings().await?,
            clock_micros: store.database_micros().await?,
        })
    }

    /// Closes the connections the store opened.
    pub(crate) async fn close(&self) {
        self.core.store().close().await;
    }

    /// The turns job: one turn, and one step of an actor's mailbox.
    pub(crate) fn turns(&self) -> Turns<'_> {
        Turns::new(&self.core, &self.states, &self.watchers, &self.registry)
    }

    /// The calls job: synchronous calls, ordered reads, snapshots and enqueues.
    pub(crate) fn calls(&self) -> Calls<'_> {
        Calls::new(self.turns(), &self.groups)
    }

    /// The destroy job: ending an actor's incarnation.
    pub(crate) fn destroy(&self) -> Destroy<'_> {
        Destroy::new(&self.core, &self.states, &self.watchers)
    }

    /// The effects job: claims, leases, outcomes and replies.
    pub(crate) fn effects(&self) -> Effects<'_> {
        Effects::new(&self.core, &self.effect_kinds, &self.registry)
    }

    /// The reminders job: firing due ones, listing an actor's.
    pub(crate) fn reminders(&self) -> Reminders<'_> {
        Reminders::new(&self.core, &self.unreadable_reminders)
    }

    /// The workers' job: a pass over the actors with due messages.
    pub(crate) fn worker_pass(&self) -> WorkerPass<'_> {
        WorkerPass::new(self.turns(), &self.registry, &self.workers)
    }

    /// The upkeep job: the charts' tallies, retention, unhandled effects, unknown operations.
    pub(crate) fn upkeep(&self) -> Upkeep<'_> {
        Upkeep::new(
            &self.core,
            &self.registry,
            self.effects(),
            self.activity_fold(),
        )
    }

    /// The fold job: the charts' tallies of the minutes that ended.
    pub(crate) fn activity_fold(&self) -> ActivityFold<'_> {
        ActivityFold::new(&self.core, &self.folds_held_back)
    }

    /// The operators' writes: retried dead letters, pauses, the audit log.
    pub(crate) fn operator_writes(&self) -> OperatorWrites<'_> {
        OperatorWrites::new(&self.core)
    }
}

/// Decodes the actor's stored state (the default state if it has none).
pub(crate) fn decode_state<A: Actor>(key: ActorKey<'static, '_>, instance: &Instance) -> Result<A> {
    decode_stored(key, instance.state_version, instance.state.as_deref())
}

/// Decodes an actor's stored state text, written by version `state_version` of its type (the
/// default state if it has none).
pub(super) fn decode_stored<A: Actor>(
    key: ActorKey<'static, '_>,
    state_version: i64,
    state: Option<&str>,
) -> Result<A> {
    match state {
        Some(json) => crate::actor::migration::to_current(key.actor_id, state_version, json),
        // `Default` is user code too.
        None => std::panic::catch_unwind(A::initial).map_err(|panic| Error::Panicked {
            during: format!("making the default state of {}", key.actor_type),
            message: crate::codec::panic_text(&*panic).to_owned(),
        }),
    }
}

/// The error a call on a paused actor gets.
fn paused(key: ActorKey<'_, '_>) -> Error {
    Error::Paused {
        actor_type: key.actor_type.to_owned(),
        actor_id: key.actor_id.to_owned(),
    }
}

/// Runs a read for a caller, giving up at its deadline with an error that
/// [`Error::is_busy`] recognises (a read dropped mid-way leaves nothing behind).
pub(crate) async fn read_until<T>(
    deadline: Instant,
    read: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout_at(deadline, read)
        .await
        .unwrap_or(Err(Error::Database(sqlx::Error::PoolTimedOut)))
}

/// Inserts into a set that holds at most [`MAP_CAPACITY`] entries; false if it was there
/// already or is full.
fn insert_bounded<T: Eq + Hash>(set: &Mutex<HashSet<T>>, value: T) -> bool {
    let mut set = set.lock().unwrap_or_else(PoisonError::into_inner);
    set.len() < MAP_CAPACITY && set.insert(value)
}
