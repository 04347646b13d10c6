//! Nothing wedges at the edges: values that serialise but do
//! not read back (NaN), a panicking `Default`, a handler stuck in its own SQL, databases
//! upgraded with delayed messages, callers whose deadline is shorter or longer than a turn,
//! NUL bytes in error texts, huge and expired effect leases, a commit whose answer is lost,
//! and a newer build's messages ahead of ready ones. Concurrency is forced with semaphores
//! and barriers, never with sleeps, and every wait is bounded so that a wedge fails instead
//! of hanging.

use crate::support;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, EffectContext, MessageStatus};
use support::{count, eventually, Backend, Harness};
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// Waits for `work` at most `seconds`; a wedge fails the test.
async fn within<T>(seconds: u64, what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), work)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {seconds} s: wedged"))
}

/// A point where a handler waits until the test opens it; `entered` counts arrivals.
struct Gate {
    entered: Semaphore,
    open: Semaphore,
}

impl Gate {
    fn new() -> Self {
        Self {
            entered: Semaphore::new(0),
            open: Semaphore::new(0),
        }
    }

    /// In a handler: says it got here, then waits until the gate opens.
    async fn pass(&self) {
        self.entered.add_permits(1);
        // A closed semaphore is an open gate.
        let _ = self.open.acquire().await;
    }

    /// In the test: waits until `n` handlers reached the gate.
    async fn reached(&self, n: u32) {
        within(15, "a handler reaching its gate", async {
            self.entered.acquire_many(n).await.unwrap().forget();
        })
        .await;
    }

    fn open(&self) {
        self.open.close();
    }
}

/// Gates by name, shared by handlers and tests (tests of this file run in parallel, so each
/// uses its own names).
static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

fn gate(name: &str) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        gates
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Gate::new())),
    )
}

/// Counters by name, for handlers that report how often they ran.
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn ran(name: &str) -> usize {
    let mut runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
    let count = runs.entry(name.to_owned()).or_insert(0);
    *count += 1;
    *count
}

fn runs(name: &str) -> usize {
    RUNS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied()
        .unwrap_or(0)
}

/// A fresh database on the binary's PostgreSQL server, and its URL (keep the harness alive
/// while the test runs); `None` in the other backends' binaries, for a case about what only
/// PostgreSQL does.
async fn postgres() -> Option<(Harness, String)> {
    let harness = Harness::new();
    if harness.backend() != Backend::Postgres {
        return None;
    }
    let url = harness.url().await;
    Some((harness, url))
}

async fn postgres_runtime(url: &str, connections: u32, clock: &ManualClock) -> Runtime {
    Runtime::builder()
        .postgres(url, connections)
        .clock(clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .expect("the runtime starts on PostgreSQL")
}

/// Past any backoff of the default retry policy.
const PAST_BACKOFF: Duration = Duration::from_secs(3600);

// ---------------------------------------------------------------------------------------
// Actors
// ---------------------------------------------------------------------------------------

/// Keeps a ratio: plain `f64` arithmetic, the kind every application does.
#[actor]
#[derive(Default)]
struct Gauge {
    ratio: f64,
    samples: u32,
}

#[actor]
impl Gauge {
    #[command]
    fn set_ratio(&mut self, num: f64, den: f64) -> u32 {
        self.ratio = num / den;
        self.samples += 1;
        self.samples
    }

    #[command]
    fn average(&mut self, sum: f64, count: f64) -> f64 {
        self.samples += 1;
        sum / count
    }

    /// Tells another gauge to take the ratio `num / den` (computed here).
    #[command]
    fn forward(&mut self, turn: &mut Turn<Self>, target: String, num: f64, den: f64) {
        turn.send::<Gauge>(target).set_ratio(num / den, 1.0);
        self.samples += 1;
    }

    #[query]
    fn samples(&self) -> u32 {
        self.samples
    }
}

/// A plain counter.
#[actor]
#[derive(Default)]
struct Counter {
    n: u32,
}

#[actor]
impl Counter {
    #[command]
    fn bump(&mut self) -> u32 {
        self.n += 1;
        self.n
    }

    #[query]
    fn value(&self) -> u32 {
        self.n
    }
}

/// An actor whose `Default` (user code, like a `Serialize` impl) panics: it needs a
/// configuration that was never loaded.
#[actor(max_attempts = 2)]
struct Brittle {
    pokes: u32,
}

impl Default for Brittle {
    fn default() -> Self {
        panic!("Brittle::default: no configuration loaded")
    }
}

#[actor]
impl Brittle {
    #[command]
    fn poke(&mut self) -> u32 {
        self.pokes += 1;
        self.pokes
    }

    #[query]
    fn pokes(&self) -> u32 {
        self.pokes
    }
}

/// A handler that runs a slow query of its own on the turn's SQLite connection (a report, a
/// missing index): it outlives any reasonable turn timeout.
const SLOW_SQLITE_QUERY: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                                 WHERE x < 15000000) SELECT COUNT(*) FROM c";

#[actor]
#[derive(Default)]
struct Grinder {
    ground: i64,
}

#[actor]
impl Grinder {
    #[command]
    async fn grind(&mut self, turn: &mut Turn<Self>) -> Result<i64, TurnError> {
        let rows: i64 = sqlx::query_scalar(SLOW_SQLITE_QUERY)
            .fetch_one(turn.sqlite().await?)
            .await?;
        self.ground += rows;
        Ok(self.ground)
    }
}

