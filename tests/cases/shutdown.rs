//! Stopping within a deadline: `Runtime::shutdown_with_deadline` lets a turn in flight
//! finish and commit, and abandons one that outlasts the deadline (its transaction rolls
//! back, its message stays ready with no attempt counted, and a fresh runtime on the same
//! database runs it once), on every backend; `Runtime::run_until_signal` stops
//! on SIGTERM, lets its turn in flight commit and exits cleanly. A turn abandoned inside its
//! own SQLite query frees the writer; a caller's turn in flight ends with its future; a
//! shutdown before `run`, twice, or beside `close` returns; idle workers still wake for a
//! commit between their pass and their wait, and for a delayed message that falls due; the
//! metrics count nothing of an abandoned turn.
//!
//! Handlers wait on gates the test opens (never on the clock); the only real time is a
//! deadline that must pass. The SIGTERM test re-runs this test binary as a child process
//! that executes only `signalled_process` (which does nothing unless the parent set
//! `SHUTDOWN_CHILD_DATABASE`).

use crate::support;

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{Clock, MessageStatus, ShutdownReport};
use support::children::running_only;
use support::effect_actors::{Charge, Till};
use support::fixtures::{sqlite_harness, start_with_policy};
use support::operator::status_of;
use support::workers::{run_workers, within};
use support::{eventually, Harness};
use tokio::sync::Semaphore;

const CHILD_DATABASE: &str = "SHUTDOWN_CHILD_DATABASE";
const CHILD_MARKER: &str = "SHUTDOWN_CHILD_MARKER";

/// A short real deadline: the abandoned handlers never finish, so it always passes.
const SHORT_DEADLINE: Duration = Duration::from_millis(200);

/// Where a handler waits: it says it entered, then the first one through waits until the
/// gate opens (or forever, for a gate that never opens); later ones pass straight through.
struct Gate {
    entered: Semaphore,
    open: Semaphore,
    first_never_ends: bool,
    entries: AtomicU32,
}

impl Gate {
    async fn pass(&self) {
        let first = self.entries.fetch_add(1, Ordering::AcqRel) == 0;
        self.entered.add_permits(1);
        if !first {
            return;
        }
        if self.first_never_ends {
            std::future::pending::<()>().await;
        }
        self.open.acquire().await.expect("open").forget();
    }

    async fn entered(&self) {
        self.entered.acquire().await.expect("entered").forget();
    }

    fn open(&self) {
        self.open.add_permits(1);
    }
}

static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

/// The gate called `name`, made on first use (one whose first handler waits to be opened).
fn gate(name: &str) -> Arc<Gate> {
    new_gate(name, false)
}

fn new_gate(name: &str, first_never_ends: bool) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap();
    Arc::clone(gates.entry(name.to_owned()).or_insert_with(|| {
        Arc::new(Gate {
            entered: Semaphore::new(0),
            open: Semaphore::new(0),
            first_never_ends,
            entries: AtomicU32::new(0),
        })
    }))
}

/// The runtime of the child process, for its handler to see the shutdown begin.
static CHILD_RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Counts its runs, writing a row to the application's `marks` table in each turn.
#[actor]
#[derive(Default)]
struct Job {
    runs: u32,
}

#[actor]
impl Job {
    /// Writes its mark, then waits at the gate `gate`.
    #[command]
    async fn work(&mut self, turn: &mut Turn<Self>, gate: String) -> Result<u32, TurnError> {
        mark(turn, &gate).await?;
        self.runs += 1;
        self::gate(&gate).pass().await;
        Ok(self.runs)
    }

    /// Fails, to be retried later: a message that holds back the ones behind it.
    #[command]
    fn not_yet(&mut self) -> Result<u32, Failure> {
        Err(Failure::retryable("not yet"))
    }

    /// In the child process: writes its mark, tells the parent (the marker file), and
    /// finishes only once its runtime is shutting down.
    #[command]
    async fn work_until_shutdown(&mut self, turn: &mut Turn<Self>) -> Result<u32, TurnError> {
        mark(turn, "child").await?;
        self.runs += 1;
        let marker = std::env::var(CHILD_MARKER).map_err(Failure::retryable)?;
        std::fs::write(marker, "entered").map_err(Failure::retryable)?;
        let runtime = CHILD_RUNTIME.get().expect("the child's runtime");
        while !runtime.is_closed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(self.runs)
    }
}

