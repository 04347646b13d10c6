//! [`Runtime`], its [`Builder`], the process default, and the worker loop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::actor::Actor;
use crate::client::effect::{
    DeadEffect, Effect, EffectContext, EffectRunner, TypedEffect, UnhandledEffects,
};
use crate::client::effect_tasks::EffectTasks;
use crate::client::message::{DeadLetter, MessageRef};
use crate::client::reference::Reference;
use crate::client::testing::Testing;
use crate::engine::{Engine, EngineConfig, TurnErrors};
use crate::error::{Error, Result};
use crate::limits::{Limits, RetryPolicy};
use crate::policy::{NoPolicy, Policy};
#[cfg(feature = "sqlite")]
use crate::store::{
    group_commit::GroupCommit,
    sqlite::{Durability, SqliteOptions, SqliteStore},
};
use crate::store::{MessageLookup, SchemaMode, Stats, Store};
use crate::time::clock::{Clock, IntoDuration, SystemClock};

pub use crate::client::shutdown::ShutdownReport;
use crate::client::shutdown::Stopping;

/// How many actors a worker pass takes, and how many turns one actor gets per pass.
const ACTORS_PER_PASS: i64 = 100;
const TURNS_PER_ACTOR: usize = 50;
/// How long the supervisor waits before it starts a worker that stopped, at first and at
/// most (doubling while workers keep stopping).
const RESTART_PAUSE_MIN: Duration = Duration::from_millis(100);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(5);
/// The idle poll interval of a worker starts here and doubles up to the maximum (1 s by
/// default, `Builder::idle_poll`).
const IDLE_POLL_MIN: Duration = Duration::from_millis(100);
/// The shortest interval at which watchers poll for other processes' commits.
const WATCH_POLL_MIN: Duration = Duration::from_millis(10);
/// How long the relay of PostgreSQL's work notices waits after an error before it listens
/// again.
const NOTICE_RETRY: Duration = Duration::from_secs(1);
/// How often (by the runtime's clock) the workers do the upkeep: prune, report.
const UPKEEP_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// A running solid-objects runtime: a database, a clock, a policy, and the actor types it
/// runs. Cheap to clone; clones share everything.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
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
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    pub(super) engine: Engine,
    pub(super) policy: Arc<dyn Policy>,
    pub(super) sync_timeout: Duration,
    pub(super) workers: usize,
    pub(super) idle_poll: Duration,
    /// Whether `run` listens for work committed by other processes.
    pub(super) listen: bool,
    /// Held by the idle worker whose turn it is to poll the database.
    pub(super) poll_turn: tokio::sync::Mutex<()>,
    pub(super) closed: AtomicBool,
    pub(super) shutdown: Notify,
    /// How long `run_until_signal` lets work in flight finish.
    pub(super) shutdown_deadline: Duration,
    /// The runs of the workers, and whether to abandon their work.
    pub(super) stopping: Stopping,
    /// When the workers last did the upkeep (pruning, reports).
    pub(super) last_upkeep: Mutex<Option<DateTime<Utc>>>,
    /// The effect handlers the workers started.
    pub(super) effect_tasks: EffectTasks,
    /// The effect handlers, with the names of the effects they run.
    pub(super) effect_runners: Vec<(&'static str, Arc<dyn EffectRunner>)>,
}

impl Runtime {
    /// Starts configuring a runtime.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The runtime `Actor::reference(id)` reaches here: the one of the enclosing
    /// [`scope`](Runtime::scope), else the process default
    /// ([`make_default`](Runtime::make_default)), else none.
    pub fn current() -> Option<Self> {
        crate::client::default_runtime::current()
    }

    /// Makes this runtime the process default: `Actor::reference(id)` reaches it from any
    /// task that is not inside another runtime's [`scope`](Runtime::scope). A runtime is the
    /// default only when asked; the last one asked wins, and the default stays alive (even
    /// if every other handle was dropped) until another takes its place. The runtime's own
    /// workers and effect handlers always reach their runtime.
    pub fn make_default(&self) {
        crate::client::default_runtime::set(self);
    }

