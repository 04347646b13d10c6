//! Adversarial review of the shutdown work (issue 10): `Runtime::shutdown_with_deadline`,
//! the idle workers' poll turn, and the metrics recorded around abandoned turns.
//!
//! Handlers wait on gates the test opens (never on the clock); the only real time is a
//! deadline that must pass, and bounds on how long something may take.

mod support;

use std::backtrace::Backtrace;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use solid_objects::prelude::*;
use solid_objects::{Clock, MessageStatus};
use support::{eventually, Harness};
use tokio::sync::Semaphore;

/// A short real deadline: the abandoned handlers never finish, so it always passes.
const SHORT_DEADLINE: Duration = Duration::from_millis(200);

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

fn builder(harness: &Harness) -> solid_objects::Builder {
    Runtime::builder()
        .sqlite(harness.path())
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .actor::<Grinder>()
        .workers(1)
}

fn run(runtime: &Runtime) -> tokio::task::JoinHandle<Result<(), Error>> {
    let runtime = runtime.clone();
    tokio::spawn(async move { runtime.run().await })
}

async fn within<T>(seconds: u64, what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(seconds), future).await {
        Ok(done) => done,
        Err(_) => panic!("{what} did not finish within {seconds} s"),
    }
}

// ---------------------------------------------------------------------------------------
// 1. A turn abandoned at the deadline while its handler is inside its own SQLite SQL
// ---------------------------------------------------------------------------------------

/// `shutdown_with_deadline`: "an abandoned turn rolls back and its message stays ready ...
/// so another process (or this one, restarted) runs it". A turn abandoned in its own query
/// on `turn.sqlite()` must free the writer: the next runtime on the file starts and writes
/// at once. (This held: `Turn`'s drop poisons the transaction, which interrupts the query.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_abandoned_inside_its_own_sqlite_query_frees_the_writer_for_the_next_runtime() {
    let harness = Harness::new();
    let first = builder(&harness)
        .turn_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    first
        .reference::<Grinder>("g")
        .enqueue()
        .grind("grind".to_owned())
        .await
        .unwrap();
    let workers = run(&first);
    entered("grind").acquire().await.unwrap().forget();

    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1, "{report:?}");
    within(10, "run", workers).await.unwrap().unwrap();

    let started = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(20), async {
        let second = builder(&harness)
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

// ---------------------------------------------------------------------------------------
// 2. A sync caller's turn in flight (not a worker's)
// ---------------------------------------------------------------------------------------

/// The documented way to stop: `shutdown_with_deadline(d)`, then `close()`. A synchronous
/// caller's turn in flight belongs to the caller's future, not to the runtime: the shutdown
/// still returns by its deadline, and `close()` (which on SQLite waits for the writer that
/// turn holds) returns at once when the caller drops its future, as the docs say to do.
/// (Found by review: `close()` waited for such a turn up to its turn timeout; the
/// behaviour stays, and is now documented on `shutdown_with_deadline`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_turn_in_flight_ends_with_its_future_and_then_close_returns() {
    let harness = Harness::new();
    let runtime = builder(&harness)
        .turn_timeout(Duration::from_secs(600))
        .sync_timeout(Duration::from_secs(600))
        .start()
        .await
        .unwrap();
    let workers = run(&runtime);
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
    let next = builder(&harness).start().await.unwrap();
    next.close().await;
}

// ---------------------------------------------------------------------------------------
// 3. Shutdown twice, concurrently with close, before run (these held)
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_before_run_twice_and_beside_close_all_return() {
    // Before run ever started: clean at once, and run then returns at once.
    let harness = Harness::new();
    let runtime = builder(&harness).start().await.unwrap();
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
    let runtime = builder(&harness).start().await.unwrap();
    ENTRIES.store(0, Ordering::Release);
    let message = runtime
        .reference::<Grinder>("twice")
        .enqueue()
        .wait("twice".to_owned())
        .await
        .unwrap();
    let workers = run(&runtime);
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
    let runtime = builder(&harness).start().await.unwrap();
    ENTRIES.store(0, Ordering::Release);
    runtime
        .reference::<Grinder>("close")
        .enqueue()
        .wait("close".to_owned())
        .await
        .unwrap();
    let workers = run(&runtime);
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

// ---------------------------------------------------------------------------------------
// 4. A wake-up lost between a worker's pass and its wait
// ---------------------------------------------------------------------------------------

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
    let harness = Harness::new();
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
    let runtime = Runtime::builder()
        .sqlite(harness.path())
        .clock(clock)
        .policy(AllowAll)
        .actor::<Grinder>()
        .workers(1)
        .idle_poll(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let workers = run(&runtime);
    within(30, "the worker's 6th idle pass", reached.notified()).await;

    // The worker's pass found nothing and it has not waited yet: a commit now.
    let message = runtime
        .reference::<Grinder>("late")
        .enqueue()
        .bump()
        .await
        .unwrap();
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
        .workers(4)
        .idle_poll(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let message = runtime
        .reference::<Grinder>("delayed")
        .enqueue()
        .delay(Duration::from_secs(60))
        .bump()
        .await
        .unwrap();
    let before = runtime.stats().transactions;
    let workers = run(&runtime);
    // Every idle pass commits its (empty) reminder pass: after eight, the workers have backed
    // off to the longest poll and take turns.
    let backed_off = eventually(Duration::from_secs(10), || async {
        runtime.stats().transactions >= before + 8
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

// ---------------------------------------------------------------------------------------
// 5. Metrics around abandoned and timed-out turns (these held)
// ---------------------------------------------------------------------------------------

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
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this binary");
    let harness = Harness::new();
    let with = |builder: solid_objects::Builder| builder.actor::<Metered>();
    let first = with(builder(&harness)).start().await.unwrap();
    let message = first
        .reference::<Metered>("m")
        .enqueue()
        .wait()
        .await
        .unwrap();
    let workers = run(&first);
    entered("metered").acquire().await.unwrap().forget();
    let report = first.shutdown_with_deadline(SHORT_DEADLINE).await;
    assert_eq!(report.abandoned_workers, 1);
    within(10, "run", workers).await.unwrap().unwrap();

    let text = handle.render();
    assert_eq!(sample(&text, MESSAGES_ENQUEUED, "wait"), 1.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_COMPLETED, "wait"), 0.0, "{text}");
    assert_eq!(sample(&text, MESSAGES_FAILED, "wait"), 0.0, "{text}");

    let second = with(builder(&harness))
        .turn_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    assert_eq!(second.testing().drain().await.unwrap().turns, 1);
    assert_eq!(message.typed::<u32>().result().await.unwrap(), Some(1));
    second
        .reference::<Metered>("h")
        .enqueue()
        .hang()
        .await
        .unwrap();
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