async fn mark(turn: &mut Turn<Job>, gate: &str) -> Result<(), TurnError> {
    support::execute_in_turn(turn, "INSERT INTO marks (gate) VALUES (?)", &[gate]).await?;
    Ok(())
}

/// The harness's database, and the builder every runtime here starts from.
struct Database {
    harness: Harness,
}

impl Database {
    fn new() -> Self {
        Self {
            harness: Harness::new(),
        }
    }

    /// A fresh database with the application's `marks` table, which [`Job`]'s turns write to.
    async fn with_marks() -> Self {
        let backend = Self::new();
        support::execute(&backend.harness, "CREATE TABLE marks (gate TEXT NOT NULL)").await;
        backend
    }

    /// A builder on the database at `database`, as the child process opens it.
    fn builder_at(database: &str, clock: ManualClock) -> solid_objects::Builder {
        crate::BACKEND
            .store_at(database)
            .clock(clock)
            .policy(AllowAll)
            .actor::<Job>()
            .workers(1)
    }

    async fn builder(&self) -> solid_objects::Builder {
        Self::builder_at(&self.harness.database().await, self.harness.clock.clone())
    }

    async fn runtime(&self) -> Runtime {
        self.builder()
            .await
            .start()
            .await
            .expect("the runtime starts")
    }

    async fn marks(&self) -> i64 {
        support::count(&self.harness, "marks").await
    }
}

fn is_ready_unattempted(status: &MessageStatus) -> bool {
    matches!(status, MessageStatus::Ready { attempts: 0, .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_in_flight_finishes_within_the_deadline_commits_and_nothing_new_starts() {
    let backend = Database::with_marks().await;
    let runtime = backend.runtime().await;
    let job = runtime.reference::<Job>("in-flight");
    let first = job.enqueue().work("in-flight").await.unwrap();
    let second = job.enqueue().work("in-flight").await.unwrap();
    let workers = run_workers(&runtime);
    let gate = gate("in-flight");
    gate.entered().await;

    let shutting_down = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .shutdown_with_deadline(Duration::from_secs(300))
                .await
        }
    });
    while !runtime.is_closed() {
        tokio::task::yield_now().await;
    }
    gate.open();
    let report = shutting_down.await.unwrap();
    assert_eq!(report, ShutdownReport::default());
    assert!(report.is_clean());
    workers.await.unwrap().unwrap();

    assert_eq!(
        first.typed::<u32>().result().await.unwrap(),
        Some(1),
        "the turn in flight committed"
    );
    let second = status_of(&runtime, second.request_id()).await;
    assert!(
        is_ready_unattempted(&second),
        "no turn starts after the shutdown: {second:?}"
    );
    assert_eq!(backend.marks().await, 1);
    runtime.close().await;
}

/// A call waiting behind a message in its retry backoff when its runtime closes hears that
/// its message is queued, and which: a fresh runtime on the same database finds it ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_when_its_runtime_closes_hears_its_message_is_queued() {
    let backend = Database::with_marks().await;
    let runtime = backend.runtime().await;
    let job = runtime.reference::<Job>("waiting");
    assert!(job.not_yet().await.is_err());
    let calling = tokio::spawn({
        let job = job.clone().timeout(Duration::from_secs(60));
        async move { job.work("waiting").await }
    });
    let committed = eventually(Duration::from_secs(10), || async {
        let messages = runtime.admin().actor_types().await.unwrap();
        messages.iter().any(|summary| summary.ready_messages == 2)
    })
    .await;
    assert!(
        committed,
        "the call's message is committed behind the failed one"
    );

    runtime.close().await;
    let heard = calling.await.unwrap();
    let Err(Error::Queued { request_id, .. }) = &heard else {
        panic!("a call whose message is committed must say it is queued, not {heard:?}");
    };

    let fresh = backend.runtime().await;
    let queued = status_of(&fresh, request_id).await;
    assert!(is_ready_unattempted(&queued), "{queued:?}");
    assert_eq!(backend.marks().await, 0);
    fresh.close().await;
}

