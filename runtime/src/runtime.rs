//! [`Runtime`], its [`Builder`], the process default, and the worker loop.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::actor::Actor;
use crate::clock::{Clock, SystemClock};
use crate::effect::{DeadEffect, Effect, EffectContext, EffectRunner, TypedEffect};
use crate::engine::{Engine, TurnErrors};
use crate::error::{Error, Result};
use crate::limits::{Limits, RetryPolicy};
use crate::message::{DeadLetter, MessageRef};
use crate::policy::{NoPolicy, Policy};
use crate::reference::Reference;
use crate::store::sqlite::{Durability, SqliteStore};
use crate::store::{MessageLookup, Stats, Store};
use crate::testing::Testing;

/// The process's default runtime: the first started one that is still open.
static DEFAULT: Mutex<Option<Weak<Shared>>> = Mutex::new(None);

/// How many actors a worker pass takes, and how many turns one actor gets per pass.
const ACTORS_PER_PASS: i64 = 100;
const TURNS_PER_ACTOR: usize = 50;
/// The idle poll interval of a worker starts here and doubles up to the maximum.
const IDLE_POLL_MIN: Duration = Duration::from_millis(100);
const IDLE_POLL_MAX: Duration = Duration::from_secs(1);
/// How often (by the runtime's clock) the workers prune finished messages.
const PRUNE_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// A running solid-objects runtime: a database, a clock, a policy, and the actor types it
/// runs. Cheap to clone; clones share everything.
///
/// ```no_run
/// # async fn example() -> Result<(), solid_objects::Error> {
/// use solid_objects::{AllowAll, Runtime};
///
/// let runtime = Runtime::builder().sqlite("shows.db").policy(AllowAll).start().await?;
/// // ... runtime.reference::<SeatInventory>("show-42").hold(..).await? ...
/// runtime.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Engine,
    policy: Arc<dyn Policy>,
    sync_timeout: Duration,
    workers: usize,
    closed: AtomicBool,
    shutdown: Notify,
    /// When the workers last pruned finished messages.
    last_prune: Mutex<Option<DateTime<Utc>>>,
}

impl Runtime {
    /// Starts configuring a runtime.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The process's default runtime, if one is open.
    pub fn current() -> Option<Self> {
        let default = DEFAULT.lock().unwrap_or_else(PoisonError::into_inner);
        Self::current_in(&default).map(|shared| Self { shared })
    }

    /// A typed reference to the actor `A` with this id, on this runtime.
    pub fn reference<A: Actor>(&self, id: impl Into<String>) -> A::Reference {
        if let Err(error) = self.engine().register::<A>() {
            tracing::error!(%error, "cannot register the actor type");
        }
        A::Reference::from(Reference::with_runtime(Some(self.clone()), id.into()))
    }

    /// Runs the workers until [`shutdown`](Runtime::shutdown): they fire due reminders as
    /// ordinary mailbox messages, run the ready messages of the actor types this runtime
    /// knows (a busy actor yields after 50 turns so others are not starved), run due effects
    /// with their handlers, and prune
    /// finished messages hourly. A commit in this process wakes an idle worker at once;
    /// otherwise idle workers poll every 100 ms, backing off to 1 s. Returns `Ok(())` on
    /// shutdown.
    pub async fn run(&self) -> Result<()> {
        let mut workers = JoinSet::new();
        for _ in 0..self.shared.workers {
            let runtime = self.clone();
            workers.spawn(async move { runtime.work().await });
        }
        while let Some(finished) = workers.join_next().await {
            if let Err(panic) = finished {
                tracing::error!(%panic, "a worker stopped");
            }
        }
        Ok(())
    }

    /// One worker's loop.
    async fn work(&self) {
        let mut idle = IDLE_POLL_MIN;
        while !self.shared.closed.load(Ordering::Acquire) {
            let worked = match self.work_once().await {
                Ok(worked) => worked,
                Err(error) => {
                    tracing::error!(%error, "a worker pass failed; retrying");
                    false
                }
            };
            if worked {
                idle = IDLE_POLL_MIN;
                continue;
            }
            tokio::select! {
                () = self.shared.shutdown.notified() => {}
                () = self.engine().wait_for_work(idle) => {}
            }
            idle = (idle * 2).min(IDLE_POLL_MAX);
        }
    }

    /// One worker pass; true if it did anything.
    async fn work_once(&self) -> Result<bool> {
        let fired = self.engine().fire_due_reminders(ACTORS_PER_PASS).await?;
        let turns = self
            .engine()
            .run_ready(ACTORS_PER_PASS, TURNS_PER_ACTOR, TurnErrors::LogAndStall)
            .await?;
        let effects = crate::effect::run_due(self, ACTORS_PER_PASS).await?;
        if self.prune_due() {
            let pruned = self.engine().prune_finished().await?;
            tracing::debug!(pruned, "pruned finished messages");
        }
        Ok(fired + turns + effects > 0)
    }

