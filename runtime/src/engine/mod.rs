//! The turn: enqueue, pick the next message, run the handler, commit. No SQL text here.
//!
//! `call` holds the synchronous paths (calls, queries, snapshots, enqueues), `running` one
//! turn from its message to the commit, `failures` how a failed attempt is counted,
//! `outcome` what a caller sees of a finished message, `background` the work of workers
//! (reminders, ready mailboxes, retention, dead letters) and `effects` the outbox.
//!
//! The rule behind all of it: every way a turn can fail is an attempt on its message, which
//! backs off and ends as completed, rejected or dead. Only three things commit nothing and
//! count nothing: a conflict with another transaction (the turn runs again at once), a
//! caller whose deadline passed (the message stays for later), and an operation this build
//! does not know (left for a build that knows it).

mod background;
mod call;
mod effects;
mod failures;
mod outcome;
mod running;
mod watchers;

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::limits::{deadline_after, Limits, RetryPolicy};
use crate::store::{ActorKey, Bounds, Store, Transaction};
use crate::time::clock::Clock;
use crate::time::micros::{from_micros, micros};

pub(crate) use background::{Pass, TurnErrors};
pub(crate) use call::{CallOptions, EnqueueOptions, Enqueued};
pub(crate) use outcome::{stored_rejection, Outcome};
pub(crate) use watchers::{shut_down, Subscription};

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
    /// How often watchers poll for commits of other processes where none are notified.
    pub(crate) watch_poll: Duration,
    /// Whether watchers `LISTEN` for other processes' commits where the database can.
    pub(crate) listen: bool,
}

/// Runs turns against a store.
pub(crate) struct Engine {
    store: Arc<dyn Store>,
    config: EngineConfig,
    /// Woken after every commit that adds or finishes messages.
    wake: Notify,
    /// The actor types this runtime can run, by stored name.
    actors: RwLock<HashMap<&'static str, RegisteredActor>>,
    /// Actors a worker of this process is running now, so two workers do not take the same one.
    claims: Mutex<HashSet<(String, String)>>,
    /// Stored type names already reported as unknown, so the log says it once.
    unknown_types: Mutex<HashSet<String>>,
    /// Actors whose last turn failed with an error, and until when workers skip them.
    stalled: Mutex<HashMap<(String, String), Instant>>,
    /// Reminder rows that did not read, and until when firing leaves them alone.
    unreadable_reminders: Mutex<HashMap<i64, Instant>>,
    /// The effect kinds this runtime has handlers for, with their own retry policies.
    effects: RwLock<HashMap<&'static str, Option<RetryPolicy>>>,
    /// Effect kinds already reported as having no handler here.
    reported_unhandled: Mutex<HashSet<String>>,
    /// When a worker last sampled the mailbox depth for the metrics.
    depth_sampled: Mutex<Option<Instant>>,
    /// The watched actors, told of every commit that changes a state.
    watchers: Arc<watchers::Watchers>,
}

#[derive(Clone)]
struct RegisteredActor {
    type_id: TypeId,
    runner: Arc<dyn MailboxRunner>,
    /// The stored names of its messages' operations (commands and reminders).
    operations: &'static [&'static str],
}

/// What one turn did.
#[derive(Debug)]
pub(crate) struct TurnReport {
    pub(crate) message_id: i64,
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

    fn deadline(self) -> Option<Instant> {
        match self {
            Self::Skip => None,
            Self::WaitUntil(deadline) => Some(deadline),
        }
    }
}

impl Engine {
    pub(crate) fn new(store: Arc<dyn Store>, config: EngineConfig) -> Self {
        crate::metrics::describe();
        let watchers = Arc::new(watchers::Watchers::new(config.watch_poll, config.listen));
        Self {
            store,
            config,
            wake: Notify::new(),
            actors: RwLock::default(),
            claims: Mutex::default(),
            unknown_types: Mutex::default(),
            stalled: Mutex::default(),
            unreadable_reminders: Mutex::default(),
            effects: RwLock::default(),
            reported_unhandled: Mutex::default(),
            depth_sampled: Mutex::default(),
            watchers,
        }
    }

    /// Tells the actor's watchers that a commit changed its state; called only after the
    /// commit returned.
    fn state_committed(&self, key: ActorKey<'_, '_>) {
        self.watchers.committed(key);
    }

    /// A new watcher of an actor.
    pub(crate) fn subscribe(&self, actor_type: &'static str, actor_id: &str) -> Subscription {
        self.watchers.subscribe(&self.store, actor_type, actor_id)
    }