/// A turn whose handler never ends is abandoned at the deadline; then a fresh runtime on
/// the same database, while the first is still open, runs the message exactly once.
async fn abandoned_at_the_deadline(backend: Database, gate_name: &str) {
    let first = backend.runtime().await;
    let stuck = new_gate(gate_name, true);
    let job = first.reference::<Job>(gate_name);
    let message = job.enqueue().work(gate_name.to_owned()).await.unwrap();
    let workers = run_workers(&first);
    stuck.entered().await;

    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1);
    assert_eq!(report.abandoned_effects, 0);
    assert!(!report.is_clean());
    workers.await.unwrap().unwrap();

    let second = backend.runtime().await;
    let after = status_of(&second, message.request_id()).await;
    assert!(
        is_ready_unattempted(&after),
        "the abandoned turn counted nothing: {after:?}"
    );
    assert_eq!(backend.marks().await, 0, "the abandoned turn rolled back");
    assert_eq!(
        second.testing().drain().await.unwrap().turns,
        1,
        "the first runtime holds no lock"
    );
    assert_eq!(
        message.typed::<u32>().result().await.unwrap(),
        Some(1),
        "the message ran once, as the actor's first run"
    );
    assert_eq!(
        second
            .reference::<Job>(gate_name)
            .snapshot()
            .await
            .unwrap()
            .runs,
        1
    );
    assert_eq!(backend.marks().await, 1);
    assert_eq!(stuck.entries.load(Ordering::Acquire), 2);
    second.close().await;
    first.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_the_deadline_is_abandoned_and_runs_once_elsewhere() {
    abandoned_at_the_deadline(Database::with_marks().await, "abandoned").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_past_the_deadline_is_abandoned_and_runs_again_at_once() {
    let backend = Database::new();
    let effect_gate = new_gate("effect", true);
    let with_effect = |builder: solid_objects::Builder| {
        builder
            .actor::<Till>()
            .workers(Workers::default().effect_lease(Duration::from_secs(60)))
            .effect(|charge: Charge, _context| async move {
                gate(&charge.tag).pass().await;
                Ok::<(), Failure>(())
            })
    };
    let first = with_effect(backend.builder().await).start().await.unwrap();
    first
        .reference::<Till>("t")
        .ring_up("effect")
        .await
        .unwrap();
    let workers = run_workers(&first);
    effect_gate.entered().await;

    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 0);
    assert_eq!(report.abandoned_effects, 1);
    workers.await.unwrap().unwrap();

    // Its runner gave the lease back: it runs again at once, not after its 60 s lease.
    let second = with_effect(backend.builder().await).start().await.unwrap();
    assert_eq!(second.testing().run_effects().await.unwrap(), 1);
    assert_eq!(effect_gate.entries.load(Ordering::Acquire), 2);
    second.close().await;
    first.close().await;
}