/// Waits at its gate (named after the actor id) while holding its turn.
#[actor]
#[derive(Default)]
struct Sloth {
    touched: u32,
}

#[actor]
impl Sloth {
    #[command]
    async fn hold(&mut self, turn: &mut Turn<Self>) {
        let gate = gate(turn.actor_id());
        gate.pass().await;
    }

    #[command]
    fn touch(&mut self) -> u32 {
        self.touched += 1;
        self.touched
    }

    #[query]
    fn touched(&self) -> u32 {
        self.touched
    }
}

/// Fails for good with an error text that holds a NUL byte (the text of a parser's error on
/// binary input, say).
#[actor(max_attempts = 3)]
#[derive(Default)]
struct Mumbler {}

#[actor]
impl Mumbler {
    #[command]
    fn mumble(&mut self, turn: &mut Turn<Self>) -> Result<(), Failure> {
        ran(&format!("mumble:{}", turn.actor_id()));
        Err(Failure::permanent(
            "cannot parse input: unexpected byte \0 at 3",
        ))
    }
}

/// An effect: a charge at a payment provider.
#[derive(Serialize, Deserialize)]
struct Charge {
    tag: String,
}

impl Effect for Charge {
    const NAME: &'static str = "charge";
    type Output = ();
}

/// Emits charges.
#[actor]
#[derive(Default)]
struct Till {}

#[actor]
impl Till {
    #[command]
    fn ring_up(&mut self, turn: &mut Turn<Self>, tag: String) {
        turn.emit(Charge { tag });
    }
}

// ---------------------------------------------------------------------------------------
// 1. Values that cannot be read back
// ---------------------------------------------------------------------------------------

/// `0.0 / 0.0` in a state: serde_json writes NaN as `null`, which does not read back as an
/// `f64`. The promise: "a turn whose new state would not decode fails (counted) instead of
/// committing it"; the README: "a state or result that could not be read back becomes a dead
/// letter at once". The state is committed, and the actor is bricked for good.
async fn a_nan_state_is_never_committed(runtime: &Runtime) -> Vec<String> {
    let gauge = runtime.reference::<Gauge>("g");
    let mut wrong = Vec::new();
    gauge.set_ratio(1.0, 2.0).await.unwrap();

    let poisoned = gauge.set_ratio(0.0, 0.0).await;
    if poisoned.is_ok() {
        wrong.push(format!(
            "a turn whose new state (ratio NaN, stored as null) cannot be read back committed: {poisoned:?}"
        ));
    }
    if let Err(error) = gauge.snapshot().await {
        wrong.push(format!("snapshot() after it: {error}"));
    }
    if let Err(error) = gauge.set_ratio(3.0, 4.0).await {
        wrong.push(format!("the next call after it: {error}"));
    }
    if let Err(error) = gauge.samples().await {
        wrong.push(format!("a query after it: {error}"));
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_holding_nan_is_never_committed() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let wrong = a_nan_state_is_never_committed(&runtime).await;
    runtime.close().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A result of `0.0 / 0.0`: stored as `null`, it never reads back as the `f64` the caller
/// expects. README: "a state or result that could not be read back becomes a dead letter at
/// once". Instead the message is committed as completed (with the turn's state change) and
/// the caller gets a decode error for a turn that did happen.
#[tokio::test]
async fn a_nan_result_is_a_dead_letter_not_a_completed_turn() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let gauge = runtime.reference::<Gauge>("g");

    let result = gauge.average(0.0, 0.0).await;
    let completed = count(&harness, "solid_messages WHERE status = 'completed'").await;
    let samples = gauge.samples().await.unwrap();
    runtime.close().await;

    assert!(
        matches!(result, Err(Error::HandlerFailed { retry_at: None, .. })),
        "a result that cannot be read back: expected a dead letter, got {result:?} \
         ({completed} completed messages, the turn's state change kept: samples = {samples})"
    );
}

/// A turn that sends arguments the target cannot read back (NaN, stored as null). The same
/// arguments through a reference are refused at the door (`UnreadablePayload`); through
/// `turn.send` they are committed and the target's mailbox gets a message that can never
/// run ("Never commit what cannot be read back").
#[tokio::test]
async fn a_send_whose_arguments_cannot_be_read_back_is_never_committed() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let gauge = runtime.reference::<Gauge>("source");

    let at_the_door = runtime
        .reference::<Gauge>("target")
        .set_ratio(f64::NAN, 1.0)
        .await;
    let sent = gauge.forward("target".to_owned(), 0.0, 0.0).await;
    runtime.testing().drain().await.ok();
    let dead = runtime
        .admin()
        .dead_letters(
            &solid_objects::admin::DeadLetterFilter::new()
                .include_retried()
                .limit(10),
        )
        .await
        .unwrap();
    let target_dead: Vec<_> = dead
        .iter()
        .filter(|letter| letter.actor_id == "target")
        .map(|letter| &letter.error)
        .collect();
    runtime.close().await;

    assert!(
        matches!(at_the_door, Err(Error::UnreadablePayload { .. })),
        "{at_the_door:?}"
    );
    assert!(
        sent.is_err() && target_dead.is_empty(),
        "the sending turn committed arguments that cannot be read back: {sent:?}; the target \
         got {} dead letter(s): {target_dead:?}",
        target_dead.len(),
    );
}