    /// Runs `future` with this runtime as the one `Actor::reference(id)` reaches inside it,
    /// whatever the process default is. The scope is the future itself: tasks it spawns do
    /// not inherit it. Tests running in parallel each scope their own runtime.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Counter {
    ///     value: u32,
    /// }
    ///
    /// #[actor]
    /// impl Counter {
    ///     #[command]
    ///     pub fn increment(&mut self) -> u32 {
    ///         self.value += 1;
    ///         self.value
    ///     }
    /// }
    ///
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let runtime = Runtime::builder()
    ///     .sqlite(dir.path().join("counters.db"))
    ///     .policy(AllowAll)
    ///     .start()
    ///     .await?;
    /// let value = runtime
    ///     .scope(async { Counter::reference("visits").increment().await })
    ///     .await?;
    /// assert_eq!(value, 1);
    /// # Ok(()) }
    /// ```
    pub async fn scope<F: std::future::Future>(&self, future: F) -> F::Output {
        crate::client::default_runtime::scope(self.clone(), future).await
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
    /// with their handlers, and prune old rows hourly. A commit in this process wakes an
    /// idle worker at once, and on PostgreSQL so does a commit in any other process (the
    /// workers `LISTEN` on a connection of their own); otherwise idle workers poll every
    /// 100 ms, backing off to [`Builder::idle_poll`] (1 s), taking turns: one idle worker
    /// polls at a time.
    ///
    /// The workers are supervised: one that stops for any reason but shutdown (a panic in
    /// a custom [`Clock`], say) is logged and started again. Returns `Ok(())` only after
    /// [`shutdown`](Runtime::shutdown), once every worker finished what it was doing, or
    /// once [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) abandoned them.
    pub async fn run(&self) -> Result<()> {
        let _running = self.shared.stopping.enter();
        let mut workers = JoinSet::new();
        for _ in 0..self.shared.workers {
            self.spawn_worker(&mut workers);
        }
        // Ends with this call (the guard aborts it), whatever way it returns.
        let _relay = AbortOnDrop(tokio::spawn(self.clone().relay_notices()).abort_handle());
        let mut restart_pause = RESTART_PAUSE_MIN;
        loop {
            let stopped = tokio::select! {
                stopped = workers.join_next() => stopped,
                () = self.shared.stopping.abandoning() => {
                    self.shared.stopping.abandon(&mut workers).await;
                    break;
                }
            };
            let Some(stopped) = stopped else {
                break;
            };
            if self.is_closed() {
                continue;
            }
            match stopped {
                Err(failure) => tracing::error!(%failure, "a worker stopped; starting another"),
                Ok(()) => tracing::error!("a worker returned before shutdown; starting another"),
            }
            tokio::select! {
                () = self.shared.shutdown.notified() => continue,
                () = tokio::time::sleep(restart_pause) => {}
            }
            restart_pause = (restart_pause * 2).min(RESTART_PAUSE_MAX);
            if !self.is_closed() {
                self.spawn_worker(&mut workers);
            }
        }
        Ok(())
    }

    /// Starts a worker, inside this runtime's scope: code it runs (effect handlers) reaches
    /// this runtime through `Actor::reference(id)`.
    fn spawn_worker(&self, workers: &mut JoinSet<()>) {
        let runtime = self.clone();
        workers.spawn(async move { runtime.scope(runtime.work()).await });
    }

    /// Wakes idle workers whenever the database says another process committed work.
    async fn relay_notices(self) {
        if !self.shared.listen {
            return;
        }
        let mut notices = None;
        while !self.is_closed() {
            let waited = match &mut notices {
                None => match self.engine().store().listen().await {
                    Ok(Some(listening)) => {
                        notices = Some(listening);
                        continue;
                    }
                    // This database gives no notices: the workers poll.
                    Ok(None) => return,
                    Err(error) => Err(error),
                },
                Some(listening) => listening.next().await,
            };
            match waited {
                Ok(()) => self.engine().wake(),
                Err(_) if self.is_closed() => return,
                Err(error) => {
                    tracing::warn!(%error, "listening for work from other processes failed; \
                        idle workers poll until it listens again");
                    notices = None;
                    tokio::select! {
                        () = self.shared.shutdown.notified() => {}
                        () = tokio::time::sleep(NOTICE_RETRY) => {}
                    }
                }
            }
        }
    }

    /// Whether [`shutdown`](Runtime::shutdown) (or [`close`](Runtime::close), or a shutdown
    /// with a deadline) was asked: the runtime then refuses new calls and its workers claim
    /// no more work. A readiness probe can report it.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Completes once the runtime is closed ([`shutdown`](Runtime::shutdown),
    /// [`close`](Runtime::close), a shutdown with a deadline, or a signal to
    /// [`run_until_signal`](Runtime::run_until_signal)), at once if it is already.
    ///
    /// Hand it to a web server to stop taking requests when the runtime stops, as axum's
    /// `with_graceful_shutdown` takes it:
    ///
    /// ```no_run
    /// # #[cfg(feature = "axum")]
    /// # async fn serve(runtime: solid_objects::Runtime, router: axum::Router) -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, router)
    ///     .with_graceful_shutdown(runtime.closed())
    ///     .await
    /// # }
    /// ```
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let runtime = self.clone();
        async move {
            loop {
                // Made before the check, so a shutdown from here on completes it.
                let shutdown = runtime.shared.shutdown.notified();
                if runtime.is_closed() {
                    return;
                }
                shutdown.await;
            }
        }
    }