/// The child's entry point: workers on the parent's database until SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signalled_process() {
    let Ok(database) = std::env::var(CHILD_DATABASE) else {
        return;
    };
    let runtime = Database::builder_at(&database, ManualClock::starting_now())
        .workers(Workers::default().shutdown_deadline(Duration::from_secs(60)))
        .start()
        .await
        .expect("the child's runtime starts");
    CHILD_RUNTIME.set(runtime.clone()).expect("set once");
    let report = runtime.run_until_signal().await.expect("the workers run");
    assert!(report.is_clean(), "{report:?}");
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_signal_ends_on_sigterm_after_its_turn_in_flight_commits() {
    let backend = Database::with_marks().await;
    let marker = backend.harness.dir().join("entered");
    let log = backend.harness.dir().join("child.log");
    let runtime = backend.runtime().await;
    let job = runtime.reference::<Job>("child");
    let message = job.enqueue().work_until_shutdown().await.unwrap();

    let mut child = running_only(&support::test_name(module_path!(), "signalled_process"))
        .env(CHILD_DATABASE, backend.harness.database().await)
        .env(CHILD_MARKER, &marker)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("the child starts");
    let entered = eventually(Duration::from_secs(60), || async { marker.exists() }).await;
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(entered, "the child never started the turn");
    assert!(terminated.success());

    let mut exit = None;
    eventually(Duration::from_secs(60), || {
        exit = child.try_wait().expect("the child is waited for");
        std::future::ready(exit.is_some())
    })
    .await;
    let Some(exit) = exit else {
        child.kill().expect("SIGKILL the child");
        child.wait().expect("the child is reaped");
        panic!("the child did not exit within 60 s of SIGTERM");
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exit.success(), "the child failed ({exit}):\n{output}");

    assert_eq!(message.typed::<u32>().result().await.unwrap(), Some(1));
    assert_eq!(backend.marks().await, 1);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_completes_when_the_runtime_shuts_down_and_stops_an_axum_server() {
    use futures_util::FutureExt;

    let harness = Harness::new();
    let runtime = start_with_policy(&harness, AllowAll).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "up" }));
    let serving = axum::serve(listener, router).with_graceful_shutdown(runtime.closed());
    let server = tokio::spawn(async move { serving.await });
    assert!(
        runtime.closed().now_or_never().is_none(),
        "an open runtime is not closed"
    );
    tokio::task::yield_now().await;
    assert!(
        !server.is_finished(),
        "the server runs while the runtime is open"
    );

    runtime.shutdown();
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the server stops once the runtime shuts down")
        .unwrap()
        .unwrap();
    assert_eq!(
        runtime.closed().now_or_never(),
        Some(()),
        "a closed runtime's closed() completes at once"
    );
    runtime.close().await;
}

/// A slow query of the handler's own on the turn's SQLite connection (a report, a missing
/// index): it runs for far longer than any deadline here.
const SLOW_SQLITE_QUERY: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                                 WHERE x < 60000000) SELECT COUNT(*) FROM c";

/// Entered handlers, by gate name.
static ENTERED: LazyLock<Mutex<std::collections::HashMap<String, Arc<Semaphore>>>> =
    LazyLock::new(Mutex::default);
static ENTRIES: AtomicU32 = AtomicU32::new(0);

fn entered(name: &str) -> Arc<Semaphore> {
    Arc::clone(
        ENTERED
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(0))),
    )
}

#[actor]
#[derive(Default)]
struct Grinder {
    ground: i64,
    runs: u32,
}

#[actor]
impl Grinder {
    /// Says it entered, then grinds in its own SQL on the turn's SQLite connection.
    #[command]
    async fn grind(&mut self, turn: &mut Turn<Self>, gate: String) -> Result<i64, TurnError> {
        let connection = turn.sqlite().await?;
        entered(&gate).add_permits(1);
        let rows: i64 = sqlx::query_scalar(SLOW_SQLITE_QUERY)
            .fetch_one(connection)
            .await?;
        self.ground += rows;
        Ok(self.ground)
    }

    /// Says it entered, then waits forever the first time (any gate), and passes later.
    #[command]
    async fn wait(&mut self, gate: String) -> u32 {
        let first = ENTRIES.fetch_add(1, Ordering::AcqRel) == 0;
        entered(&gate).add_permits(1);
        if first {
            std::future::pending::<()>().await;
        }
        self.runs += 1;
        self.runs
    }

    /// Says it entered, then waits forever.
    #[command]
    async fn hang(&mut self, gate: String) {
        entered(&gate).add_permits(1);
        std::future::pending::<()>().await;
    }

    #[command]
    fn bump(&mut self) -> u32 {
        self.runs += 1;
        self.runs
    }
}

/// A builder on the harness's database and clock with [`Grinder`] and one worker.
async fn builder(harness: &Harness) -> solid_objects::Builder {
    harness.builder().await.actor::<Grinder>().workers(1)
}