// ---------------------------------------------------------------------------------------
// 2. A panicking Default (user code outside the handler)
// ---------------------------------------------------------------------------------------

/// `A::default()` is called without `catch_unwind` (engine/mailbox_step.rs decode_state). The
/// message of an actor without state kills the worker task on every pass before anything
/// is counted; the supervisor restarts it and it dies again on the same, oldest head, so
/// the mailboxes of every other actor behind it never drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_default_is_a_counted_attempt_and_does_not_wedge_the_workers() {
    let harness = Harness::new();
    let runtime = harness
        .store()
        .await
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .actor::<Brittle>()
        .actor::<Counter>()
        .start()
        .await
        .unwrap();
    // Three actors whose Default panics, ahead of a healthy one (more than there are
    // workers, so a worker cannot skip them all as claimed by the other).
    let brittle = runtime
        .reference::<Brittle>("b1")
        .enqueue()
        .poke()
        .await
        .unwrap();
    for id in ["b2", "b3"] {
        runtime
            .reference::<Brittle>(id)
            .enqueue()
            .poke()
            .await
            .unwrap();
    }
    let healthy = runtime
        .reference::<Counter>("c")
        .enqueue()
        .bump()
        .await
        .unwrap();
    let run = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let served = eventually(Duration::from_secs(10), || async {
        healthy.result().await.unwrap().is_some()
    })
    .await;
    // A worker pass runs several actors side by side: the healthy message may finish before
    // the brittle one's failure is recorded.
    eventually(Duration::from_secs(10), || async {
        !matches!(
            brittle.status().await.unwrap(),
            MessageStatus::Ready { attempts: 0, .. }
        )
    })
    .await;
    let brittle_status = brittle.status().await.unwrap();
    runtime.shutdown();
    let _ = within(10, "run() after shutdown", run).await;
    runtime.close().await;

    assert!(
        served,
        "a ready message of another actor never ran: the workers die on the panicking \
         Default; the brittle message is {brittle_status:?}"
    );
    assert!(
        !matches!(brittle_status, MessageStatus::Ready { attempts: 0, .. }),
        "the failure was never counted: {brittle_status:?}"
    );
}

/// The same panic reaches a caller as a panic, not as an error: `Panicked` is promised for
/// user code outside a handler.
#[tokio::test]
async fn a_panicking_default_reaches_callers_as_an_error_not_a_panic() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let mut wrong = Vec::new();

    let call = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.reference::<Brittle>("b").poke().await.map(|_| ()) }
    })
    .await;
    if call.is_err() {
        wrong.push("a call panicked".to_owned());
    }
    let query = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.reference::<Brittle>("b").pokes().await.map(|_| ()) }
    })
    .await;
    if query.is_err() {
        wrong.push("a query panicked".to_owned());
    }
    let snapshot = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .reference::<Brittle>("b")
                .snapshot()
                .await
                .map(|_| ())
        }
    })
    .await;
    if snapshot.is_err() {
        wrong.push("snapshot() panicked".to_owned());
    }
    runtime.close().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------
// 3. The turn timeout and a handler inside its own SQL (SQLite)
// ---------------------------------------------------------------------------------------