    /// The time on the runtime's clock ([`Builder::clock`]): what handlers read as
    /// [`Turn::now`](crate::Turn::now) and what reminders fall due by, so code outside a
    /// handler (a web handler computing a deadline, a test) reads the same time.
    pub fn now(&self) -> DateTime<Utc> {
        self.engine().now()
    }

    /// One worker's loop.
    async fn work(&self) {
        let mut idle = IDLE_POLL_MIN;
        loop {
            // Made before the check and the pass, so a shutdown or a commit from here on
            // wakes this worker.
            let shutdown = self.shared.shutdown.notified();
            let woken = self.engine().woken();
            if self.is_closed() {
                return;
            }
            let worked = match self.work_once().await {
                Ok(worked) => worked,
                // A deadlock the database broke (InnoDB reports one rather than wait) is
                // the next pass's to retry.
                Err(error) if error.is_conflict() => {
                    tracing::warn!(%error, "a worker pass met a conflict; retrying");
                    false
                }
                Err(error) => {
                    tracing::error!(%error, "a worker pass failed; retrying");
                    false
                }
            };
            if worked {
                idle = IDLE_POLL_MIN;
                continue;
            }
            // Idle workers take turns to poll: the one holding the turn waits out its
            // interval, the others wait for the turn (or to be woken), so an idle runtime
            // looks at the database once per interval however many workers it runs.
            let polling = async {
                let _turn = self.shared.poll_turn.lock().await;
                tokio::time::sleep(idle).await;
            };
            tokio::select! {
                () = shutdown => {}
                () = woken => {}
                () = polling => {}
            }
            idle = (idle * 2).min(self.shared.idle_poll);
        }
    }

    /// One worker pass; true if it did anything. Once the runtime shuts down it starts
    /// nothing new: the turn in flight finishes, and no other.
    async fn work_once(&self) -> Result<bool> {
        // Reminders that cannot fire (the database gone, say) hold back no mailbox: the
        // pass runs them anyway, and fails there if the database is gone.
        let fired = match self.engine().fire_due_reminders(ACTORS_PER_PASS).await {
            Ok(fired) => fired.count,
            Err(error) => {
                tracing::error!(%error, "firing due reminders failed; the mailboxes run anyway");
                0
            }
        };
        let stopping = || self.is_closed();
        let turns = self
            .engine()
            .run_ready(
                ACTORS_PER_PASS,
                TURNS_PER_ACTOR,
                TurnErrors::LogAndStall,
                &stopping,
            )
            .await?
            .turns;
        let effects = crate::client::effect::start_due(self, &self.shared.effect_tasks).await?;
        if self.upkeep_due() {
            self.engine().upkeep().await?;
        }
        Ok(fired + turns + effects > 0)
    }