/// `shutdown_with_deadline`: "an abandoned turn rolls back and its message stays ready ...
/// so another process (or this one, restarted) runs it". A turn abandoned in its own query
/// on `turn.sqlite()` must free the writer: the next runtime on the file starts and writes
/// at once. (This held: `Turn`'s drop poisons the transaction, which interrupts the query.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_abandoned_inside_its_own_sqlite_query_frees_the_writer_for_the_next_runtime() {
    let Some(harness) = sqlite_harness("the handler's query runs on turn.sqlite()") else {
        return;
    };
    let first = builder(&harness)
        .await
        .turn_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let grinder = first.reference::<Grinder>("g");
    grinder.enqueue().grind("grind".to_owned()).await.unwrap();
    let workers = run_workers(&first);
    entered("grind").acquire().await.unwrap().forget();

    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1, "{report:?}");
    within(10, "run", workers).await.unwrap().unwrap();

    let started = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(20), async {
        let second = builder(&harness)
            .await
            .sync_timeout(Duration::from_secs(2))
            .start()
            .await?;
        second.reference::<Grinder>("other").bump().await
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        matches!(next, Ok(Ok(1))) && elapsed < Duration::from_secs(3),
        "the next runtime on the file, right after the shutdown abandoned a turn in its own \
         query: {next:?} after {elapsed:?}"
    );
}

/// The documented way to stop: `shutdown_with_deadline(d)`, then `close()`. A synchronous
/// caller's turn in flight belongs to the caller's future, not to the runtime: the shutdown
/// still returns by its deadline, and `close()` (which on SQLite waits for the writer that
/// turn holds) returns at once when the caller drops its future, as the docs say to do.
/// (This behaviour is documented on `shutdown_with_deadline`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_turn_in_flight_ends_with_its_future_and_then_close_returns() {
    let harness = Harness::new();
    let runtime = builder(&harness)
        .await
        .turn_timeout(Duration::from_secs(600))
        .sync_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let workers = run_workers(&runtime);
    let caller = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .reference::<Grinder>("called")
                .hang("called".to_owned())
                .await
        }
    });
    entered("called").acquire().await.unwrap().forget();

    let report = within(
        10,
        "shutdown_with_deadline",
        runtime.shutdown_with_deadline(SHORT_DEADLINE),
    )
    .await;
    within(10, "run", workers).await.unwrap().unwrap();
    caller.abort();
    let closed = tokio::time::timeout(Duration::from_secs(5), runtime.close()).await;
    assert!(
        closed.is_ok(),
        "close() after shutdown_with_deadline({SHORT_DEADLINE:?}) (report {report:?}) and the \
         caller's future dropped still waits after 5 s"
    );
    // The dropped turn rolled back: the writer is free for the next runtime on the file.
    let next = builder(&harness).await.start().await.unwrap();
    next.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_before_run_twice_and_beside_close_all_return() {
    // Before run ever started: clean at once, and run then returns at once.
    let harness = Harness::new();
    let runtime = builder(&harness).await.start().await.unwrap();
    let report = within(
        5,
        "shutdown before run",
        runtime.shutdown_with_deadline(Duration::from_secs(60)),
    )
    .await;
    assert!(report.is_clean());
    within(5, "run after the shutdown", runtime.run())
        .await
        .unwrap();
    runtime.close().await;

    // Twice, concurrently, with one worker stuck: both return; one abandoned worker in all.
    let harness = Harness::new();
    let runtime = builder(&harness).await.start().await.unwrap();
    ENTRIES.store(0, Ordering::Release);
    let grinder = runtime.reference::<Grinder>("twice");
    let message = grinder.enqueue().wait("twice".to_owned()).await.unwrap();
    let workers = run_workers(&runtime);
    entered("twice").acquire().await.unwrap().forget();
    let (a, b) = within(10, "two shutdowns", async {
        tokio::join!(
            runtime.shutdown_with_deadline(SHORT_DEADLINE),
            runtime.shutdown_with_deadline(SHORT_DEADLINE)
        )
    })
    .await;
    assert_eq!(a.abandoned_workers + b.abandoned_workers, 1, "{a:?} {b:?}");
    within(10, "run", workers).await.unwrap().unwrap();
    let status = message.status().await.unwrap();
    assert!(
        matches!(status, MessageStatus::Ready { attempts: 0, .. }),
        "{status:?}"
    );
    runtime.close().await;

    // close() while a worker is stuck, then a shutdown with a deadline: both return.
    let harness = Harness::new();
    let runtime = builder(&harness).await.start().await.unwrap();
    ENTRIES.store(0, Ordering::Release);
    let grinder = runtime.reference::<Grinder>("close");
    grinder.enqueue().wait("close".to_owned()).await.unwrap();
    let workers = run_workers(&runtime);
    entered("close").acquire().await.unwrap().forget();
    let closing = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.close().await }
    });
    let report = within(
        10,
        "shutdown beside close",
        runtime.shutdown_with_deadline(SHORT_DEADLINE),
    )
    .await;
    assert_eq!(report.abandoned_workers, 1);
    within(10, "close", closing).await.unwrap();
    within(10, "run", workers).await.unwrap().unwrap();
}