    /// Whether this worker should prune now (and if so, no other will for a while).
    fn prune_due(&self) -> bool {
        let now = self.engine().now();
        let mut last = self
            .shared
            .last_prune
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = last.is_none_or(|last| now - last >= PRUNE_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Deletes finished messages and done effects older than the retention period
    /// ([`Limits::retention`], 30 days by default), keeping each actor's newest 64 messages
    /// with an idempotency key, every unfinished message and effect, and the dead ones;
    /// returns how many rows were deleted. The workers run it hourly.
    pub async fn prune_finished(&self) -> Result<u64> {
        self.engine().prune_finished().await
    }

    /// The effects that failed for good, oldest first, at most `limit`.
    pub async fn dead_effects(&self, limit: i64) -> Result<Vec<DeadEffect>> {
        let records = self.engine().store().dead_effects(limit).await?;
        Ok(records.into_iter().map(DeadEffect::new).collect())
    }

    /// Runs a dead effect again (attempts reset, under the same effect id); false if it is
    /// not dead, so retrying twice runs it once.
    pub async fn retry_effect(&self, id: i64) -> Result<bool> {
        self.engine().retry_effect(id).await
    }

    /// A message, found by its request id.
    pub async fn message(&self, request_id: &str) -> Result<Option<MessageRef>> {
        let record = self
            .engine()
            .store()
            .message(MessageLookup::RequestId(request_id))
            .await?;
        Ok(record.map(|record| MessageRef::new(self.clone(), &record)))
    }

    /// The dead letters, oldest first, at most `limit`.
    pub async fn dead_letters(&self, limit: i64) -> Result<Vec<DeadLetter>> {
        let records = self.engine().store().dead_letters(limit).await?;
        Ok(records
            .into_iter()
            .map(|record| DeadLetter::new(self.clone(), record))
            .collect())
    }

    /// Enqueues a dead letter again, at the tail of its actor's mailbox, with its attempts
    /// reset. Retrying the same dead letter again returns the same new message.
    pub async fn retry_dead_letter(&self, message_id: i64) -> Result<MessageRef> {
        let (record, enqueued) = self.engine().retry_dead_letter(message_id).await?;
        Ok(MessageRef::from_parts(
            self.clone(),
            &record.actor_type,
            &record.actor_id,
            enqueued.message_id,
            enqueued.request_id,
            enqueued.sequence,
        ))
    }

    /// Asks [`run`](Runtime::run) to return and refuses new calls; committed work and queued
    /// messages stay in the database.
    pub fn shutdown(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.shutdown.notify_waiters();
        self.engine().wake();
    }

    /// Shuts down and closes the database connections.
    pub async fn close(&self) {
        self.shutdown();
        self.engine().store().close().await;
    }

    /// Counts of the work done so far: transactions and statements.
    pub fn stats(&self) -> Stats {
        self.engine().store().stats()
    }

    /// The testing API: run due reminders, drain queued messages, deliver a message.
    pub fn testing(&self) -> Testing<'_> {
        Testing::new(self)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    pub(crate) fn policy(&self) -> &dyn Policy {
        &*self.shared.policy
    }

    pub(crate) fn sync_timeout(&self) -> Duration {
        self.shared.sync_timeout
    }

    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .field("sync_timeout", &self.shared.sync_timeout)
            .finish_non_exhaustive()
    }
}

/// Where a runtime keeps its actors.
enum Database {
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        connections: u32,
    },
}

/// Configures and starts a [`Runtime`].
///
/// ```no_run
/// # async fn example() -> Result<(), solid_objects::Error> {
/// use std::time::Duration;
/// use solid_objects::{AllowAll, ManualClock, Runtime};
///
/// let clock = ManualClock::starting_now();
/// let runtime = Runtime::builder()
///     .sqlite("shows.db")
///     .clock(clock.clone())
///     .policy(AllowAll)
///     .sync_timeout(Duration::from_secs(2))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until .start().await"]
pub struct Builder {
    database: Option<Database>,
    durability: Durability,
    clock: Arc<dyn Clock>,
    policy: Arc<dyn Policy>,
    sync_timeout: Duration,
    limits: Limits,
    retry: RetryPolicy,
    workers: usize,
    registrations: Vec<fn(&Engine) -> Result<()>>,
    effects: Vec<(&'static str, Arc<dyn EffectRunner>)>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            database: None,
            durability: Durability::default(),
            clock: Arc::new(SystemClock),
            policy: Arc::new(NoPolicy),
            sync_timeout: Duration::from_secs(5),
            limits: Limits::default(),
            retry: RetryPolicy::default(),
            workers: 2,
            registrations: Vec::new(),
            effects: Vec::new(),
        }
    }
}