/// README: "A hung handler is abandoned after the turn timeout: its turn rolls back, its
/// connection is closed ... so one hung handler cannot hold the SQLite writer". A handler
/// busy in its own query on `turn.sqlite()` is abandoned as a future, but nothing
/// interrupts SQLite: the writer connection's thread keeps running the query inside
/// `BEGIN IMMEDIATE`, closing it waits behind the query, and every other actor's turn
/// finds the database locked until the query ends. The attempt is not even counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_stuck_in_its_own_sqlite_query_frees_the_writer_at_the_turn_timeout() {
    let harness = Harness::new();
    if !support::only_on(
        &harness,
        Backend::Sqlite,
        "the handler's query runs on turn.sqlite()",
    ) {
        return;
    }
    let runtime = harness
        .store()
        .await
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .turn_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let grinding = runtime
        .reference::<Grinder>("g")
        .enqueue()
        .grind()
        .await
        .unwrap();

    let started = Instant::now();
    let drained = within(30, "the drain", runtime.testing().drain()).await;
    let status = grinding.status().await.unwrap();
    let other = within(
        30,
        "a call to another actor",
        runtime
            .reference::<Counter>("other")
            .timeout(Duration::from_secs(3))
            .bump(),
    )
    .await;
    let elapsed = started.elapsed();

    assert!(
        matches!(other, Ok(1)),
        "another actor's call {elapsed:?} after a 300 ms turn timeout: {other:?} (the drain \
         said {drained:?}; the grinding message is {status:?})"
    );
    assert!(
        matches!(&status, MessageStatus::Ready { attempts: 1, last_error: Some(error), .. } if error.contains("turn timeout")),
        "the abandoned attempt was not counted: {status:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 4. A second process on the SQLite file
// ---------------------------------------------------------------------------------------

/// The promise: "A second process on the same SQLite file: the busy wait follows the caller's
/// deadline, and the caller gets SyncTimeout, never `database is locked`." An enqueue gets
/// `Error::Database(database is locked)` (engine/call.rs `enqueue` returns a busy error as
/// it is).
#[tokio::test]
async fn an_enqueue_while_another_process_writes_gets_a_typed_timeout_not_database_locked() {
    let harness = Harness::new();
    if !support::only_on(&harness, Backend::Sqlite, "the file lock is SQLite's") {
        return;
    }
    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("c");
    counter.bump().await.unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(harness.path());
    let outsider = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let holding = outsider.begin_with("BEGIN IMMEDIATE").await.unwrap();

    let enqueued = within(
        30,
        "the enqueue",
        counter
            .clone()
            .timeout(Duration::from_millis(500))
            .enqueue()
            .bump(),
    )
    .await
    .map(|_| ());
    holding.rollback().await.unwrap();
    outsider.close().await;
    runtime.close().await;

    assert!(
        !matches!(enqueued, Err(Error::Database(_))),
        "a caller got a database error: {enqueued:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Upgrading a database with delayed messages (migrations 0003)
// ---------------------------------------------------------------------------------------

/// What a database written by the previous build holds: the first two migrations, and one
/// message enqueued with `delay(1 h)` for Counter "c" (as that build's `enqueue` stored it:
/// `available_at` = the requested time, the instance's `next_sequence` and `unfinished`
/// counted).
fn previous_build_rows(now: i64, later: i64) -> String {
    format!(
        "INSERT INTO solid_instances (actor_type, actor_id, state, revision, next_sequence,
             unfinished, updated_at)
         VALUES ('Counter', 'c', NULL, 0, 2, 1, {now});
         INSERT INTO solid_messages (actor_type, actor_id, sequence, operation, arguments,
             request_id, idempotency_key, status, attempts, available_at, result, last_error,
             created_at, finished_at)
         VALUES ('Counter', 'c', 1, 'bump', '{{}}', 'delayed-request', NULL, 'ready', 0, {later},
             NULL, NULL, {now}, NULL);"
    )
}

/// Migration 0003 sets `available_at = 0` on every ready message without attempts, to make
/// undelayed messages immune to a clock that steps back; it also releases every message a
/// client enqueued with a delay, which runs at once after the upgrade.
#[tokio::test]
async fn upgrading_a_sqlite_database_keeps_delayed_messages_waiting() {
    let harness = Harness::new();
    if !support::only_on(
        &harness,
        Backend::Sqlite,
        "the previous build's schema is SQLite's",
    ) {
        return;
    }
    let now = harness.clock.now().timestamp_micros();
    let later = now + 3_600_000_000;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(harness.path())
        .create_if_missing(true);
    let old = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE solid_schema_migrations (
             version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)",
    )
    .execute(&old)
    .await
    .unwrap();
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_actors.sql"))
        .execute(&old)
        .await
        .unwrap();
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0002_effects.sql"))
        .execute(&old)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO solid_schema_migrations VALUES (1, 'actors', datetime('now'));
         INSERT INTO solid_schema_migrations VALUES (2, 'effects', datetime('now'));
         {}",
        previous_build_rows(now, later)
    ))
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("c");
    // The control: a message this build enqueues with a delay waits.
    let control = runtime.reference::<Counter>("control");
    control
        .enqueue()
        .delay(Duration::from_secs(3600))
        .bump()
        .await
        .unwrap();
    let ran = runtime.testing().drain().await;
    let value = counter.snapshot().await.unwrap().n;
    assert_eq!(control.snapshot().await.unwrap().n, 0, "the control ran");
    let delayed = runtime.message("delayed-request").await.unwrap().unwrap();
    let status = delayed.status().await.unwrap();
    runtime.close().await;

    assert_eq!(
        value, 0,
        "a message delayed by an hour ran right after the upgrade (drain: {ran:?}; it is \
         {status:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_a_postgres_database_keeps_delayed_messages_waiting() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let now = clock.now().timestamp_micros();
    let later = now + 3_600_000_000;
    let old = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE solid_schema_migrations (
             version BIGINT PRIMARY KEY, description TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&old)
    .await
    .unwrap();
    sqlx::raw_sql(include_str!("../../migrations/postgres/0001_actors.sql"))
        .execute(&old)
        .await
        .unwrap();
    sqlx::raw_sql(include_str!("../../migrations/postgres/0002_effects.sql"))
        .execute(&old)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO solid_schema_migrations (version, description) VALUES (1, 'actors');
         INSERT INTO solid_schema_migrations (version, description) VALUES (2, 'effects');
         {}",
        previous_build_rows(now, later)
    ))
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let runtime = postgres_runtime(&url, 4, &clock).await;
    let counter = runtime.reference::<Counter>("c");
    // The control: a message this build enqueues with a delay waits.
    let control = runtime.reference::<Counter>("control");
    control
        .enqueue()
        .delay(Duration::from_secs(3600))
        .bump()
        .await
        .unwrap();
    let ran = runtime.testing().drain().await;
    let value = counter.snapshot().await.unwrap().n;
    assert_eq!(control.snapshot().await.unwrap().n, 0, "the control ran");
    let delayed = runtime.message("delayed-request").await.unwrap().unwrap();
    let status = delayed.status().await.unwrap();
    runtime.close().await;

    assert_eq!(
        value, 0,
        "a message delayed by an hour ran right after the upgrade (drain: {ran:?}; it is \
         {status:?})"
    );
}