/// A clock that stops the worker that calls it from `Runtime::upkeep_due` (the last thing a
/// pass does before the worker waits) on its `trap_at`-th pass, until the test lets it go.
struct TrapClock {
    inner: ManualClock,
    passes: Arc<AtomicUsize>,
    trap_at: usize,
    reached: Arc<tokio::sync::Notify>,
    release: Arc<std::sync::Barrier>,
}

impl Clock for TrapClock {
    fn now(&self) -> DateTime<Utc> {
        let trace = Backtrace::force_capture().to_string();
        if trace.contains("upkeep_due") {
            let pass = self.passes.fetch_add(1, Ordering::AcqRel) + 1;
            if pass == self.trap_at {
                self.reached.notify_one();
                self.release.wait();
            }
        }
        self.inner.now()
    }
}

/// `Runtime::run`: "A commit in this process wakes an idle worker at once". The wake-up is
/// `Notify::notify_waiters`, which only reaches a worker already waiting: a commit made
/// after a worker's pass looked for work and before it waits is lost, and the work waits
/// for the worker's next poll (up to `idle_poll`: here 3.2 s into the back-off).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_commit_between_a_workers_pass_and_its_wait_still_wakes_it() {
    // The trap blocks one of the test's runtime threads inside the worker's pass; on both
    // servers the enqueue below then waited for ever in some runs (a task stuck behind the
    // blocked thread, it seems): a defect of this test's trap, reported. It ran on SQLite only
    // before the backends shared their cases.
    let Some(harness) =
        sqlite_harness("the trap clock blocks a runtime thread, which hangs the server drivers")
    else {
        return;
    };
    let passes = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(std::sync::Barrier::new(2));
    let clock = TrapClock {
        inner: harness.clock.clone(),
        passes: Arc::clone(&passes),
        // Passes 1..5 are followed by waits of 0.1, 0.2, 0.4, 0.8, 1.6 s; the 6th by 3.2 s.
        trap_at: 6,
        reached: Arc::clone(&reached),
        release: Arc::clone(&release),
    };
    let runtime = harness
        .store()
        .await
        .clock(clock)
        .policy(AllowAll)
        .actor::<Grinder>()
        .workers(Workers::new(1).idle_poll(Duration::from_secs(60)))
        .start()
        .await
        .unwrap();
    let workers = run_workers(&runtime);
    within(30, "the worker's 6th idle pass", reached.notified()).await;

    // The worker's pass found nothing and it has not waited yet: a commit now.
    let grinder = runtime.reference::<Grinder>("late");
    let message = grinder.enqueue().bump().await.unwrap();
    tokio::task::spawn_blocking(move || {
        release.wait();
    })
    .await
    .unwrap();
    let committed = Instant::now();

    let ran = eventually(Duration::from_millis(1500), || {
        let message = message.clone();
        async move { matches!(message.status().await, Ok(MessageStatus::Completed)) }
    })
    .await;
    let status = message.status().await.unwrap();
    assert!(
        ran,
        "a message committed while the only worker was between its pass and its wait was not \
         run within 1.5 s (it is {status:?}); the worker did {} passes",
        passes.load(Ordering::Acquire)
    );
    let _ = committed;
    runtime.shutdown();
    within(10, "run", workers).await.unwrap().unwrap();
    runtime.close().await;
}

