//! [`Builder`]: the database, clock, policy, limits, retries and handlers of a runtime, and
//! starting it.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::actor::Actor;
use crate::client::effect::{Effect, TypedEffect};
use crate::client::effect_tasks::EffectTasks;
use crate::client::policy::{NoPolicy, Policy};
use crate::client::shared::{EffectContext, EffectRunner};
use crate::client::shared::{Runtime, Shared};
use crate::client::stopping::Stopping;
use crate::client::workers::Workers;
use crate::engine::{Engine, EngineConfig};
use crate::error::{Error, Result};
use crate::limits::{GroupCommit, Limits, RetryPolicy};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::store::server_pool::ServerOptions;
#[cfg(feature = "sqlite")]
use crate::store::sqlite::{IntoSqliteFile, SqliteFile, SqliteOptions, SqliteStore};
use crate::store::{SchemaMode, Store};
use crate::time::clock::{Clock, IntoDuration, SystemClock};

/// The shortest interval at which watchers poll for other processes' commits.
const WATCH_POLL_MIN: Duration = Duration::from_millis(10);

/// Where a runtime keeps its actors.
enum Database {
    #[cfg(feature = "sqlite")]
    SqliteFile(SqliteFile),
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
    group_commit: GroupCommit,
    #[cfg(feature = "simulation")]
    simulation: Option<Arc<dyn crate::simulation::Schedule>>,
    clock: Arc<dyn Clock>,
    policy: Option<Arc<dyn Policy>>,
    sync_timeout: Duration,
    limits: Limits,
    retry: RetryPolicy,
    turn_timeout: Duration,
    workers: Workers,
    listen: bool,
    watch_poll: Duration,
    state_cache_bytes: usize,
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
            group_commit: GroupCommit::default(),
            #[cfg(feature = "simulation")]
            simulation: None,
            clock: Arc::new(SystemClock),
            policy: None,
            sync_timeout: Duration::from_secs(5),
            limits: Limits::default(),
            retry: RetryPolicy::default(),
            turn_timeout: Duration::from_secs(30),
            workers: Workers::default(),
            listen: true,
            watch_poll: Duration::from_secs(1),
            state_cache_bytes: 64 << 20,
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
    /// start): a path, or a [`SqliteFile`] that also says how hard SQLite keeps commits and
    /// the permissions of the files it creates. The runtime opens one writer connection for
    /// every turn and a few readers.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite(mut self, file: impl IntoSqliteFile) -> Self {
        self.database = Some(Database::SqliteFile(file.into_sqlite_file()));
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
    ///
    /// A primary with standbys is named by libpq's multi-host form,
    /// `postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`: the runtime
    /// works on the host that accepts writes, and when that host goes away (or turns
    /// read-only), it finds the one that does and carries on there (see the backends guide,
    /// [running highly available](crate::guide::backends#running-highly-available)).
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

    /// How turns that arrive together share one transaction and one commit (default
    /// [`GroupCommit::default`]); [`GroupCommit::off`] gives every turn a transaction of
    /// its own.
    ///
    /// Two kinds of grouping follow it, on every backend:
    ///
    /// - **A hot actor's calls.** Synchronous calls of one actor that wait while a call of
    ///   this process runs its turn are run by that turn, in its transaction, each in a
    ///   savepoint of its own, in the order they came, and committed with it. On PostgreSQL
    ///   and MySQL, once two such groups run, a call of another actor joins one whose own
    ///   turn is written (its actor is locked without waiting: one held elsewhere runs alone).
    /// - **SQLite's writer.** Transactions that wait for the single writer join the open one,
    ///   each in a savepoint, and share its fsync.
    ///
    /// A lone caller never waits for a group. With many callers, a caller's answer waits for
    /// the turns its group took in after it (at most `max_turns`, for at most `max_wait`),
    /// and a turn that fails or rejects rolls back only its own part. Every caller hears
    /// "committed" only after the commit; a commit whose answer was lost is read back by
    /// each caller's message.
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
    pub fn group_commit(mut self, group_commit: GroupCommit) -> Self {
        self.group_commit = group_commit;
        self
    }