// ---------------------------------------------------------------------------------------
// 6. PostgreSQL: callers' deadlines
// ---------------------------------------------------------------------------------------

/// A caller whose timeout is longer than the turn timeout waits for an actor that a turn of
/// another process holds. The wait is bounded by `lock_timeout` from the caller's deadline,
/// but `statement_timeout` (the turn timeout, set with BEGIN) cuts the same statement short
/// first: `57014 canceling statement due to statement timeout` reaches the caller as
/// `Error::Database`, long before its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_waiting_longer_than_the_turn_timeout_never_gets_a_database_error() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    // A batch process with a generous turn timeout holds the actor in a slow turn.
    let batch = Runtime::builder()
        .postgres(&url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .turn_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    // A web process with a short turn timeout and a patient caller.
    let web = Runtime::builder()
        .postgres(&url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .turn_timeout(Duration::from_millis(500))
        .start()
        .await
        .unwrap();
    // The actor exists (its row is there); a turn of the batch process holds it.
    batch.reference::<Sloth>("lock-wait").touch().await.unwrap();
    let gate = gate("lock-wait");
    let holding = tokio::spawn({
        let slow = batch
            .reference::<Sloth>("lock-wait")
            .timeout(Duration::from_secs(60));
        async move { slow.hold().await }
    });
    gate.reached(1).await;

    let started = Instant::now();
    let waited = within(
        30,
        "the patient caller",
        web.reference::<Sloth>("lock-wait")
            .timeout(Duration::from_secs(3))
            .touch(),
    )
    .await;
    let elapsed = started.elapsed();
    gate.open();
    let held = within(30, "the slow turn", holding).await.unwrap();
    web.close().await;
    batch.close().await;

    held.unwrap();
    assert!(
        matches!(waited, Err(Error::SyncTimeout { .. }) | Ok(_)),
        "a caller with a 3 s timeout got, after {elapsed:?}: {waited:?}"
    );
}

/// A query (and `MessageRef::wait`) read through the pool with no bound: with every
/// connection held by slow turns, a query with a 300 ms timeout waits for a connection for
/// as long as the turns last (the pool's acquire timeout is an hour), not until its
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_query_gives_up_at_its_deadline_when_every_connection_is_busy() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let runtime = postgres_runtime(&url, 2, &ManualClock::starting_now()).await;
    let queued = runtime
        .reference::<Counter>("idle")
        .enqueue()
        .bump()
        .await
        .unwrap();
    let mut holders = Vec::new();
    for id in ["pool-a", "pool-b"] {
        let slow = runtime
            .reference::<Sloth>(id)
            .timeout(Duration::from_secs(60));
        holders.push(tokio::spawn(async move { slow.hold().await }));
    }
    gate("pool-a").reached(1).await;
    gate("pool-b").reached(1).await;

    let started = Instant::now();
    let query = tokio::time::timeout(
        Duration::from_secs(5),
        runtime
            .reference::<Counter>("idle")
            .timeout(Duration::from_millis(300))
            .value(),
    )
    .await;
    let query_took = started.elapsed();
    let started = Instant::now();
    let wait = tokio::time::timeout(
        Duration::from_secs(5),
        queued.wait(Duration::from_millis(300)),
    )
    .await;
    let wait_took = started.elapsed();
    gate("pool-a").open();
    gate("pool-b").open();
    for holder in holders {
        within(30, "a slow turn", holder).await.unwrap().unwrap();
    }
    runtime.close().await;

    let mut wrong = Vec::new();
    if query.is_err() {
        wrong.push(format!(
            "a query with a 300 ms timeout was still waiting after {query_took:?}"
        ));
    }
    if wait.is_err() {
        wrong.push(format!(
            "MessageRef::wait(300 ms) was still waiting after {wait_took:?}"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------
// 7. PostgreSQL: failure texts the database refuses
// ---------------------------------------------------------------------------------------

/// A handler fails for good with an error text that holds a NUL byte. PostgreSQL refuses
/// the text, the write of the dead letter fails, and the engine counts a *retryable*
/// failure instead: a `Failure::permanent` is run `max_attempts` times, and a sync caller
/// is told it will be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_whose_text_holds_a_nul_byte_is_dead_at_once_on_postgres() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&url, 4, &clock).await;
    let mut wrong = Vec::new();

    let queued = runtime
        .reference::<Mumbler>("queued")
        .enqueue()
        .mumble()
        .await
        .unwrap();
    for _ in 0..4 {
        within(30, "a drain", runtime.testing().drain()).await.ok();
        clock.advance(PAST_BACKOFF);
    }
    let status = queued.status().await.unwrap();
    if runs("mumble:queued") != 1 || !matches!(status, MessageStatus::Dead { attempts: 1, .. }) {
        wrong.push(format!(
            "an enqueued permanent failure ran {} times and is {status:?}",
            runs("mumble:queued")
        ));
    }

    let called = runtime.reference::<Mumbler>("called").mumble().await;
    if !matches!(called, Err(Error::HandlerFailed { retry_at: None, .. })) {
        wrong.push(format!("a called permanent failure: {called:?}"));
    }
    runtime.close().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// An effect handler fails for good with an error text that holds a NUL byte: recording
/// the failure fails, `run_effects` (and every worker pass) returns `Error::Database`, and
/// the effect stays `running` under its lease, to be run again when it runs out, forever:
/// never dead, never counted against its attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_failure_whose_text_holds_a_nul_byte_is_recorded_on_postgres() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let runtime = Runtime::builder()
        .postgres(&url, 4)
        .clock(ManualClock::starting_now())
        .policy(AllowAll)
        .effect(|charge: Charge, _: EffectContext| async move {
            ran(&format!("charge:{}", charge.tag));
            Err(Failure::permanent(
                "the provider answered: card \0 declined",
            ))
        })
        .start()
        .await
        .unwrap();
    runtime
        .reference::<Till>("t")
        .ring_up("nul".to_owned())
        .await
        .unwrap();

    let ran = within(30, "run_effects", runtime.testing().run_effects()).await;
    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    runtime.close().await;

    assert!(
        matches!(ran, Ok(1)) && dead.len() == 1,
        "run_effects: {ran:?}; dead effects: {}",
        dead.len()
    );
}

/// `effect_lease(Duration::MAX)` (an application that never wants a running effect taken
/// over): the lease is added to the server's clock in SQL and overflows `bigint`, so every
/// claim fails with `Error::Database` and no effect ever runs. The promise: caller-supplied
/// durations "saturate or are refused with a typed error".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_effect_lease_saturates_on_postgres() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let runtime = Runtime::builder()
        .postgres(&url, 4)
        .clock(ManualClock::starting_now())
        .policy(AllowAll)
        .effect_lease(Duration::MAX)
        .effect(|charge: Charge, _: EffectContext| async move {
            ran(&format!("charge:{}", charge.tag));
            Ok::<(), Failure>(())
        })
        .start()
        .await
        .unwrap();
    runtime
        .reference::<Till>("t")
        .ring_up("lease".to_owned())
        .await
        .unwrap();

    let ran = within(30, "run_effects", runtime.testing().run_effects()).await;
    runtime.close().await;

    assert!(
        matches!(ran, Ok(1)) && runs("charge:lease") == 1,
        "run_effects: {ran:?}; the handler ran {} times",
        runs("charge:lease")
    );
}

// ---------------------------------------------------------------------------------------
// 8. Effects and workers
// ---------------------------------------------------------------------------------------

/// An effect handler that never returns (a network call without a timeout). Effect
/// handlers have no timeout: the worker that runs it is stuck for good; when the lease runs
/// out the next worker claims the same effect and is stuck too. With every worker stuck, no
/// mailbox drains any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_effect_handler_does_not_wedge_every_worker() {
    let harness = Harness::new();
    let runtime = harness
        .store()
        .await
        .policy(AllowAll)
        .workers(2)
        .effect_lease(Duration::from_millis(200))
        .actor::<Counter>()
        .effect(|charge: Charge, _: EffectContext| async move {
            ran(&format!("charge:{}", charge.tag));
            std::future::pending::<()>().await;
            Ok::<(), Failure>(())
        })
        .start()
        .await
        .unwrap();
    runtime
        .reference::<Till>("t")
        .ring_up("hung".to_owned())
        .await
        .unwrap();
    let run = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });
    let both_stuck = eventually(Duration::from_secs(15), || async {
        runs("charge:hung") >= 2
    })
    .await;

    let queued = runtime
        .reference::<Counter>("after")
        .enqueue()
        .bump()
        .await
        .unwrap();
    let served = eventually(Duration::from_secs(10), || async {
        queued.result().await.unwrap().is_some()
    })
    .await;
    runtime.shutdown();
    run.abort();

    assert!(
        served,
        "a message enqueued after a hung effect never ran (the hung effect was begun {} \
         times, every worker stuck: {both_stuck})",
        runs("charge:hung")
    );
}