/// Several idle workers, one holding the poll turn: a delayed message that becomes due (by
/// the manual clock) is run within about one `idle_poll`. (This held.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_due_while_workers_wait_on_the_turn_runs_within_an_idle_poll() {
    let harness = Harness::new();
    let runtime = builder(&harness)
        .await
        .workers(Workers::new(4).idle_poll(Duration::from_millis(200)))
        .start()
        .await
        .unwrap();
    let grinder = runtime.reference::<Grinder>("delayed");
    let message = grinder
        .enqueue()
        .delay(Duration::from_secs(60))
        .bump()
        .await
        .unwrap();
    let before = runtime.stats().worker_passes;
    let workers = run_workers(&runtime);
    // After eight idle passes the workers have backed off to the longest poll and take
    // turns.
    let backed_off = eventually(Duration::from_secs(10), || async {
        runtime.stats().worker_passes >= before + 8
    })
    .await;
    assert!(backed_off, "the idle workers keep polling");
    harness.clock.advance(Duration::from_secs(61));
    let ran = eventually(Duration::from_millis(1000), || {
        let message = message.clone();
        async move { matches!(message.status().await, Ok(MessageStatus::Completed)) }
    })
    .await;
    assert!(
        ran,
        "not run within 1 s of becoming due with idle_poll 200 ms"
    );
    runtime.shutdown();
    within(10, "run", workers).await.unwrap().unwrap();
    runtime.close().await;
}

static METERED_ENTRIES: AtomicU32 = AtomicU32::new(0);

#[actor]
#[derive(Default)]
struct Metered {
    runs: u32,
}

#[actor]
impl Metered {
    /// Waits forever the first time, passes later.
    #[command]
    async fn wait(&mut self) -> u32 {
        let first = METERED_ENTRIES.fetch_add(1, Ordering::AcqRel) == 0;
        entered("metered").add_permits(1);
        if first {
            std::future::pending::<()>().await;
        }
        self.runs += 1;
        self.runs
    }

    #[command]
    async fn hang(&mut self) {
        std::future::pending::<()>().await;
    }
}

/// The value of the sample `name{actor_type="Metered",operation="op"}` (0 if absent).
fn sample(text: &str, name: &str, operation: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(series, _)| {
            series.starts_with(&format!("{name}{{"))
                && series.contains("actor_type=\"Metered\"")
                && series.contains(&format!("operation=\"{operation}\""))
        })
        .map_or(0.0, |(_, value)| value.parse().unwrap())
}

/// Counters follow commits: a turn abandoned at the shutdown deadline counts nothing (its
/// re-run elsewhere counts once), and a turn timeout counts one failed attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_nothing_of_an_abandoned_turn_and_one_failure_per_timeout() {
    use solid_objects::metrics::{MESSAGES_COMPLETED, MESSAGES_ENQUEUED, MESSAGES_FAILED};
    let handle = support::prometheus();
    let harness = Harness::new();
    let with = |builder: solid_objects::Builder| builder.actor::<Metered>();
    let first = with(builder(&harness).await).start().await.unwrap();
    let metered = first.reference::<Metered>("m");
    let message = metered.enqueue().wait().await.unwrap();
    let workers = run_workers(&first);
    entered("metered").acquire().await.unwrap().forget();
    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1);
    within(10, "run", workers).await.unwrap().unwrap();

    let text = handle.render();
    assert_eq!(sample(&text, MESSAGES_ENQUEUED, "wait"), 1.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_COMPLETED, "wait"), 0.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_FAILED, "wait"), 0.0, "{text}");

    let second = with(builder(&harness).await)
        .turn_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    assert_eq!(second.testing().drain().await.unwrap().turns, 1);
    assert_eq!(message.typed::<u32>().result().await.unwrap(), Some(1));
    let metered = second.reference::<Metered>("h");
    metered.enqueue().hang().await.unwrap();
    assert_eq!(second.testing().drain().await.unwrap().turns, 1);
    assert_eq!(
        second.testing().drain().await.unwrap().turns,
        0,
        "the retry is not due"
    );

    let text = handle.render();
    assert_eq!(sample(&text, MESSAGES_ENQUEUED, "wait"), 1.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_COMPLETED, "wait"), 1.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_FAILED, "wait"), 0.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_ENQUEUED, "hang"), 1.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_FAILED, "hang"), 1.0, "{text}");
    assert!(!text.contains("actor_id"), "no actor id label: {text}");
    second.close().await;
    first.close().await;
}