impl Builder {
    /// Keeps the actors in this SQLite file (created if missing; WAL; migrations applied at
    /// start).
    pub fn sqlite(mut self, path: impl Into<PathBuf>) -> Self {
        self.database = Some(Database::Sqlite(path.into()));
        self
    }

    /// Keeps the actors in this PostgreSQL database (`postgres://user@host/db`; migrations
    /// applied at start), over a pool of `connections` connections. Any number of processes
    /// may share one database: each turn locks its actor's row, and different actors run in
    /// parallel.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(mut self, url: impl Into<String>, connections: u32) -> Self {
        self.database = Some(Database::Postgres {
            url: url.into(),
            connections: connections.max(1),
        });
        self
    }

    /// How hard SQLite works to keep a commit through a power loss (default
    /// [`Durability::Full`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The clock turns read (default [`SystemClock`]); tests pass a
    /// [`ManualClock`](crate::ManualClock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The authorisation policy. Without one, every call is denied.
    pub fn policy(mut self, policy: impl Policy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// The default timeout of synchronous calls and queries (default 5 s).
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// Payload limits (default 1 MiB arguments and results, 5 MiB state).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How failed messages are retried (default 5 attempts, backoff 1 s doubling to 60 s).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How many workers [`Runtime::run`] starts (default 2, at least 1). Each takes actors
    /// no other worker of this runtime is running.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Makes `A` known to the workers from the start. A process that only runs workers
    /// must name its actor types; a reference to a type registers it too.
    pub fn actor<A: Actor>(mut self) -> Self {
        self.registrations.push(Engine::register::<A>);
        self
    }

    /// Runs the effects of kind `E` with `handler`, after the turns that emit them commit, at
    /// least once: a handler that returns a retryable [`Failure`](crate::Failure) (or
    /// panics) is retried with the runtime's backoff, a permanent one ends the effect.
    ///
    /// ```no_run
    /// # use serde::{Deserialize, Serialize};
    /// # use solid_objects::{AllowAll, Effect, EffectContext, Failure, Runtime};
    /// #[derive(Serialize, Deserialize)]
    /// struct SendReceipt { email: String }
    /// impl Effect for SendReceipt { const NAME: &'static str = "send_receipt"; }
    ///
    /// # async fn start() -> Result<(), solid_objects::Error> {
    /// let runtime = Runtime::builder()
    ///     .sqlite("shop.db")
    ///     .policy(AllowAll)
    ///     .effect(|receipt: SendReceipt, context: EffectContext| async move {
    ///         // mailer.send(&receipt.email, idempotency_key = context.id()).await
    ///         let _ = (receipt.email, context.id());
    ///         Ok::<(), Failure>(())
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn effect<E, F, Fut>(mut self, handler: F) -> Self
    where
        E: Effect,
        F: Fn(E, EffectContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), crate::Failure>> + Send + 'static,
    {
        self.effects.push((E::NAME, TypedEffect::new(handler)));
        self
    }

    /// Opens the database, applies the migrations and starts the runtime. The first runtime
    /// started in a process (or the next one after it closes) becomes the process default.
    pub async fn start(self) -> Result<Runtime> {
        let store: Arc<dyn Store> = match self.database {
            None => return Err(Error::Config(
                "no database: call .sqlite(path) (or .postgres(url, connections)) on the builder"
                    .to_owned(),
            )),
            Some(Database::Sqlite(path)) => {
                Arc::new(SqliteStore::open(&path, self.durability).await?)
            }
            #[cfg(feature = "postgres")]
            Some(Database::Postgres { url, connections }) => {
                Arc::new(crate::store::postgres::PostgresStore::open(&url, connections).await?)
            }
        };
        let engine = Engine::new(store, self.clock, self.limits, self.retry);
        for register in &self.registrations {
            register(&engine)?;
        }
        for (name, runner) in self.effects {
            engine.register_effect(name, runner)?;
        }
        let runtime = Runtime {
            shared: Arc::new(Shared {
                engine,
                policy: self.policy,
                sync_timeout: self.sync_timeout,
                workers: self.workers,
                closed: AtomicBool::new(false),
                shutdown: Notify::new(),
                last_prune: Mutex::new(None),
            }),
        };
        let mut default = DEFAULT.lock().unwrap_or_else(PoisonError::into_inner);
        if Runtime::current_in(&default).is_none() {
            *default = Some(Arc::downgrade(&runtime.shared));
        }
        Ok(runtime)
    }
}

impl Runtime {
    fn current_in(default: &Option<Weak<Shared>>) -> Option<Arc<Shared>> {
        default
            .as_ref()?
            .upgrade()
            .filter(|shared| !shared.closed.load(Ordering::Acquire))
    }
}
