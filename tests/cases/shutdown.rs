//! Stopping within a deadline: `Runtime::shutdown_with_deadline` lets a turn in flight
//! finish and commit, and abandons one that outlasts the deadline (its transaction rolls
//! back, its message stays ready with no attempt counted, and a fresh runtime on the same
//! database runs it once), on every backend; `Runtime::run_until_signal` stops
//! on SIGTERM, lets its turn in flight commit and exits cleanly.
//!
//! Handlers wait on gates the test opens (never on the clock); the only real time is a
//! deadline that must pass. The SIGTERM test re-runs this test binary as a child process
//! that executes only `signalled_process` (which does nothing unless the parent set
//! `SHUTDOWN_CHILD_DATABASE`).

use crate::support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, MessageStatus, ShutdownReport};
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

/// An effect whose handler never ends the first time it runs.
#[derive(Serialize, Deserialize)]
struct Notify {
    gate: String,
}

impl Effect for Notify {
    const NAME: &'static str = "notify";
    type Output = ();
}

/// Emits a [`Notify`] effect.
#[actor]
#[derive(Default)]
struct Notifier {}

#[actor]
impl Notifier {
    #[command]
    fn notify(&mut self, turn: &mut Turn<Self>, gate: String) {
        turn.emit(Notify { gate });
    }
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

    async fn execute(&self, sql: &str) {
        support::execute(&self.harness, sql).await;
    }

    async fn marks(&self) -> i64 {
        support::count(&self.harness, "marks").await
    }
}

/// Starts `runtime`'s workers in a task of their own.
fn run(runtime: &Runtime) -> tokio::task::JoinHandle<Result<(), Error>> {
    let runtime = runtime.clone();
    tokio::spawn(async move { runtime.run().await })
}

async fn status(runtime: &Runtime, request_id: &str) -> MessageStatus {
    let message = runtime.message(request_id).await.unwrap().expect("kept");
    message.status().await.unwrap()
}

fn is_ready_unattempted(status: &MessageStatus) -> bool {
    matches!(status, MessageStatus::Ready { attempts: 0, .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_in_flight_finishes_within_the_deadline_commits_and_nothing_new_starts() {
    let backend = Database::new();
    backend
        .execute("CREATE TABLE marks (gate TEXT NOT NULL)")
        .await;
    let runtime = backend.runtime().await;
    let job = runtime.reference::<Job>("in-flight");
    let first = job.enqueue().work("in-flight").await.unwrap();
    let second = job.enqueue().work("in-flight").await.unwrap();
    let workers = run(&runtime);
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
    let second = status(&runtime, second.request_id()).await;
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
    let backend = Database::new();
    backend
        .execute("CREATE TABLE marks (gate TEXT NOT NULL)")
        .await;
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
    let queued = status(&fresh, request_id).await;
    assert!(is_ready_unattempted(&queued), "{queued:?}");
    assert_eq!(backend.marks().await, 0);
    fresh.close().await;
}

/// A turn whose handler never ends is abandoned at the deadline; then a fresh runtime on
/// the same database, while the first is still open, runs the message exactly once.
async fn abandoned_at_the_deadline(backend: Database, gate_name: &str) {
    backend
        .execute("CREATE TABLE marks (gate TEXT NOT NULL)")
        .await;
    let first = backend.runtime().await;
    let stuck = new_gate(gate_name, true);
    let job = first.reference::<Job>(gate_name);
    let message = job.enqueue().work(gate_name.to_owned()).await.unwrap();
    let workers = run(&first);
    stuck.entered().await;

    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1);
    assert_eq!(report.abandoned_effects, 0);
    assert!(!report.is_clean());
    workers.await.unwrap().unwrap();

    let second = backend.runtime().await;
    let after = status(&second, message.request_id()).await;
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
    abandoned_at_the_deadline(Database::new(), "abandoned").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_past_the_deadline_is_abandoned_and_runs_again_at_once() {
    let backend = Database::new();
    let effect_gate = new_gate("effect", true);
    let with_effect = |builder: solid_objects::Builder| {
        builder
            .actor::<Notifier>()
            .effect_lease(Duration::from_secs(60))
            .effect(|notify: Notify, _context| async move {
                gate(&notify.gate).pass().await;
                Ok::<(), Failure>(())
            })
    };
    let first = with_effect(backend.builder().await).start().await.unwrap();
    first
        .reference::<Notifier>("n")
        .notify("effect".to_owned())
        .await
        .unwrap();
    let workers = run(&first);
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
        .shutdown_deadline(Duration::from_secs(60))
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
    let backend = Database::new();
    let marker = backend.harness.dir().join("entered");
    let log = backend.harness.dir().join("child.log");
    backend
        .execute("CREATE TABLE marks (gate TEXT NOT NULL)")
        .await;
    let runtime = backend.runtime().await;
    let message = runtime
        .reference::<Job>("child")
        .enqueue()
        .work_until_shutdown()
        .await
        .unwrap();

    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &support::test_name(module_path!(), "signalled_process"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DATABASE, backend.harness.database().await)
        .env(CHILD_MARKER, &marker)
        .stdout(Stdio::null())
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
    let runtime = harness
        .store()
        .await
        .policy(AllowAll)
        .start()
        .await
        .unwrap();
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