/// Finishing an effect checks the lease by its attempt count, which an operator's retry
/// resets to 0: a stale runner from before the effect died holds the same "token" as the
/// runner of the retry, and its verdict overwrites the effect the retry is running. Here
/// the stale runner's permanent failure makes the effect dead, and the retry's success is
/// discarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_effect_runner_cannot_overwrite_a_retried_effect() {
    static INVOCATIONS: AtomicUsize = AtomicUsize::new(0);
    let harness = Harness::new();
    if !support::only_on(
        &harness,
        Backend::Sqlite,
        "leases run on the manual clock only on SQLite; a server's on its own clock",
    ) {
        return;
    }
    let start = || async {
        harness
            .store()
            .await
            .clock(harness.clock.clone())
            .policy(AllowAll)
            .effect(|_: Charge, _: EffectContext| async move {
                match INVOCATIONS.fetch_add(1, Ordering::SeqCst) {
                    0 => {
                        gate("stale-first").pass().await;
                        Err(Failure::permanent("the stale runner's verdict"))
                    }
                    1 => Err(Failure::permanent("the provider was down")),
                    _ => {
                        gate("stale-retry").pass().await;
                        Ok(())
                    }
                }
            })
            .start()
            .await
    };
    let first = start().await.unwrap();
    let second = start().await.unwrap();
    first
        .reference::<Till>("t")
        .ring_up("x".to_owned())
        .await
        .unwrap();

    // The first runner claims the effect and stalls past its lease.
    let stale = tokio::spawn({
        let first = first.clone();
        async move { first.testing().run_effects().await }
    });
    gate("stale-first").reached(1).await;
    harness.advance_minutes(6);
    // The second runner takes it over; it fails for good; an operator retries it.
    within(30, "the second runner", second.testing().run_effects())
        .await
        .unwrap();
    let dead = second
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "the effect died");
    assert!(second.admin().retry_effect(dead[0].id).await.unwrap());
    let retry = tokio::spawn({
        let second = second.clone();
        async move { second.testing().run_effects().await }
    });
    gate("stale-retry").reached(1).await;

    // The stale runner finishes while the retry runs, then the retry succeeds.
    gate("stale-first").open();
    within(30, "the stale runner", stale).await.unwrap().ok();
    gate("stale-retry").open();
    within(30, "the retry", retry).await.unwrap().ok();

    let dead = first
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    let done = count(&harness, "solid_effects WHERE status = 'done'").await;
    first.close().await;
    second.close().await;
    assert!(
        dead.is_empty() && done == 1,
        "the retried effect succeeded, but a stale runner's verdict was kept: dead {:?}, done {done}",
        dead.iter().map(|effect| effect.last_error.as_deref().unwrap_or_default()).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------
// 9. PostgreSQL: a commit whose answer is lost
// ---------------------------------------------------------------------------------------

/// A TCP proxy in front of the PostgreSQL server that, when armed, lets the next `COMMIT`
/// through to the server, waits for the server to finish it, and then cuts the client's
/// connection instead of passing the answer on: a network failure (a load balancer, a
/// pooler restart) between a commit and its acknowledgement.
struct CommitCutter {
    armed: std::sync::atomic::AtomicBool,
    cuts: AtomicUsize,
}

/// Reads one message: a type byte (unless `typed` is false) and a length-prefixed body.
async fn read_message(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    typed: bool,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut message = Vec::new();
    if typed {
        message.push(reader.read_u8().await?);
    }
    let length = reader.read_u32().await?;
    message.extend_from_slice(&length.to_be_bytes());
    let mut body = vec![0; (length as usize).saturating_sub(4)];
    reader.read_exact(&mut body).await?;
    message.extend_from_slice(&body);
    Ok(message)
}

async fn commit_cutting_proxy(upstream: u16) -> (u16, Arc<CommitCutter>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let cutter = Arc::new(CommitCutter {
        armed: std::sync::atomic::AtomicBool::new(false),
        cuts: AtomicUsize::new(0),
    });
    let shared = Arc::clone(&cutter);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                .await
                .unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let cutting = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let cutter = Arc::clone(&shared);
            let cut_here = Arc::clone(&cutting);
            tokio::spawn(async move {
                let mut typed = false;
                while let Ok(message) = read_message(&mut client_read, typed).await {
                    if typed
                        && message[0] == b'Q'
                        && message[5..].starts_with(b"COMMIT")
                        && cutter.armed.swap(false, Ordering::SeqCst)
                    {
                        cut_here.store(true, Ordering::SeqCst);
                        cutter.cuts.fetch_add(1, Ordering::SeqCst);
                    }
                    typed = true;
                    if server_write.write_all(&message).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                while let Ok(message) = read_message(&mut server_read, true).await {
                    if cutting.load(Ordering::SeqCst) {
                        // The server answered the COMMIT: it is done. The client never hears.
                        if message[0] == b'Z' {
                            break;
                        }
                        continue;
                    }
                    if client_write.write_all(&message).await.is_err() {
                        break;
                    }
                }
                let _ = client_write.shutdown().await;
            });
        }
    });
    (port, cutter)
}