    /// Runs the SQLite store behind `schedule`, which may fail or hang each of its steps: for
    /// deterministic simulation tests only (see [`simulation`](crate::simulation)).
    #[cfg(feature = "simulation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
    pub fn simulation(mut self, schedule: Arc<dyn crate::simulation::Schedule>) -> Self {
        self.simulation = Some(schedule);
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

    /// The workers [`Runtime::run`] starts: a count (default 2, at least 1), or [`Workers`]
    /// that also say how idle ones poll, how long they hold an effect and how long a
    /// shutdown waits for them.
    pub fn workers(mut self, workers: impl Into<Workers>) -> Self {
        self.workers = workers.into();
        self
    }

    /// Whether [`Runtime::run`] listens for work committed by other processes (default
    /// true; on PostgreSQL with `LISTEN` on a connection of its own, and watchers for the
    /// states they commit on one more while any actor is watched; on MySQL by reading a
    /// wake-up bell row on a connection of its own, every 10 ms while the process is busy and
    /// every 60 ms after 10 s without work, which the process's commits ring from a second
    /// connection whether it listens or not). Without it,
    /// idle workers find that work at their next poll ([`Workers::idle_poll`])
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

    /// How many bytes of actors' states the runtime keeps in memory between turns (default
    /// 64 MiB; 0 turns the cache off), so that a turn whose actor this process committed last
    /// does not read its state back from the database.
    ///
    /// Only states of 8 KiB or more are kept (a smaller one comes with the actor's row at no
    /// cost worth a copy), each as the text a turn of this runtime committed, at that turn's
    /// revision, with the state read back from it (so each counts twice against the bound),
    /// and at most 1024 of them; past the bound the least recently used goes. A
    /// turn's lock checks the row's revision and reads the state whenever another process
    /// (or an operator's destroy) committed since, so the cache never serves a state older
    /// than the row's. It trades memory for the read of a large state on every turn: a 1 MB
    /// state is otherwise read, sent and parsed in full by each small command.
    pub fn state_cache(mut self, bytes: usize) -> Self {
        self.state_cache_bytes = bytes;
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
        #[cfg(feature = "simulation")]
        let simulation = self.simulation.clone();
        let store: Arc<dyn Store> = match self.database {
            None => {
                return Err(Error::Config(
                    "no database: call .sqlite(path) or .postgres(url, connections) (or pass \
                     a pool) on the builder"
                        .to_owned(),
                ))
            }
            #[cfg(feature = "sqlite")]
            // The label is used only when the simulation feature wraps the store.
            #[cfg_attr(not(feature = "simulation"), allow(unused_labels))]
            Some(Database::SqliteFile(file)) => 'store: {
                let options = SqliteOptions {
                    file,
                    group_commit: self.group_commit,
                    schema,
                };
                let store = SqliteStore::open(options).await?;
                #[cfg(feature = "simulation")]
                if let Some(schedule) = simulation {
                    let simulated =
                        crate::store::simulated::SimulatedStore::new(Box::new(store), schedule);
                    break 'store Arc::new(simulated);
                }
                Arc::new(store)
            }
            #[cfg(feature = "sqlite")]
            Some(Database::SqlitePool(pool)) => {
                Arc::new(SqliteStore::with_pool(pool, schema).await?)
            }
            #[cfg(feature = "postgres")]
            Some(Database::PostgresUrl { url, connections }) => {
                let options = ServerOptions {
                    url: &url,
                    connections,
                    connect_timeout: self.connect_timeout,
                    schema,
                };
                Arc::new(crate::store::postgres::PostgresStore::open(options).await?)
            }
            #[cfg(feature = "postgres")]
            Some(Database::PostgresPool(pool)) => {
                Arc::new(crate::store::postgres::PostgresStore::with_pool(pool, schema).await?)
            }
            #[cfg(feature = "mysql")]
            Some(Database::MySqlUrl { url, connections }) => {
                let options = ServerOptions {
                    url: &url,
                    connections,
                    connect_timeout: self.connect_timeout,
                    schema,
                };
                Arc::new(crate::store::mysql::MySqlStore::open(options).await?)
            }
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
            effect_lease: self.workers.effect_lease,
            effect_timeout: self.workers.effect_timeout,
            watch_poll: self.watch_poll,
            state_cache_bytes: self.state_cache_bytes,
            listen: self.listen,
            group_commit: self.group_commit,
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
            engine.effect_kinds().register(name, runner.retry())?;
        }
        engine
            .effect_kinds()
            .refuse_unhandled(&engine.registry().declared_effects())?;
        warn_of_unhandled_effects(&engine).await;
        let runtime = Runtime {
            shared: Arc::new(Shared {
                engine,
                policy,
                sync_timeout: self.sync_timeout,
                workers: self.workers,
                listen: self.listen,
                poll_turn: tokio::sync::Mutex::new(()),
                closed: AtomicBool::new(false),
                shutdown: Notify::new(),
                stopping: Stopping::new(),
                last_upkeep: Mutex::new(None),
                last_fold: Mutex::new(None),
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

/// How long the start looks for effects that no handler here runs: the look only warns, so a
/// database that does not answer in time never holds the start.
const UNHANDLED_LOOK: Duration = Duration::from_secs(1);

/// Warns of each kind of effect that waits to run with no handler in this runtime: unless
/// another process has one, those effects never run and their replies never come.
async fn warn_of_unhandled_effects(engine: &Engine) {
    let Ok(looked) =
        tokio::time::timeout(UNHANDLED_LOOK, engine.effects().unhandled_effects()).await
    else {
        tracing::debug!("the database did not say in time which effects have no handler here");
        return;
    };
    match looked {
        Ok(pending) => {
            for kind in pending {
                tracing::warn!(
                    effect = kind.name,
                    count = kind.count,
                    "effects of this kind wait to run and this runtime has no handler for \
                     them: register one with Builder::effect in a process that runs effects, \
                     or they never run"
                );
            }
        }
        Err(error) => tracing::debug!(%error, "could not look for effects with no handler"),
    }
}
