//! "Nothing wedges": the soak test of the whole runtime under crashes.
//!
//! Worker processes share one database (3 on a SQLite file, 4 on a PostgreSQL database)
//! while the parent, the supervisor, drives 50 actors with numbered messages (sync calls
//! and enqueues mixed, each with its own idempotency key, a sync call that fails or times
//! out retried under its key) and SIGKILLs a random worker every 2 s, restarting it.
//! Every turn writes `(actor, seq)` to the application table `applied` in its own
//! transaction; every 5th sends `(source, seq)` to another actor, which writes it to
//! `received`; every 3rd emits an effect whose handler writes its id to `effects_done`
//! (one row per effect id) and logs each run in `effect_runs`; every 4th schedules a
//! reminder, keyed by its number, whose turn writes `(actor, seq)` to `reminded`. After
//! the chaos the survivors drain everything, and the tables must show nothing lost,
//! nothing applied twice, every actor's order exact, every effect run and every reminder
//! of a committed turn fired once. One line per backend gives the figures; the errors the
//! calls met and what the runtimes logged follow it.
//!
//! [`soak`] runs it on a [`Topology`]: the URL the driver's runtime uses, the URL of the
//! checks and of the application's own connections, and the URLs of the workers (one
//! database seen through several servers, such as a PostgreSQL primary and its standby
//! behind a multi-host URL, or the nodes of a Galera cluster). An optional [`Disturbance`]
//! runs once, from half the chaos time, beside the drivers and the kills (a primary killed
//! and its standby promoted, a node killed and restarted), and has ended before the drain
//! starts; its line of figures is printed with the soak's. A call may fail with
//! `Error::DatabaseUnavailable` while no server answers: the soak counts those and retries
//! the call under its key, as it retries timeouts.
//!
//! The workers are this test binary re-run as child processes that execute only
//! `worker_process` (which does nothing unless the parent set `CHAOS_WORKER_DATABASE`).
//! The environment can change the defaults: `CHAOS_SECONDS` (20), how long the chaos
//! lasts per backend; `CHAOS_DRAIN_SECONDS` (60), how long the survivors get to finish;
//! `CHAOS_CALL_TIMEOUT_MS` (100), the sync calls' timeout; `CHAOS_SEED`, which workers
//! die (printed with the figures).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::io::Write;
use std::mem::take;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::children::running_only;
use crate::support::each_backend::{own_database, test_on_each_backend};
use crate::support::runtimes::{self, execute_in_turn_with};
use crate::support::Backend;
use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{Builder, Effect, EffectContext};
use sqlx::AnyPool;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Set in a worker child: the database it works on (a SQLite path, or a PostgreSQL or
/// MySQL URL).
const DATABASE: &str = "CHAOS_WORKER_DATABASE";
/// How many actors the drivers address, and how many drivers run at once.
pub(crate) const ACTORS: usize = 50;
pub(crate) const DRIVERS: usize = 8;
/// Every `SEND_EVERY`th message sends to another actor; every `EMIT_EVERY`th emits an effect;
/// every `REMIND_EVERY`th schedules a reminder `REMIND_AFTER` later.
const SEND_EVERY: i64 = 5;
const EMIT_EVERY: i64 = 3;
const REMIND_EVERY: i64 = 4;
const REMIND_AFTER: TimeDelta = TimeDelta::milliseconds(300);
/// The supervisor kills a worker this often, at least `MIN_KILLS` times per backend.
const KILL_EVERY: Duration = Duration::from_secs(2);
const MIN_KILLS: u32 = 10;
/// How often the parent looks at the database while the survivors drain.
const POLL: Duration = Duration::from_millis(200);
/// How long a driver waits before it retries a call that failed.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long closing a runtime may take: it waits for every connection to come back.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// How long a disturbance may still run once the chaos time is over.
const DISTURBANCE_WAIT: Duration = Duration::from_secs(120);
/// How long the application waits for a connection to one of its several servers.
const CONNECT_WAIT: Duration = Duration::from_secs(2);
/// How long a worker's claim on an effect lasts: an effect a killed worker held is run
/// again by a survivor this long after it started.
const EFFECT_LEASE: Duration = Duration::from_secs(2);

/// The soaks take turns, so each has the machine to itself.
pub(crate) static SOAKS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The warnings and errors the driver's runtime logged during the current soak.
static DRIVER_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Where the parts of a soak connect: one database, possibly seen through several servers.
pub(crate) struct Topology {
    /// The driver's runtime, which makes every sync call and enqueue.
    pub(crate) driver: String,
    /// The final checks and the parent's application connections (a multi-host PostgreSQL
    /// URL is followed to its writable host).
    pub(crate) checks: String,
    /// The worker processes: worker `i` (and whatever replaces it after a kill) works on
    /// `workers[i % workers.len()]`.
    pub(crate) workers: Vec<String>,
}

impl Topology {
    /// Every part on the one `database` (a SQLite path, or a PostgreSQL or MySQL URL).
    pub(crate) fn single(database: &str) -> Self {
        Self {
            driver: database.to_owned(),
            checks: database.to_owned(),
            workers: vec![database.to_owned()],
        }
    }
}

/// Something done to the database once during a soak, returning its line of figures.
pub(crate) type Disturbance = Pin<Box<dyn Future<Output = String> + Send>>;

/// One of the actors: applies the drivers' numbered messages and the numbers others send.
#[actor]
#[derive(Default)]
pub(crate) struct Counter {
    last: i64,
}

#[actor]
impl Counter {
    /// Applies the driver's message `seq`: writes `(actor, seq)` and the process that ran
    /// the turn, and every 5th sends it to another actor, every 3rd emits an effect and
    /// every 4th schedules a reminder, all in the turn's transaction.
    #[command]
    pub(crate) async fn apply(
        &mut self,
        turn: &mut Turn<Self>,
        seq: i64,
    ) -> Result<i64, TurnError> {
        let actor = turn.actor_id().to_owned();
        let sql = "INSERT INTO applied (actor, seq, process) VALUES ($1, $2, $3)";
        let process = i64::from(std::process::id());
        execute_in_turn_with(turn, sql, &[&actor], &[seq, process]).await?;
        if seq % SEND_EVERY == 0 {
            turn.send::<Counter>(send_target(&actor, seq))
                .receive(actor.clone(), seq);
        }
        if seq % EMIT_EVERY == 0 {
            turn.emit(Recorded { actor, seq });
        }
        if seq % REMIND_EVERY == 0 {
            turn.schedule(turn.now() + REMIND_AFTER, format!("seq-{seq}"))
                .remind(seq);
        }
        self.last = seq;
        Ok(seq)
    }

    /// The reminder scheduled by message `seq`: writes `(actor, seq)` to `reminded`.
    #[reminder]
    async fn remind(&mut self, turn: &mut Turn<Self>, seq: i64) -> Result<(), TurnError> {
        let actor = turn.actor_id().to_owned();
        let sql = "INSERT INTO reminded (actor, seq) VALUES ($1, $2)";
        execute_in_turn_with(turn, sql, &[&actor], &[seq]).await
    }

    /// Records the message `seq` of the actor `source`, sent from one of its turns.
    #[command]
    async fn receive(
        &mut self,
        turn: &mut Turn<Self>,
        source: String,
        seq: i64,
    ) -> Result<(), TurnError> {
        let target = turn.actor_id().to_owned();
        let sql = "INSERT INTO received (target, source, seq) VALUES ($1, $2, $3)";
        execute_in_turn_with(turn, sql, &[&target, &source], &[seq]).await
    }
}

/// The effect a turn emits every 3rd message.
#[derive(Serialize, Deserialize)]
struct Recorded {
    actor: String,
    seq: i64,
}

impl Effect for Recorded {
    const NAME: &'static str = "recorded";
    type Output = ();
}

/// The effect's handler: logs the run, then records the effect once per id. After a
/// database error the application looks for its writable server again before the next run.
async fn record(
    application: Application,
    recorded: Recorded,
    context: EffectContext,
) -> Result<(), Failure> {
    let pool = application.pool().await?;
    let outcome = record_on(&pool, recorded, &context).await;
    if outcome.is_err() {
        application.forget().await;
    }
    outcome
}

/// [`record`] on one server.
async fn record_on(
    pool: &AnyPool,
    recorded: Recorded,
    context: &EffectContext,
) -> Result<(), Failure> {
    let mysql = pool.connect_options().database_url.scheme() == "mysql";
    let (run, done) = if mysql {
        (
            "INSERT INTO effect_runs (effect_id) VALUES (?)",
            "INSERT IGNORE INTO effects_done (effect_id, actor, seq) VALUES (?, ?, ?)",
        )
    } else {
        (
            "INSERT INTO effect_runs (effect_id) VALUES ($1)",
            "INSERT INTO effects_done (effect_id, actor, seq) VALUES ($1, $2, $3) \
             ON CONFLICT (effect_id) DO NOTHING",
        )
    };
    sqlx::query(run).bind(context.id()).execute(pool).await?;
    sqlx::query(done)
        .bind(context.id())
        .bind(recorded.actor)
        .bind(recorded.seq)
        .execute(pool)
        .await?;
    Ok(())
}

/// The actor that message `seq` of `source` is sent to, never `source` itself: alternately
/// its partner (actors 0 and 1, 2 and 3.. send to each other) and one further along.
fn send_target(source: &str, seq: i64) -> String {
    let index = actor_index(source);
    let round = usize::try_from(seq / SEND_EVERY).expect("a positive seq");
    let target = if round % 2 == 1 {
        index ^ 1
    } else {
        index + 1 + round % (ACTORS - 1)
    };
    actor_name(target % ACTORS)
}

/// The id of actor number `index`: `a-00`, `a-01`, ..
pub(crate) fn actor_name(index: usize) -> String {
    format!("a-{index:02}")
}

fn actor_index(name: &str) -> usize {
    name.trim_start_matches("a-")
        .parse()
        .expect("an actor name")
}

/// A runtime builder on `database`, a PostgreSQL or MySQL URL or a SQLite path.
pub(crate) fn builder(database: &str, connections: u32) -> Builder {
    runtimes::builder(database, connections).policy(AllowAll)
}

/// The application's own connections to a database (sqlx's `Any` driver), on the writable
/// server of a multi-host PostgreSQL URL: the first of its hosts where
/// `transaction_read_only` is off, looked for again after [`Application::forget`].
#[derive(Clone)]
pub(crate) struct Application {
    /// One URL per server the database may be on, in the order they are tried.
    servers: Arc<Vec<String>>,
    /// The pool on the server found writable, until forgotten.
    pool: Arc<tokio::sync::Mutex<Option<AnyPool>>>,
}

impl Application {
    /// The application's connections to `database` (a SQLite path, a MySQL URL, or a
    /// PostgreSQL URL with one host or several).
    pub(crate) fn new(database: &str) -> Self {
        sqlx::any::install_default_drivers();
        let servers = if database.contains("://") {
            servers(database)
        } else {
            vec![format!("sqlite://{database}?mode=rwc")]
        };
        Self {
            servers: Arc::new(servers),
            pool: Arc::default(),
        }
    }

    /// The pool on the writable server, connecting to it first if there is none.
    ///
    /// # Errors
    ///
    /// The last server's error when none accepts writes.
    pub(crate) async fn pool(&self) -> Result<AnyPool, sqlx::Error> {
        let mut pool = self.pool.lock().await;
        if let Some(pool) = &*pool {
            return Ok(pool.clone());
        }
        let mut last_error = sqlx::Error::PoolClosed;
        for server in self.servers.iter() {
            match writable(server, self.servers.len() > 1).await {
                Ok(found) => {
                    *pool = Some(found.clone());
                    return Ok(found);
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// The pool on the writable server, waiting for one until `deadline`.
    pub(crate) async fn pool_by(&self, deadline: Instant) -> AnyPool {
        loop {
            match self.pool().await {
                Ok(pool) => return pool,
                Err(error) if Instant::now() >= deadline => {
                    panic!("no server of {:?} accepts writes: {error}", self.servers)
                }
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Lets go of the pool (its connections close once the runs still using it are done):
    /// the next [`Application::pool`] looks for the writable server again.
    pub(crate) async fn forget(&self) {
        self.pool.lock().await.take();
    }
}

/// One URL per host of `url`: libpq's multi-host form `scheme://user@h1:p1,h2:p2/db?..`
/// gives `scheme://user@h1:p1/db` and `scheme://user@h2:p2/db` (without
/// `target_session_attrs`, which only libpq reads).
pub(crate) fn servers(url: &str) -> Vec<String> {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let query: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("target_session_attrs="))
        .collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    hosts
        .split(',')
        .map(|host| format!("{scheme}://{user}{host}{path}{query}"))
        .collect()
}

/// A pool on `server` if it accepts writes (a PostgreSQL server that is not a standby, or
/// any other). One of several servers gets `CONNECT_WAIT` for each connection, so that a
/// server gone away is soon left for another; the only server gets sqlx's default wait.
async fn writable(server: &str, several: bool) -> Result<AnyPool, sqlx::Error> {
    let options = sqlx::pool::PoolOptions::new().max_connections(2);
    let options = if several {
        options.acquire_timeout(CONNECT_WAIT)
    } else {
        options
    };
    let pool: AnyPool = options.connect(server).await?;
    if server.starts_with("postgres") {
        let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&pool)
            .await?;
        if read_only != "off" {
            pool.close().await;
            return Err(sqlx::Error::Protocol(format!("{server} is read-only")));
        }
    }
    Ok(pool)
}

/// A builder whose runtime runs the effect handler, writing through `application`.
fn with_effects(builder: Builder, application: Application) -> Builder {
    builder.effect(move |recorded: Recorded, context: EffectContext| {
        record(application.clone(), recorded, context)
    })
}

/// The child's entry point: a worker process on the parent's database, until killed. Its
/// warnings, errors and panics go to its stderr, the supervisor's log file, one line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    tracing::subscriber::set_global_default(Warnings(|line| eprintln!("{line}")))
        .expect("the worker's only subscriber");
    std::panic::set_hook(Box::new(|panic| {
        eprintln!("PANIC {} |", panic.to_string().replace('\n', " "));
    }));
    // A worker restarted while its server is away (a Galera node killed and not back yet)
    // starts once the server answers again.
    let started = Instant::now();
    let runtime = loop {
        let application = Application::new(&database);
        let starting = with_effects(builder(&database, 4), application)
            .actor::<Counter>()
            .workers(Workers::default().effect_lease(EFFECT_LEASE))
            .start()
            .await;
        match starting {
            Ok(runtime) => break runtime,
            Err(error) if started.elapsed() < DISTURBANCE_WAIT => {
                eprintln!("the worker's runtime did not start yet: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the worker's runtime starts: {error}"),
        }
    };
    runtime.run().await.expect("the workers run");
}

test_on_each_backend! {
    on_sqlite_three_worker_processes_killed_every_two_seconds_lose_nothing =>
        soak_on(Sqlite, "sqlite", 3),
    on_postgres_four_worker_processes_killed_every_two_seconds_lose_nothing =>
        soak_on(Postgres, "postgres", 4),
    on_mariadb_four_worker_processes_killed_every_two_seconds_lose_nothing =>
        soak_on(MariaDb, "mariadb", 4),
}

/// The soak, named `name`, with `workers` worker processes on a database of its own on
/// `backend` (skipped where its server is not installed), once no other soak runs.
async fn soak_on(backend: Backend, name: &str, workers: usize) {
    let _turn = SOAKS.lock().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some((database, _server)) = own_database(backend, dir.path()).await else {
        return;
    };
    soak(
        name,
        &Topology::single(&database),
        workers,
        dir.path(),
        None,
    )
    .await;
}

/// The whole soak on one database: schema, `workers` worker processes, drivers and kills,
/// the disturbance if any, drain, checks; fails the test if anything was lost, doubled or
/// out of order. `backend` names the soak in what it prints; the worker processes' logs
/// go under `logs`. Returns how many calls failed with `Error::DatabaseUnavailable`.
pub(crate) async fn soak(
    backend: &str,
    topology: &Topology,
    workers: usize,
    logs: &Path,
    disturbance: Option<Disturbance>,
) -> u32 {
    let settings = Settings::from_env();
    let _ = tracing::subscriber::set_global_default(Warnings(|line| {
        DRIVER_LOG.lock().expect("the driver's log").push(line);
    }));
    DRIVER_LOG.lock().expect("the driver's log").clear();
    let application = Application::new(&topology.checks);
    let pool = application.pool_by(Instant::now() + CLOSE_WAIT).await;
    create_tables(&pool).await;
    let run = Run::chaos(
        topology,
        workers,
        logs,
        &settings,
        &application,
        disturbance,
    )
    .await;
    application.forget().await;
    let pool = application.pool_by(Instant::now() + CLOSE_WAIT).await;
    let figures = Figures::read(&pool, &run.issued).await;
    pool.close().await;
    let unavailable = run.errors.unavailable();
    run.report(backend, &settings, &figures);
    unavailable
}

/// What happened while the workers were killed and then drained.
struct Run {
    workers: usize,
    issued: Issued,
    errors: Arc<ErrorLog>,
    chaos: Duration,
    drained: Duration,
    kills: u32,
    crashes: u32,
    worker_log: Vec<String>,
    /// Whether the driver's runtime closed, every connection back in its pool.
    closed: bool,
    /// The disturbance's line of figures, if there was one.
    disturbed: Option<String>,
}

impl Run {
    /// Drives the actors while killing workers (and disturbing the database from half the
    /// chaos time, until the disturbance ends), then lets the survivors drain.
    async fn chaos(
        topology: &Topology,
        workers: usize,
        logs: &Path,
        settings: &Settings,
        application: &Application,
        disturbance: Option<Disturbance>,
    ) -> Self {
        let runtime = builder(&topology.driver, 2 * DRIVERS as u32)
            .start()
            .await
            .expect("the driver's runtime starts");
        let started = Instant::now();
        let mut supervisor = Supervisor::start(&topology.workers, workers, logs, settings.seed);
        let mut give_up = started + settings.chaos + settings.drain;
        if disturbance.is_some() {
            give_up += DISTURBANCE_WAIT;
        }
        let drivers = Drivers::start(&runtime, settings.call_timeout, give_up);
        let mut disturbance = Disturbing::Waiting(disturbance);
        while started.elapsed() < settings.chaos
            || supervisor.kills < MIN_KILLS
            || disturbance.is_running()
        {
            tokio::time::sleep(KILL_EVERY).await;
            supervisor.kill_one().await;
            if started.elapsed() >= settings.chaos / 2 {
                disturbance.start();
            }
            assert!(
                started.elapsed() < settings.chaos + DISTURBANCE_WAIT,
                "the disturbance did not end within {DISTURBANCE_WAIT:?} of the chaos time"
            );
        }
        let disturbed = disturbance.finish().await;
        let chaos = started.elapsed();
        let drain_until = Instant::now() + settings.drain;
        let (issued, errors) = drivers.stop().await;
        application.forget().await;
        settle(application, drain_until).await;
        let drained = started.elapsed() - chaos;
        let crashes = supervisor.stop().await;
        let closed = tokio::time::timeout(CLOSE_WAIT, runtime.close())
            .await
            .is_ok();
        Self {
            workers,
            issued,
            errors,
            chaos,
            drained,
            kills: supervisor.kills,
            crashes,
            worker_log: supervisor.log_lines(),
            closed,
            disturbed,
        }
    }

    /// Prints the figures (to the process's stderr itself, past the test harness's capture,
    /// so that every run shows them) and what the calls and logs said; fails if anything
    /// went wrong.
    fn report(self, backend: &str, settings: &Settings, figures: &Figures) {
        let _ = writeln!(
            std::io::stderr().lock(),
            "chaos {backend}: {} workers, {:.1} s of chaos (seed {}), drained in {:.1} s; \
             calls acknowledged {}; {figures}; kills {}, worker crashes {}, \
             calls never answered {}, unavailable at callers {} ({} naming their message), \
             database errors at callers {}",
            self.workers,
            self.chaos.as_secs_f64(),
            settings.seed,
            self.drained.as_secs_f64(),
            self.issued.acknowledged,
            self.kills,
            self.crashes,
            self.issued.unanswered,
            self.errors.unavailable(),
            self.errors.unavailable_in_doubt(),
            self.errors.database_errors(),
        );
        if let Some(disturbed) = &self.disturbed {
            let _ = writeln!(std::io::stderr().lock(), "chaos {backend}: {disturbed}");
        }
        self.errors.print(backend);
        figures.print_errors(backend);
        print_log(backend, "the workers", self.worker_log);
        let driver_log = take(&mut *DRIVER_LOG.lock().expect("the driver's log"));
        print_log(backend, "the driver", driver_log);

        let mut failures = figures.failures();
        if self.kills < MIN_KILLS {
            failures.push(format!("only {} kills", self.kills));
        }
        if self.crashes > 0 {
            failures.push(format!(
                "{} workers died without being killed",
                self.crashes
            ));
        }
        if self.issued.unanswered > 0 {
            failures.push(format!("{} calls never answered", self.issued.unanswered));
        }
        if !self.closed {
            failures.push(format!(
                "the driver's runtime did not close in {CLOSE_WAIT:?}"
            ));
        }
        // Deadlocks and serialization failures are retried inside the runtime: none may
        // reach a caller.
        if self.errors.database_errors() > 0 {
            failures.push(format!(
                "{} database errors reached callers",
                self.errors.database_errors()
            ));
        }
        assert!(
            failures.is_empty(),
            "chaos {backend}: {}",
            failures.join(", ")
        );
    }
}

/// A soak's disturbance: not yet started, running, or none.
enum Disturbing {
    /// Not started yet (`None` when the soak has no disturbance).
    Waiting(Option<Disturbance>),
    /// Started, as a task of its own.
    Running(tokio::task::JoinHandle<String>),
}

impl Disturbing {
    /// Starts the disturbance unless it was started already.
    fn start(&mut self) {
        if let Self::Waiting(disturbance) = self {
            if let Some(disturbance) = disturbance.take() {
                *self = Self::Running(tokio::spawn(disturbance));
            }
        }
    }

    /// Whether the disturbance is still to start or still running.
    fn is_running(&self) -> bool {
        match self {
            Self::Waiting(disturbance) => disturbance.is_some(),
            Self::Running(task) => !task.is_finished(),
        }
    }

    /// The disturbance's line of figures, once it ended (`None` without a disturbance).
    async fn finish(self) -> Option<String> {
        match self {
            Self::Waiting(_) => None,
            Self::Running(task) => match task.await {
                Ok(figures) => Some(figures),
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            },
        }
    }
}

/// How long the soak runs, how long a sync call waits, and which workers die, from the
/// environment.
struct Settings {
    chaos: Duration,
    drain: Duration,
    /// Short, so that sync calls do time out under the chaos and are retried by key.
    call_timeout: Duration,
    seed: u64,
}

impl Settings {
    fn from_env() -> Self {
        let number = |name: &str| {
            std::env::var(name).ok().map(|value| {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} is a number"))
            })
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            chaos: Duration::from_secs(number("CHAOS_SECONDS").unwrap_or(20)),
            drain: Duration::from_secs(number("CHAOS_DRAIN_SECONDS").unwrap_or(60)),
            call_timeout: Duration::from_millis(number("CHAOS_CALL_TIMEOUT_MS").unwrap_or(100)),
            seed: number("CHAOS_SEED").unwrap_or(now.as_secs() ^ u64::from(now.subsec_nanos())),
        }
    }
}

/// The application's tables, each with a primary key (as Galera needs): what turns and
/// reminders applied and received (with their order of application), which effects ran
/// (once per id) and every run.
pub(crate) async fn create_tables(pool: &AnyPool) {
    let (id, text) = match pool.connect_options().database_url.scheme() {
        "postgres" | "postgresql" => ("BIGSERIAL PRIMARY KEY", "TEXT"),
        "mysql" | "mariadb" => ("BIGINT AUTO_INCREMENT PRIMARY KEY", "VARCHAR(255)"),
        _ => ("INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT"),
    };
    let tables = [
        format!(
            "CREATE TABLE applied (id {id}, actor {text} NOT NULL, seq BIGINT NOT NULL, \
             process BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE received (id {id}, target {text} NOT NULL, source {text} NOT NULL, \
             seq BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE effects_done (effect_id {text} PRIMARY KEY, actor {text} NOT NULL, \
             seq BIGINT NOT NULL)"
        ),
        format!("CREATE TABLE effect_runs (id {id}, effect_id {text} NOT NULL)"),
        format!("CREATE TABLE reminded (id {id}, actor {text} NOT NULL, seq BIGINT NOT NULL)"),
    ];
    for table in tables {
        sqlx::query(&table)
            .execute(pool)
            .await
            .expect("the table is created");
    }
}

/// The worker processes of one database, and how often they were killed.
struct Supervisor {
    /// Worker `i` works on `databases[i % databases.len()]`.
    databases: Vec<String>,
    log: PathBuf,
    children: Vec<Child>,
    random: Random,
    kills: u32,
    crashes: u32,
}

impl Supervisor {
    fn start(databases: &[String], workers: usize, logs: &Path, seed: u64) -> Self {
        let mut supervisor = Self {
            databases: databases.to_vec(),
            log: logs.join("workers.log"),
            children: Vec::new(),
            random: Random(seed | 1),
            kills: 0,
            crashes: 0,
        };
        supervisor.children = (0..workers).map(|slot| supervisor.spawn(slot)).collect();
        supervisor
    }

    /// The worker process of slot `slot`: this test binary, running only `worker_process`
    /// on the slot's database.
    fn spawn(&self, slot: usize) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the workers' log opens");
        let mut worker = running_only("chaos::worker_process");
        worker
            .env(DATABASE, &self.databases[slot % self.databases.len()])
            .stderr(log);
        Command::from(worker)
            .kill_on_drop(true)
            .spawn()
            .expect("the worker process starts")
    }

    /// Restarts workers that died on their own, then SIGKILLs a random one and restarts it.
    async fn kill_one(&mut self) {
        self.restart_crashed();
        let victim = self.random.below(self.children.len());
        let child = &mut self.children[victim];
        child.kill().await.expect("SIGKILL the worker");
        self.kills += 1;
        self.children[victim] = self.spawn(victim);
    }

    /// Counts and restarts the workers that died on their own.
    fn restart_crashed(&mut self) {
        for index in 0..self.children.len() {
            if let Ok(Some(_)) = self.children[index].try_wait() {
                self.crashes += 1;
                self.children[index] = self.spawn(index);
            }
        }
    }

    /// Stops every worker; returns how many died on their own.
    async fn stop(&mut self) -> u32 {
        for child in &mut self.children {
            if let Ok(Some(_)) = child.try_wait() {
                self.crashes += 1;
            } else {
                child.kill().await.expect("SIGKILL the worker");
            }
        }
        self.crashes
    }

    /// What the workers wrote to stderr: their warnings and errors, and any panic.
    fn log_lines(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().map(str::to_owned).collect()
    }
}

/// A xorshift generator: which worker dies is random, and repeatable from its seed.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % bound as u64).expect("a small bound")
    }
}

/// The driver tasks, each on its own share of the actors.
struct Drivers {
    stop: Arc<AtomicBool>,
    errors: Arc<ErrorLog>,
    tasks: Vec<tokio::task::JoinHandle<Issued>>,
}

impl Drivers {
    /// Starts the drivers, whose sync calls time out after `timeout`; a call still failing
    /// at `give_up` is abandoned.
    fn start(runtime: &Runtime, timeout: Duration, give_up: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(ErrorLog::default());
        let tasks = (0..DRIVERS)
            .map(|driver| {
                let driver = Driver {
                    runtime: runtime.clone(),
                    timeout,
                    actors: (driver..ACTORS).step_by(DRIVERS).collect(),
                    stop: Arc::clone(&stop),
                    give_up,
                    errors: Arc::clone(&errors),
                };
                tokio::spawn(driver.run())
            })
            .collect();
        Self {
            stop,
            errors,
            tasks,
        }
    }

    /// Issues no new number; waits for the calls in flight. Returns what was issued, and
    /// the errors the calls met.
    async fn stop(self) -> (Issued, Arc<ErrorLog>) {
        self.stop.store(true, Ordering::Release);
        let mut issued = Issued::default();
        for task in self.tasks {
            issued.merge(task.await.expect("a driver panicked"));
        }
        (issued, self.errors)
    }
}

/// One driver: issues its actors' messages 1, 2, 3.. in turn until told to stop.
struct Driver {
    runtime: Runtime,
    timeout: Duration,
    actors: Vec<usize>,
    stop: Arc<AtomicBool>,
    give_up: Instant,
    errors: Arc<ErrorLog>,
}

impl Driver {
    async fn run(self) -> Issued {
        let mut issued = Issued::default();
        let mut seq = 0;
        loop {
            seq += 1;
            for &actor in &self.actors {
                if self.stop.load(Ordering::Acquire) {
                    return issued;
                }
                match self.issue(actor, seq).await {
                    Answer::Acknowledged => issued.acknowledged += 1,
                    Answer::Refused => {}
                    Answer::Unanswered => issued.unanswered += 1,
                }
                issued.last.insert(actor_name(actor), seq);
            }
        }
    }

    /// Issues message `seq` to `actor` under its own key until the call returns: as a sync
    /// call (retried with the key after a timeout or a failed turn, until it returns or the
    /// message is dead) or as an enqueue (retried until the message is durable).
    async fn issue(&self, actor: usize, seq: i64) -> Answer {
        let key = format!("{}/{seq}", actor_name(actor));
        loop {
            let attempt = self.attempt(actor, seq, &key);
            let error = match tokio::time::timeout_at(self.give_up, attempt).await {
                Err(_) => return Answer::Unanswered,
                Ok(Ok(())) => return Answer::Acknowledged,
                Ok(Err(error)) => error,
            };
            self.errors.note(&error, Self::form(actor, seq));
            if matches!(
                error,
                Error::DeadLetter { .. } | Error::HandlerFailed { retry_at: None, .. }
            ) {
                return Answer::Refused;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// How message `seq` of `actor` is issued: a sync call for every other number, an
    /// enqueue for the rest.
    fn form(actor: usize, seq: i64) -> &'static str {
        if (actor as i64 + seq) % 2 == 0 {
            "a sync call"
        } else {
            "an enqueue"
        }
    }

    /// One call, in its [`Driver::form`].
    async fn attempt(&self, actor: usize, seq: i64, key: &str) -> Result<(), Error> {
        let reference = self
            .runtime
            .reference::<Counter>(actor_name(actor))
            .timeout(self.timeout);
        if Self::form(actor, seq) == "a sync call" {
            reference.idempotency_key(key).apply(seq).await.map(drop)
        } else {
            let enqueue = reference.enqueue().idempotency_key(key);
            enqueue.apply(seq).await.map(drop)
        }
    }
}

/// How a driver's call under one key ended.
enum Answer {
    /// It returned `Ok`: the turn committed (a sync call) or the message is durable (an
    /// enqueue).
    Acknowledged,
    /// The message is dead: its turn failed every attempt.
    Refused,
    /// It had not returned by the drivers' deadline.
    Unanswered,
}

/// What the drivers issued: each actor's last number, the calls acknowledged and the calls
/// that never returned.
#[derive(Default)]
struct Issued {
    last: BTreeMap<String, i64>,
    acknowledged: u32,
    unanswered: u32,
}

impl Issued {
    fn merge(&mut self, other: Issued) {
        self.last.extend(other.last);
        self.acknowledged += other.acknowledged;
        self.unanswered += other.unanswered;
    }

    /// Each actor's issued numbers that are multiples of `every`, in order.
    fn numbers(&self, every: i64) -> Vec<(String, i64)> {
        self.last
            .iter()
            .flat_map(|(actor, &last)| {
                (every..=last)
                    .step_by(every as usize)
                    .map(move |seq| (actor.clone(), seq))
            })
            .collect()
    }
}

/// The errors the drivers' calls returned, by kind and the form of the call that met them,
/// with the first of each.
#[derive(Default)]
struct ErrorLog {
    kinds: Mutex<BTreeMap<String, (u32, String)>>,
    /// How many calls failed with `Error::DatabaseUnavailable`.
    unavailable: std::sync::atomic::AtomicU32,
    /// How many of those named their message: its turn may have committed.
    unavailable_in_doubt: std::sync::atomic::AtomicU32,
    /// How many calls failed with `Error::Database`.
    database: std::sync::atomic::AtomicU32,
}

impl ErrorLog {
    fn note(&self, error: &Error, form: &str) {
        match error {
            Error::DatabaseUnavailable { request_id, .. } => {
                if request_id.is_some() {
                    self.unavailable_in_doubt.fetch_add(1, Ordering::Relaxed);
                }
                self.unavailable.fetch_add(1, Ordering::Relaxed)
            }
            Error::Database(_) => self.database.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        let debug = format!("{error:?}");
        let kind = debug
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut kinds = self.kinds.lock().expect("the error log");
        kinds
            .entry(format!("{kind} ({form})"))
            .or_insert_with(|| (0, error.to_string()))
            .0 += 1;
    }

    /// How many calls failed with a database error.
    fn database_errors(&self) -> u32 {
        self.database.load(Ordering::Relaxed)
    }

    /// How many calls failed because no database server answered
    /// (`Error::DatabaseUnavailable`): the call is retried under its key.
    fn unavailable(&self) -> u32 {
        self.unavailable.load(Ordering::Relaxed)
    }

    /// How many calls failed with `Error::DatabaseUnavailable` naming their message.
    fn unavailable_in_doubt(&self) -> u32 {
        self.unavailable_in_doubt.load(Ordering::Relaxed)
    }

    fn print(&self, backend: &str) {
        for (kind, (count, first)) in self.kinds.lock().expect("the error log").iter() {
            println!("chaos {backend}: calls failed {count} times with {kind}, first: {first}");
        }
    }
}

/// Waits until no message is ready, no reminder waits to fire and no effect is unfinished
/// (the survivors run the effects a killed worker held once their lease runs out), or the
/// deadline.
async fn settle(application: &Application, deadline: Instant) {
    const UNSETTLED: &str = "SELECT (SELECT COUNT(*) FROM solid_messages WHERE status = 'ready') \
         + (SELECT COUNT(*) FROM solid_reminders) \
         + (SELECT COUNT(*) FROM solid_effects WHERE status IN ('ready', 'running'))";
    while Instant::now() < deadline {
        let pool = application.pool_by(deadline).await;
        match sqlx::query_scalar::<_, i64>(UNSETTLED)
            .fetch_one(&pool)
            .await
        {
            Ok(0) => return,
            Ok(_) => {}
            Err(_) => application.forget().await,
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `SELECT COUNT(*) FROM {from}`.
async fn scalar(pool: &AnyPool, from: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {from}"))
        .fetch_one(pool)
        .await
        .expect("the count runs")
}

/// What the tables show, against what was issued.
struct Figures {
    messages: Tally,
    /// Messages applied in a worker process rather than in the driver's sync calls.
    by_workers: i64,
    sends: Tally,
    /// Effects run in any order: only what is missing or doubled counts.
    effects: Tally,
    /// The reminders scheduled by committed turns against those that fired, in any order:
    /// only what is missing or doubled counts.
    reminders: Tally,
    /// Emitted effects (rows of `solid_effects`) whose id never reached `effects_done`.
    effects_unrun: usize,
    effect_runs: i64,
    dead_letters: i64,
    /// Messages still waiting in a mailbox when the drain ended.
    queued: i64,
    /// Distinct errors recorded on messages and effects, with how often each occurred.
    recorded_errors: BTreeMap<String, usize>,
}

impl Figures {
    async fn read(pool: &AnyPool, issued: &Issued) -> Self {
        let applied: Vec<(String, i64)> =
            sqlx::query_as("SELECT actor, seq FROM applied ORDER BY id")
                .fetch_all(pool)
                .await
                .expect("applied reads");
        let received: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT source, target, seq FROM received ORDER BY id")
                .fetch_all(pool)
                .await
                .expect("received reads");
        let done: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT effect_id, actor, seq FROM effects_done ORDER BY effect_id")
                .fetch_all(pool)
                .await
                .expect("effects_done reads");
        let reminded: Vec<(String, i64)> =
            sqlx::query_as("SELECT actor, seq FROM reminded ORDER BY id")
                .fetch_all(pool)
                .await
                .expect("reminded reads");
        let emitted: Vec<String> = sqlx::query_scalar("SELECT effect_id FROM solid_effects")
            .fetch_all(pool)
            .await
            .expect("solid_effects reads");
        let recorded: Vec<String> = sqlx::query_scalar(
            "SELECT last_error FROM solid_messages WHERE last_error IS NOT NULL \
             UNION ALL SELECT last_error FROM solid_effects WHERE last_error IS NOT NULL",
        )
        .fetch_all(pool)
        .await
        .expect("the errors read");

        let done_ids: HashSet<&str> = done.iter().map(|(id, _, _)| id.as_str()).collect();
        let scheduled: HashSet<(String, i64)> = applied
            .iter()
            .filter(|(_, seq)| seq % REMIND_EVERY == 0)
            .cloned()
            .collect();
        Self {
            reminders: Tally::of(scheduled, reminded),
            messages: Tally::of(issued.numbers(1), applied),
            sends: Tally::of(
                issued
                    .numbers(SEND_EVERY)
                    .into_iter()
                    .map(|(source, seq)| ((source.clone(), send_target(&source, seq)), seq)),
                received
                    .into_iter()
                    .map(|(source, target, seq)| ((source, target), seq)),
            ),
            effects: Tally::of(
                issued.numbers(EMIT_EVERY),
                done.iter().map(|(_, actor, seq)| (actor.clone(), *seq)),
            ),
            effects_unrun: emitted
                .iter()
                .filter(|id| !done_ids.contains(id.as_str()))
                .count(),
            by_workers: scalar(
                pool,
                &format!("applied WHERE process <> {}", std::process::id()),
            )
            .await,
            effect_runs: scalar(pool, "effect_runs").await,
            dead_letters: scalar(pool, "solid_messages WHERE status = 'dead'").await,
            queued: scalar(pool, "solid_messages WHERE status = 'ready'").await,
            recorded_errors: recorded
                .into_iter()
                .fold(BTreeMap::new(), |mut errors, error| {
                    *errors.entry(error).or_default() += 1;
                    errors
                }),
        }
    }

    /// The figures that should be zero and are not.
    fn failures(&self) -> Vec<String> {
        [
            ("messages lost", self.messages.lost),
            ("messages doubled", self.messages.doubled),
            ("messages out of order", self.messages.out_of_order),
            ("sends lost", self.sends.lost),
            ("sends doubled", self.sends.doubled),
            ("sends out of order", self.sends.out_of_order),
            ("effects missing", self.effects.lost),
            ("effects doubled", self.effects.doubled),
            ("effects unrun", self.effects_unrun),
            ("reminders missing", self.reminders.lost),
            ("reminders doubled", self.reminders.doubled),
        ]
        .into_iter()
        .filter(|&(_, figure)| figure > 0)
        .map(|(what, figure)| format!("{what} {figure}"))
        .collect()
    }

    fn print_errors(&self, backend: &str) {
        for (error, count) in &self.recorded_errors {
            println!("chaos {backend}: recorded {count} times: {error}");
        }
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            messages,
            sends,
            effects,
            reminders,
            ..
        } = self;
        write!(
            f,
            "messages {} ({} applied by workers), lost {}, doubled {}, order violations {}; \
             sends {}, lost {}, doubled {}, order violations {}; \
             effects {}, missing {}, doubled {}, unrun {} ({} runs); \
             reminders {}, missing {}, doubled {}; dead letters {}, still queued {}",
            messages.expected,
            self.by_workers,
            messages.lost,
            messages.doubled,
            messages.out_of_order,
            sends.expected,
            sends.lost,
            sends.doubled,
            sends.out_of_order,
            effects.expected,
            effects.lost,
            effects.doubled,
            self.effects_unrun,
            self.effect_runs,
            reminders.expected,
            reminders.lost,
            reminders.doubled,
            self.dead_letters,
            self.queued,
        )
    }
}

/// Expected numbers per stream against the numbers observed, in the order they were
/// observed.
#[derive(Debug, PartialEq, Eq)]
struct Tally {
    expected: usize,
    /// Expected and never observed.
    lost: usize,
    /// Observed more than once (each extra counts), or observed and never expected.
    doubled: usize,
    /// Observed after a higher number of the same stream.
    out_of_order: usize,
}

impl Tally {
    fn of<K: std::hash::Hash + Eq>(
        expected: impl IntoIterator<Item = (K, i64)>,
        observed: impl IntoIterator<Item = (K, i64)>,
    ) -> Self {
        let mut unseen: HashSet<(K, i64)> = expected.into_iter().collect();
        let expected = unseen.len();
        let mut highest: HashMap<K, i64> = HashMap::new();
        let (mut doubled, mut out_of_order) = (0, 0);
        for (stream, number) in observed {
            let entry = (stream, number);
            if !unseen.remove(&entry) {
                doubled += 1;
            }
            let top = highest.entry(entry.0).or_insert(number);
            if number < *top {
                out_of_order += 1;
            } else {
                *top = number;
            }
        }
        Self {
            expected,
            lost: unseen.len(),
            doubled,
            out_of_order,
        }
    }
}

#[test]
fn the_tally_counts_what_is_lost_doubled_and_out_of_order() {
    let expected = [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)];
    let observed = [("a", 1), ("b", 2), ("a", 3), ("a", 1), ("b", 1), ("c", 1)];
    assert_eq!(
        Tally::of(expected, observed),
        Tally {
            expected: 5,
            lost: 1,
            doubled: 2,
            out_of_order: 2,
        }
    );
}

/// Prints each kind of logged line (its level and message) once: how often, and the first.
fn print_log(backend: &str, who: &str, lines: Vec<String>) {
    let mut kinds: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for line in lines.into_iter().filter(|line| !line.is_empty()) {
        let kind = line.split(" |").next().unwrap_or_default().to_owned();
        kinds.entry(kind).or_insert_with(|| (0, line)).0 += 1;
    }
    for (count, first) in kinds.values() {
        println!("chaos {backend}: {who} logged {count} times: {first}");
    }
}

/// A tracing subscriber that hands each warning or error of the runtime, as one line, to
/// its sink.
struct Warnings(fn(String));

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN && metadata.target().starts_with("solid_objects")
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        let level = event.metadata().level();
        (self.0)(format!("{level} {} |{}", line.message, line.fields));
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// An event's message, and its other fields as ` name=value`.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields += &format!(" {}={value:?}", field.name());
        }
    }
}