    /// A receiver that turns true once the runtime shuts down.
    pub(crate) fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.watchers.closing()
    }

    /// Ends every watch (the runtime shuts down).
    pub(crate) fn close_watches(&self) {
        self.watchers.close();
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.config.limits
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.config.clock.now()
    }

    /// Wakes every task waiting for work or for a message to finish.
    pub(crate) fn wake(&self) {
        self.wake.notify_waiters();
    }

    /// A wake-up registered now: it completes at the next [`wake`](Self::wake) from here on,
    /// even one that comes before it is first polled. A worker takes it before its pass, so
    /// a commit during the pass is not lost.
    pub(crate) fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Waits until woken or until `timeout` passes.
    pub(crate) async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// The bounds of a transaction that ends by `deadline` (a caller's), or by the turn
    /// timeout from now. A caller's transaction bounds each statement by its deadline too,
    /// so the server stops the SQL of a turn whose caller gave up.
    pub(crate) fn bounds(&self, deadline: Option<Instant>) -> Bounds {
        let turn = self.config.turn_timeout;
        match deadline {
            Some(deadline) => Bounds {
                deadline,
                statement: turn
                    .min(deadline.saturating_duration_since(Instant::now()))
                    .max(Duration::from_millis(1)),
                alone: false,
            },
            None => Bounds {
                deadline: deadline_after(turn),
                statement: turn,
                alone: false,
            },
        }
    }

    /// Begins a transaction within `bounds` of the caller's deadline (or the turn timeout).
    pub(crate) async fn begin(&self, deadline: Option<Instant>) -> Result<Box<dyn Transaction>> {
        self.store.begin(self.bounds(deadline)).await
    }

    /// Begins a turn's transaction; `alone` keeps it out of any group commit (a turn that
    /// ran past its group's budget runs again so).
    pub(crate) async fn begin_turn(
        &self,
        deadline: Option<Instant>,
        alone: bool,
    ) -> Result<Box<dyn Transaction>> {
        let bounds = Bounds {
            alone,
            ..self.bounds(deadline)
        };
        self.store.begin(bounds).await
    }

    /// Ends a transaction that has nothing to commit, its locks released before this
    /// returns (a failed rollback closes the connection instead).
    pub(crate) async fn release(tx: Box<dyn Transaction>) {
        if let Err(error) = tx.rollback().await {
            tracing::debug!(%error, "a rollback failed; its connection is closed");
        }
    }

    /// Makes `A` known to this engine, so workers and the testing API can run its messages.
    pub(crate) fn register<A: Actor>(&self) -> Result<()> {
        let type_id = TypeId::of::<A>();
        if let Some(known) = self
            .actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(A::TYPE_NAME)
        {
            return duplicate_check(known, type_id, A::TYPE_NAME);
        }
        let mut actors = self.actors.write().unwrap_or_else(PoisonError::into_inner);
        let known = actors
            .entry(A::TYPE_NAME)
            .or_insert_with(|| RegisteredActor {
                type_id,
                runner: Arc::new(TypedRunner::<A>(PhantomData)),
                operations: <A::Message as Operations>::NAMES,
            });
        duplicate_check(known, type_id, A::TYPE_NAME)
    }

    /// The runner of a stored type name, if this runtime knows the type.
    pub(crate) fn runner(&self, actor_type: &str) -> Option<Arc<dyn MailboxRunner>> {
        self.actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(actor_type)
            .map(|known| Arc::clone(&known.runner))
    }

    /// The operations this runtime can run, as a JSON array of `"Type:operation"`: a
    /// message of another type, or of an operation a newer build added, is not its to claim.
    fn known_operations(&self) -> String {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        let names: Vec<String> = actors
            .iter()
            .flat_map(|(actor_type, known)| {
                known
                    .operations
                    .iter()
                    .map(move |operation| format!("{actor_type}:{operation}"))
            })
            .collect();
        serde_json::Value::from(names).to_string()
    }

    /// The stored names of the actor types this runtime knows, as a JSON array.
    /// The stored names of the actor types this runtime registered, sorted.
    pub(crate) fn registered_types(&self) -> Vec<String> {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = actors.keys().map(|name| (*name).to_owned()).collect();
        names.sort();
        names
    }

    fn known_types(&self) -> String {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        let names: Vec<&str> = actors.keys().copied().collect();
        serde_json::Value::from(names).to_string()
    }
}

/// Runs the next message of an actor whose type is known only by its stored name.
#[async_trait]
pub(crate) trait MailboxRunner: Send + Sync {
    async fn run_next(&self, engine: &Engine, actor_id: &str, lock: Lock) -> Result<Step>;

    /// Whether a message about to be stored names one of the actor's commands and its
    /// arguments read back as that command's.
    fn check_command(&self, operation: &str, arguments: &str) -> Result<()>;

    /// Whether a stored message or reminder of this actor (any operation) decodes as one
    /// of this build's operations; the error says why not.
    fn check_stored(&self, actor_id: &str, operation: &str, arguments: &str) -> Result<()>;
}

struct TypedRunner<A>(PhantomData<fn() -> A>);

#[async_trait]
impl<A: Actor> MailboxRunner for TypedRunner<A> {
    async fn run_next(&self, engine: &Engine, actor_id: &str, lock: Lock) -> Result<Step> {
        engine.run_next::<A>(actor_id, lock).await
    }

    fn check_command(&self, operation: &str, arguments: &str) -> Result<()> {
        if <A::Message as Operations>::REMINDERS.contains(&operation) {
            return Err(Error::Config(format!(
                "`{operation}` is a reminder of {}, not a command",
                A::TYPE_NAME
            )));
        }
        self.check_stored("", operation, arguments)
    }

    fn check_stored(&self, actor_id: &str, operation: &str, arguments: &str) -> Result<()> {
        crate::actor::operation_codec::decode_operation::<A::Message>(
            A::TYPE_NAME,
            actor_id,
            operation,
            arguments,
            0,
        )
        .map(drop)
    }
}

fn duplicate_check(known: &RegisteredActor, type_id: TypeId, name: &str) -> Result<()> {
    if known.type_id == type_id {
        Ok(())
    } else {
        Err(Error::DuplicateActorName {
            name: name.to_owned(),
        })
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

/// A new request (or effect) id: a UUID that orders by creation time (version 7), so the
/// unique index on these ids grows at its end, where consecutive commits (and every turn of a
/// group commit) share one page, rather than at a random page per row.
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
