//! Nothing wedges at the edges: values that serialise but do
//! not read back (NaN), a panicking `Default`, a handler stuck in its own SQL, databases
//! upgraded with delayed messages, callers whose deadline is shorter or longer than a turn,
//! NUL bytes in error texts, huge and expired effect leases, a commit whose answer is lost,
//! and a newer build's messages ahead of ready ones. Concurrency is forced with semaphores
//! and barriers, never with sleeps, and every wait is bounded so that a wedge fails instead
//! of hanging.
//!
//! What only PostgreSQL's store can show (sessions, deadlines and leases in the server) is in
//! tests/postgres/wedges.rs, with this file's actors.

use crate::support;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{EffectContext, MessageStatus};
use support::counter::Counter;
use support::effect_actors::{Charge, Till};
use support::fixtures::{started, started_on, started_on_system_time, started_with};
use support::operator::dead_letters;
use support::workers::{answered, run_workers, within};
use support::{count, eventually};

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// Counters by name, for handlers that report how often they ran.
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

pub(crate) fn ran(name: &str) -> usize {
    let mut runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
    let count = runs.entry(name.to_owned()).or_insert(0);
    *count += 1;
    *count
}

pub(crate) fn runs(name: &str) -> usize {
    RUNS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied()
        .unwrap_or(0)
}

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
    let (_harness, runtime) = started().await;
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
    let (harness, runtime, gauge) = started_on::<Gauge>("g").await;

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
    let (_harness, runtime, gauge) = started_on::<Gauge>("source").await;

    let at_the_door = runtime
        .reference::<Gauge>("target")
        .set_ratio(f64::NAN, 1.0)
        .await;
    let sent = gauge.forward("target".to_owned(), 0.0, 0.0).await;
    runtime.testing().drain().await.ok();
    let dead = dead_letters(&runtime).await;
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
    let (_harness, runtime) =
        started_with(|builder| builder.actor::<Brittle>().actor::<Counter>()).await;
    // Three actors whose Default panics, ahead of a healthy one (more than there are
    // workers, so a worker cannot skip them all as claimed by the other).
    let first_brittle = runtime.reference::<Brittle>("b1");
    let brittle = first_brittle.enqueue().poke().await.unwrap();
    for id in ["b2", "b3"] {
        runtime
            .reference::<Brittle>(id)
            .enqueue()
            .poke()
            .await
            .unwrap();
    }
    let counter = runtime.reference::<Counter>("c");
    let healthy = counter.enqueue().bump().await.unwrap();
    let run = run_workers(&runtime);

    let served = answered(&healthy, Duration::from_secs(10)).await;
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

/// Whether `use_brittle`, run as a task of its own on a reference to the brittle actor `b`
/// taken in that task, panics (its result, an error or not, is not looked at).
async fn panics_on_brittle<F>(
    runtime: &Runtime,
    use_brittle: impl FnOnce(BrittleRef) -> F + Send + 'static,
) -> bool
where
    F: Future + Send,
    F::Output: Send + 'static,
{
    let runtime = runtime.clone();
    tokio::spawn(async move { use_brittle(runtime.reference::<Brittle>("b")).await })
        .await
        .is_err()
}

/// The same panic reaches a caller as a panic, not as an error: `Panicked` is promised for
/// user code outside a handler.
#[tokio::test]
async fn a_panicking_default_reaches_callers_as_an_error_not_a_panic() {
    let (_harness, runtime) = started().await;
    let mut wrong = Vec::new();

    if panics_on_brittle(&runtime, |brittle| async move { brittle.poke().await }).await {
        wrong.push("a call panicked".to_owned());
    }
    if panics_on_brittle(&runtime, |brittle| async move { brittle.pokes().await }).await {
        wrong.push("a query panicked".to_owned());
    }
    if panics_on_brittle(&runtime, |brittle| async move { brittle.snapshot().await }).await {
        wrong.push("snapshot() panicked".to_owned());
    }
    runtime.close().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------
// 3. The turn timeout and a handler inside its own SQL (SQLite)
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// 4. A second process on the SQLite file
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// 5. Upgrading a database with delayed messages (migrations 0003)
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// 8. Effects and workers
// ---------------------------------------------------------------------------------------

/// An effect handler that never returns (a network call without a timeout). Effect
/// handlers have no timeout: the worker that runs it is stuck for good; when the lease runs
/// out the next worker claims the same effect and is stuck too. With every worker stuck, no
/// mailbox drains any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_effect_handler_does_not_wedge_every_worker() {
    let (_harness, runtime) = started_on_system_time(|builder| {
        builder
            .workers(Workers::new(2).effect_lease(Duration::from_millis(200)))
            .actor::<Counter>()
            .effect(|charge: Charge, _: EffectContext| async move {
                ran(&format!("charge:{}", charge.tag));
                std::future::pending::<()>().await;
                Ok::<(), Failure>(())
            })
    })
    .await;
    let till = runtime.reference::<Till>("t");
    till.ring_up("hung".to_owned()).await.unwrap();
    let run = run_workers(&runtime);
    let both_stuck = eventually(Duration::from_secs(15), || async {
        runs("charge:hung") >= 2
    })
    .await;

    let counter = runtime.reference::<Counter>("after");
    let queued = counter.enqueue().bump().await.unwrap();
    let served = answered(&queued, Duration::from_secs(10)).await;
    runtime.shutdown();
    run.abort();

    assert!(
        served,
        "a message enqueued after a hung effect never ran (the hung effect was begun {} \
         times, every worker stuck: {both_stuck})",
        runs("charge:hung")
    );
}

// ---------------------------------------------------------------------------------------
// 11. Fairness: messages of a newer build
// ---------------------------------------------------------------------------------------