    /// Whether this worker should do the hourly upkeep now (and if so, no other will for a
    /// while).
    fn upkeep_due(&self) -> bool {
        let now = self.engine().now();
        let mut last = self
            .shared
            .last_upkeep
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = last.is_none_or(|last| now - last >= UPKEEP_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Deletes finished messages and done effects older than the retention period
    /// ([`Limits::retention`], 30 days by default), keeping each actor's newest 64 messages
    /// with an idempotency key and every unfinished message and effect, and dead letters
    /// and dead effects older than [`Limits::dead_retention`] (30 days by default; zero keeps
    /// them); returns how many rows were deleted. The workers run it hourly.
    pub async fn prune_finished(&self) -> Result<u64> {
        Ok(self.engine().prune(true).await?.total())
    }

    /// Effects waiting to run whose kind has no handler in this runtime, by kind. If no
    /// process registers a handler for a kind ([`Builder::effect`]), its effects never run;
    /// workers also log a warning once per kind after a minute.
    pub async fn unhandled_effects(&self) -> Result<Vec<UnhandledEffects>> {
        let pending = self.engine().unhandled_effects().await?;
        Ok(pending.into_iter().map(UnhandledEffects::new).collect())
    }

    /// The effects that failed for good, oldest first, at most `limit`.
    pub async fn dead_effects(&self, limit: i64) -> Result<Vec<DeadEffect>> {
        let records = self.engine().store().dead_effects(limit).await?;
        Ok(records.into_iter().map(DeadEffect::new).collect())
    }

    /// Runs a dead effect again (attempts reset, under the same effect id); false if it is
    /// not dead, so retrying twice runs it once. An effect whose failure already went back
    /// to its actor ([`Emitted::on_failure`](crate::Emitted::on_failure)) then reports its
    /// new outcome too: a success after that failure reaches the `on_success` command, so an
    /// actor that treats a failure as final says so in its state.
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
    /// reset; its idempotency key moves to the new message, so a client that calls again
    /// with that key gets the retry's outcome. Retrying the same dead letter again returns
    /// the same new message.
    pub async fn retry_dead_letter(&self, message_id: i64) -> Result<MessageRef> {
        let (record, enqueued) = self.engine().retry_dead_letter(message_id).await?;
        Ok(MessageRef::from_parts(
            self.clone(),
            &record.actor_type,
            &record.actor_id,
            enqueued.message_id,
            enqueued.request_id,
        ))
    }

    /// Asks [`run`](Runtime::run) to return and refuses new calls; committed work and queued
    /// messages stay in the database. The workers finish what they are doing first, however
    /// long it takes; [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) bounds that.
    pub fn shutdown(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.shutdown.notify_waiters();
        self.engine().wake();
        self.engine().close_watches();
    }

    /// Shuts down and closes the database connections the runtime opened (a pool the
    /// application passed in stays open).
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

    /// The effect handlers, with the names of the effects they run.
    pub(crate) fn effect_runners(&self) -> Vec<(&'static str, Arc<dyn EffectRunner>)> {
        self.shared.effect_runners.clone()
    }

    pub(crate) fn policy(&self) -> &dyn Policy {
        &*self.shared.policy
    }

    pub(crate) fn sync_timeout(&self) -> Duration {
        self.shared.sync_timeout
    }

    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.is_closed() {
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
    #[cfg(feature = "sqlite")]
    SqliteFile(std::path::PathBuf),
    #[cfg(feature = "sqlite")]
    SqlitePool(sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    PostgresUrl { url: String, connections: u32 },
    #[cfg(feature = "postgres")]
    PostgresPool(sqlx::PgPool),
    #[cfg(feature = "mysql")]
    MySqlUrl { url: String, connections: u32 },
    #[cfg(feature = "mysql")]
    MySqlPool(sqlx::MySqlPool),
}

/// Configures and starts a [`Runtime`].
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
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
    #[cfg(feature = "sqlite")]
    durability: Durability,
    #[cfg(feature = "sqlite")]
    group_commit: GroupCommit,
    #[cfg(feature = "sqlite")]
    file_mode: u32,
    clock: Arc<dyn Clock>,
    policy: Option<Arc<dyn Policy>>,
    sync_timeout: Duration,
    limits: Limits,
    retry: RetryPolicy,
    turn_timeout: Duration,
    effect_lease: Duration,
    effect_timeout: Duration,
    workers: usize,
    idle_poll: Duration,
    listen: bool,
    watch_poll: Duration,
    shutdown_deadline: Duration,
    connect_timeout: Duration,
    apply_migrations: bool,
    registrations: Vec<fn(&Engine) -> Result<()>>,
    effects: Vec<(&'static str, Arc<dyn EffectRunner>)>,
    set_default: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            database: None,
            #[cfg(feature = "sqlite")]
            durability: Durability::default(),
            #[cfg(feature = "sqlite")]
            group_commit: GroupCommit::default(),
            #[cfg(feature = "sqlite")]
            file_mode: 0o600,
            clock: Arc::new(SystemClock),
            policy: None,
            sync_timeout: Duration::from_secs(5),
            limits: Limits::default(),
            retry: RetryPolicy::default(),
            turn_timeout: Duration::from_secs(30),
            effect_lease: Duration::from_secs(30),
            effect_timeout: Duration::from_secs(300),
            workers: 2,
            idle_poll: Duration::from_secs(1),
            listen: true,
            watch_poll: Duration::from_secs(1),
            shutdown_deadline: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            apply_migrations: true,
            registrations: Vec::new(),
            effects: Vec::new(),
            set_default: false,
        }
    }
}

impl Builder {
    /// Keeps the actors in this SQLite file (created if missing; WAL; migrations applied at
    /// start). The runtime opens one writer connection for every turn and a few readers.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.database = Some(Database::SqliteFile(path.into()));
        self
    }

    /// Keeps the actors in the SQLite database of an application's own pool (migrations
    /// applied at start; the runtime's tables are all named `solid_*`). Turns and reads
    /// share the pool; a pool of one connection serves turns best (SQLite has one writer).
    /// The connections stay as the application set them (journal mode, `synchronous`,
    /// `busy_timeout`): a wait for another process's write lock follows their busy timeout,
    /// and a handler's statement still running when its turn is abandoned is waited for,
    /// not interrupted.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite_pool(mut self, pool: sqlx::SqlitePool) -> Self {
        self.database = Some(Database::SqlitePool(pool));
        self
    }