/// A synchronous call on an empty mailbox commits its turn, but the acknowledgement of the
/// COMMIT is lost. The engine takes the error for a failure outside the handler and, on the
/// fresh-call path, records it as a *new* message with one failed attempt
/// (`record_fresh_failure`), which a worker then runs again: the turn is applied twice. (A
/// stored message is safe: its failure is recorded only if it is still ready.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_whose_acknowledgement_is_lost_never_runs_the_turn_twice() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let (prefix, rest) = url.rsplit_once(':').unwrap();
    let (upstream, database) = rest.split_once('/').unwrap();
    let (port, cutter) = commit_cutting_proxy(upstream.parse().unwrap()).await;
    let proxied = format!("{prefix}:{port}/{database}?sslmode=disable");
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&proxied, 4, &clock).await;
    let counter = runtime.reference::<Counter>("c");
    assert_eq!(counter.bump().await.unwrap(), 1);

    cutter.armed.store(true, Ordering::SeqCst);
    let cut = within(30, "the cut call", counter.bump()).await;
    assert_eq!(cutter.cuts.load(Ordering::SeqCst), 1, "the commit was cut");
    for _ in 0..3 {
        clock.advance(PAST_BACKOFF);
        within(30, "a drain", runtime.testing().drain()).await.ok();
    }
    let value = within(30, "a query", counter.value()).await;
    let messages: Vec<(String, i64)> = {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let rows = sqlx::query_as(
            "SELECT status, attempts FROM solid_messages WHERE actor_id = 'c' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows
    };
    runtime.close().await;

    assert!(
        matches!(value, Ok(2)),
        "two bumps, of which one lost its commit acknowledgement (the caller got {cut:?}), \
         left the counter at {value:?}; the messages: {messages:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 10. PostgreSQL: callers that give up on a handler waiting in its own SQL
// ---------------------------------------------------------------------------------------

/// Takes a row of the application's own table in the turn's transaction.
#[actor]
#[derive(Default)]
struct Grabber {
    grabbed: u32,
}

#[actor]
impl Grabber {
    #[command]
    async fn grab(&mut self, turn: &mut Turn<Self>) -> Result<u32, TurnError> {
        sqlx::query("SELECT id FROM r7_app WHERE id = 1 FOR UPDATE")
            .execute(turn.postgres().await?)
            .await?;
        self.grabbed += 1;
        Ok(self.grabbed)
    }
}

/// The promise: "A caller that gives up ... must leave no connection stuck behind that lock:
/// bound the wait in the server ..., not by dropping a future mid-query." A handler's own
/// SQL waits for an application lock; its caller gives up at its deadline (shorter than the
/// turn timeout), and the engine abandons the turn by dropping its future mid-query and
/// closing the connection. The pool forgets the connection at once, but the server session
/// keeps waiting behind the lock (holding the actor's row lock) until `statement_timeout`
/// (the 30 s turn timeout), so the server holds many more sessions than the pool's 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_that_give_up_leave_no_session_waiting_in_the_server() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let observer = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE r7_app (id BIGINT PRIMARY KEY); INSERT INTO r7_app VALUES (1)")
        .execute(&observer)
        .await
        .unwrap();
    let runtime = postgres_runtime(&url, 4, &ManualClock::starting_now()).await;
    // Another part of the application holds the row for a while.
    let mut holder = observer.begin().await.unwrap();
    sqlx::query("SELECT id FROM r7_app WHERE id = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();

    let mut results = Vec::new();
    for wave in 0..3 {
        let barrier = Arc::new(tokio::sync::Barrier::new(4));
        let mut calls = Vec::new();
        for n in 0..4 {
            let grabber = runtime
                .reference::<Grabber>(format!("g{}", wave * 4 + n))
                .timeout(Duration::from_millis(500));
            let barrier = Arc::clone(&barrier);
            calls.push(tokio::spawn(async move {
                barrier.wait().await;
                grabber.grab().await
            }));
        }
        for call in calls {
            results.push(within(30, "a call", call).await.unwrap());
        }
    }
    let waiting = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&observer)
        .await
        .unwrap()
    };
    let cleared = eventually(Duration::from_secs(3), || async { waiting().await <= 0 }).await;
    let still_waiting = waiting().await;
    holder.rollback().await.unwrap();
    runtime.close().await;
    observer.close().await;

    let gave_up = results
        .iter()
        .filter(|result| matches!(result, Err(Error::SyncTimeout { .. })))
        .count();
    assert!(
        cleared,
        "{gave_up} of 12 callers gave up (SyncTimeout), yet {still_waiting} server sessions \
         (the pool has 4 connections) still wait behind the application's lock 3 s later"
    );
}

// ---------------------------------------------------------------------------------------
// 11. Fairness: messages of a newer build
// ---------------------------------------------------------------------------------------

/// A rolling deploy: a newer build enqueued a new operation for every user (10,150 actors
/// of a type this build knows), and then a ready message arrives for another actor. This
/// build leaves each unknown operation alone, but only after claiming it, and the claim
/// query takes `100 + stalled` heads, oldest first, with the stalled set capped at 10,000
/// entries: once it is full, every pass spends itself on the same unknown heads past the
/// cap, and the ready message behind them is never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_builds_broadcast_never_starves_a_ready_message() {
    let harness = Harness::new();
    if !support::only_on(
        &harness,
        Backend::Sqlite,
        "the outside writer opens the SQLite file",
    ) {
        return;
    }
    let runtime = harness
        .store()
        .await
        .durability(solid_objects::Durability::Normal)
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .actor::<Counter>()
        .start()
        .await
        .unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(harness.path());
    let outside = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::raw_sql(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10150)
         INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
             status, attempts, available_at, created_at)
         SELECT 'Counter', 'user-' || i, 'greet_in_the_new_way', '{}', 'broadcast-' || i,
             'ready', 0, 0, 0 FROM n",
    )
    .execute(&outside)
    .await
    .unwrap();
    let ready = runtime
        .reference::<Counter>("ready")
        .enqueue()
        .bump()
        .await
        .unwrap();
    let run = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let noted = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM solid_messages WHERE last_error LIKE 'waits for a build%'",
        )
        .fetch_one(&outside)
        .await
        .unwrap()
    };
    // Wait until the workers have looked at 10,000 unknown heads (each says why it waits),
    // filling their stalled set; the ready message would have run long before if the
    // workers ever reached it.
    let capped = eventually(Duration::from_secs(400), || async {
        noted().await >= 10_000 || ready.result().await.unwrap().is_some()
    })
    .await;
    let served = eventually(Duration::from_secs(10), || async {
        ready.result().await.unwrap().is_some()
    })
    .await;
    let noted = noted().await;
    runtime.shutdown();
    run.abort();
    outside.close().await;

    assert!(
        served,
        "the ready message never ran, while the workers noted {noted} unknown heads (the \
         stalled set filled: {capped})"
    );
}