    /// Keeps the actors in this PostgreSQL database (`postgres://user@host/db`; migrations
    /// applied at start), over a pool of `connections` connections. Any number of processes
    /// may share one database: each turn locks its actor's row, and different actors run in
    /// parallel. While [`Runtime::run`] runs, one of the connections listens for work
    /// committed by other processes (unless [`listen(false)`](Builder::listen)).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(mut self, url: impl Into<String>, connections: u32) -> Self {
        self.database = Some(Database::PostgresUrl {
            url: url.into(),
            connections: connections.max(1),
        });
        self
    }

    /// Keeps the actors in the PostgreSQL database of an application's own pool
    /// (migrations applied at start; the runtime's tables are all named `solid_*`). Each
    /// turn holds one of its connections while it runs.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres_pool(mut self, pool: sqlx::PgPool) -> Self {
        self.database = Some(Database::PostgresPool(pool));
        self
    }

    /// Keeps the actors in this MySQL 8 or MariaDB (10.6 or later) database
    /// (`mysql://user:password@host/database`; migrations applied at start), over a pool of
    /// `connections` connections. Any number of processes may share one database: each turn
    /// locks its actor's row (InnoDB, READ COMMITTED), and different actors run in parallel.
    /// MySQL has no `LISTEN`: idle workers find work from other processes by polling.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub fn mysql(mut self, url: impl Into<String>, connections: u32) -> Self {
        self.database = Some(Database::MySqlUrl {
            url: url.into(),
            connections: connections.max(1),
        });
        self
    }

    /// Keeps the actors in the MySQL or MariaDB database of an application's own pool
    /// (migrations applied at start; the runtime's tables are all named `solid_*`). Each
    /// turn holds one of its connections while it runs.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub fn mysql_pool(mut self, pool: sqlx::MySqlPool) -> Self {
        self.database = Some(Database::MySqlPool(pool));
        self
    }

    /// How hard SQLite works to keep a commit through a power loss (default
    /// [`Durability::Full`]); for a file the runtime opens.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How turns that arrive together share one SQLite transaction and one fsync (default
    /// [`GroupCommit::default`]: up to 64 turns, for up to 1 ms); for a file the runtime
    /// opens. A lone caller never waits for a group; with many callers, each caller's commit
    /// waits for the turns that joined its group after it, and a turn that fails or rejects
    /// rolls back only its own part. [`GroupCommit::off`] gives every turn a transaction of
    /// its own.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # fn configure() -> solid_objects::Builder {
    /// use std::time::Duration;
    /// use solid_objects::{GroupCommit, Runtime};
    ///
    /// Runtime::builder()
    ///     .sqlite("orders.db")
    ///     .group_commit(GroupCommit::default().max_turns(16).max_wait(Duration::from_micros(500)))
    /// # }
    /// ```
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn group_commit(mut self, group_commit: GroupCommit) -> Self {
        self.group_commit = group_commit;
        self
    }

    /// The permission bits a new SQLite database file gets, and its `-wal` and `-shm` files
    /// with it (default `0o600`: readable and writable by its owner only). Unix only; an
    /// existing file keeps its own.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite_file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
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
        self.policy = Some(Arc::new(policy));
        self
    }

    /// The default timeout of synchronous calls and queries (default 5 s).
    pub fn sync_timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.sync_timeout = timeout.into_duration();
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

    /// How long [`start`](Builder::start) waits for a PostgreSQL or MySQL server to take its
    /// first connection (default 10 s).
    ///
    /// A server that refuses the connection is tried again until then (it may be starting);
    /// one that never answers (a host that drops packets, a port that accepts and stays
    /// silent) is given up on then. Either way `start` fails with
    /// [`Error::Unreachable`](crate::Error::Unreachable), which names the host and port.
    pub fn connect_timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.connect_timeout = timeout.into_duration().max(Duration::from_millis(1));
        self
    }

    /// Whether [`start`](Builder::start) creates the schema and applies the migrations this
    /// build has (default true: an application's runtime keeps its schema up to date).
    ///
    /// With `false`, `start` writes nothing to a database whose schema is not exactly this
    /// build's, and fails instead: with [`Error::NoSchema`](crate::Error::NoSchema) on a
    /// database (or SQLite file) no solid-objects runtime has used, with
    /// [`Error::SchemaOutOfDate`](crate::Error::SchemaOutOfDate) on one that lacks
    /// migrations, and with [`Error::SchemaFromNewerBuild`](crate::Error::SchemaFromNewerBuild)
    /// on one a newer build migrated. A tool that only inspects or operates a database, as
    /// the `solid-objects` command does, starts this way; on SQLite it also never creates
    /// the file.
    pub fn apply_migrations(mut self, apply: bool) -> Self {
        self.apply_migrations = apply;
        self
    }

    /// How long a handler may run (default 30 s). A handler still running then is
    /// abandoned: its turn rolls back, its connection is closed, and the attempt counts as
    /// failed, so one hung handler cannot hold the SQLite writer or a PostgreSQL row lock.
    /// On PostgreSQL it also bounds every statement of a turn (`statement_timeout`).
    pub fn turn_timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.turn_timeout = timeout.into_duration().max(Duration::from_millis(1));
        self
    }

    /// How long a claimed effect belongs to the worker running it without a renewal
    /// (default 30 s). While its handler runs, the worker renews the lease every third of
    /// it, so live work is not run twice; a worker that dies mid-effect (killed, out of
    /// memory) renews nothing, and its effect is claimed again, as its next attempt, once the
    /// lease runs out. A worker that finishes after its lease ran out records nothing (the
    /// effect's new runner does). On PostgreSQL and MySQL the lease runs on the database
    /// server's clock. Workers run up to 16 effects at once, each in a task of its own.
    pub fn effect_lease(mut self, lease: impl IntoDuration) -> Self {
        self.effect_lease = lease.into_duration().max(Duration::from_millis(1));
        self
    }

    /// How long an effect handler may run (default 5 min): one still running then is
    /// abandoned and its attempt counted as failed (and retried), so a handler that hangs
    /// (a network call without a timeout) does not hold its lease and a worker's place for
    /// ever.
    pub fn effect_timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.effect_timeout = timeout.into_duration().max(Duration::from_millis(1));
        self
    }

    /// How many workers [`Runtime::run`] starts (default 2, at least 1). Each takes actors
    /// no other worker of this runtime is running.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// The longest an idle worker sleeps before it looks for work again (default 1 s, at
    /// least 100 ms; it starts at 100 ms and doubles while there is none; idle workers take
    /// turns, so a runtime polls once per interval however many it runs). A commit in this
    /// process wakes idle workers at once, and on PostgreSQL so does a commit in any process
    /// (`LISTEN`/`NOTIFY`): polling is the fallback that finds work whose time came (a
    /// reminder, a delayed message, a retry).
    pub fn idle_poll(mut self, interval: impl IntoDuration) -> Self {
        self.idle_poll = interval.into_duration().max(IDLE_POLL_MIN);
        self
    }

    /// Whether [`Runtime::run`] listens for work committed by other processes (default
    /// true; PostgreSQL only, where it takes one connection of its own), and watchers for
    /// states they commit (one more connection while any actor is watched). Without it,
    /// idle workers find that work at their next poll ([`idle_poll`](Builder::idle_poll))
    /// and watchers those states at theirs ([`watch_poll`](Builder::watch_poll)); turn it
    /// off where `LISTEN` is not available, such as behind a PgBouncer in transaction
    /// pooling mode.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// How often watchers ([`Reference::watch`](crate::Reference::watch)) look for states
    /// that other processes committed, where no notice tells them (default 1 s, at least
    /// 10 ms): on SQLite, one read of every watched actor's revision per interval. Commits in
    /// this process reach watchers at once, and on PostgreSQL (with
    /// [`listen`](Builder::listen) on) so do those of every process.
    pub fn watch_poll(mut self, interval: impl IntoDuration) -> Self {
        self.watch_poll = interval.into_duration().max(WATCH_POLL_MIN);
        self
    }

    /// How long [`Runtime::run_until_signal`] lets the work in flight finish after a signal
    /// before it abandons it (default 30 s); see [`Runtime::shutdown_with_deadline`].
    pub fn shutdown_deadline(mut self, deadline: impl IntoDuration) -> Self {
        self.shutdown_deadline = deadline.into_duration();
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
    /// panics) is retried with the runtime's backoff, a permanent one ends the effect. What
    /// it returns on success is the effect's [`Output`](Effect::Output), which
    /// [`Emitted::on_success`](crate::Emitted::on_success) delivers to the emitting actor.
    ///
    /// ```no_run
    /// # use serde::{Deserialize, Serialize};
    /// # use solid_objects::{AllowAll, Effect, EffectContext, Failure, Runtime};
    /// #[derive(Serialize, Deserialize)]
    /// struct SendReceipt { email: String }
    /// impl Effect for SendReceipt {
    ///     const NAME: &'static str = "send_receipt";
    ///     type Output = ();
    /// }
    ///
    /// # #[cfg(feature = "sqlite")]
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
        Fut: std::future::Future<Output = std::result::Result<E::Output, crate::Failure>>
            + Send
            + 'static,
    {
        self.effects.push((E::NAME, TypedEffect::new(handler)));
        self
    }

    /// Makes the runtime the process default once it starts (see
    /// [`Runtime::make_default`]): `Actor::reference(id)` then reaches it.
    pub fn set_default(mut self) -> Self {
        self.set_default = true;
        self
    }

    /// Opens the database, applies the migrations and starts the runtime. It becomes the
    /// process default only if [`set_default`](Builder::set_default) was called.
    pub async fn start(self) -> Result<Runtime> {
        let schema = match self.apply_migrations {
            true => SchemaMode::Migrate,
            false => SchemaMode::RequireCurrent,
        };
        let store: Arc<dyn Store> = match self.database {
            None => {
                return Err(Error::Config(
                    "no database: call .sqlite(path) or .postgres(url, connections) (or pass \
                     a pool) on the builder"
                        .to_owned(),
                ))
            }
            #[cfg(feature = "sqlite")]
            Some(Database::SqliteFile(path)) => {
                let options = SqliteOptions {
                    durability: self.durability,
                    file_mode: self.file_mode,
                    group_commit: self.group_commit,
                    schema,
                };
                Arc::new(SqliteStore::open(&path, options).await?)
            }
            #[cfg(feature = "sqlite")]
            Some(Database::SqlitePool(pool)) => {
                Arc::new(SqliteStore::with_pool(pool, schema).await?)
            }
            #[cfg(feature = "postgres")]
            Some(Database::PostgresUrl { url, connections }) => Arc::new(
                crate::store::postgres::PostgresStore::open(
                    &url,
                    connections,
                    self.connect_timeout,
                    schema,
                )
                .await?,
            ),
            #[cfg(feature = "postgres")]
            Some(Database::PostgresPool(pool)) => {
                Arc::new(crate::store::postgres::PostgresStore::with_pool(pool, schema).await?)
            }
            #[cfg(feature = "mysql")]
            Some(Database::MySqlUrl { url, connections }) => Arc::new(
                crate::store::mysql::MySqlStore::open(
                    &url,
                    connections,
                    self.connect_timeout,
                    schema,
                )
                .await?,
            ),
            #[cfg(feature = "mysql")]
            Some(Database::MySqlPool(pool)) => {
                Arc::new(crate::store::mysql::MySqlStore::with_pool(pool, schema).await?)
            }
        };
        let config = EngineConfig {
            clock: self.clock,
            limits: self.limits,
            retry: self.retry,
            turn_timeout: self.turn_timeout,
            effect_lease: self.effect_lease,
            effect_timeout: self.effect_timeout,
            watch_poll: self.watch_poll,
            listen: self.listen,
        };
        let engine = Engine::new(store, config);
        let policy = self.policy.unwrap_or_else(|| {
            tracing::warn!(
                "no authorisation policy is configured, so every call will be denied; pass one \
                 to Runtime::builder().policy(..) (AllowAll allows every call)"
            );
            Arc::new(NoPolicy)
        });
        for register in &self.registrations {
            register(&engine)?;
        }
        for (name, runner) in &self.effects {
            engine.register_effect(name, runner.retry())?;
        }
        let runtime = Runtime {
            shared: Arc::new(Shared {
                engine,
                policy,
                sync_timeout: self.sync_timeout,
                workers: self.workers,
                idle_poll: self.idle_poll,
                listen: self.listen,
                poll_turn: tokio::sync::Mutex::new(()),
                closed: AtomicBool::new(false),
                shutdown: Notify::new(),
                shutdown_deadline: self.shutdown_deadline,
                stopping: Stopping::new(),
                last_upkeep: Mutex::new(None),
                effect_tasks: EffectTasks::new(),
                effect_runners: self.effects,
            }),
        };
        if self.set_default {
            runtime.make_default();
        }
        Ok(runtime)
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
