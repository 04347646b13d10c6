//! Effects: emitted in the turn's transaction, run after it commits, at least once, with a
//! stable id for the outside service's idempotency.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{Effect, EffectContext, RetryPolicy};
use support::effect_actors::{Charge, Till};
use support::fixtures::{sqlite_harness, started_with};
use support::operator::{dead_effects, last_error};
use support::workers::run_workers;
use support::{count, eventually, execute, rejection_code, Backend, Harness};

/// Charge a card for a hold.
#[derive(Serialize, Deserialize)]
struct ChargeCard {
    hold_id: String,
    cents: i64,
}

impl Effect for ChargeCard {
    const NAME: &'static str = "charge_card";
    type Output = ();
}

/// Holds that become paid once the payment provider charged them.
#[actor]
#[derive(Default)]
struct Checkout {
    held: BTreeMap<String, i64>,
    paid: BTreeSet<String>,
}

#[actor]
impl Checkout {
    /// Holds and stages the payment: the charge happens after this turn commits.
    #[command]
    fn hold(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
        cents: i64,
    ) -> Result<(), Rejection> {
        if cents <= 0 {
            return Err(reject!(invalid_amount, "Charge at least one cent"));
        }
        self.held.insert(hold_id.clone(), cents);
        turn.emit(ChargeCard { hold_id, cents });
        Ok(())
    }

    /// The provider charged the hold.
    #[command]
    fn paid(&mut self, hold_id: String) {
        if self.held.remove(&hold_id).is_some() {
            self.paid.insert(hold_id);
        }
    }
}

/// A payment provider that deduplicates by idempotency key and can be told to fail.
#[derive(Default)]
struct Provider {
    charges: Mutex<HashMap<String, i64>>,
    calls: Mutex<Vec<String>>,
    failures_left: AtomicU32,
    permanent: AtomicU32,
}

impl Provider {
    fn charge(&self, key: &str, cents: i64) -> Result<(), Failure> {
        self.calls.lock().unwrap().push(key.to_owned());
        if self.permanent.load(Ordering::SeqCst) > 0 {
            return Err(Failure::permanent("the card is blocked"));
        }
        if self.failures_left.load(Ordering::SeqCst) > 0 {
            self.failures_left.fetch_sub(1, Ordering::SeqCst);
            return Err(Failure::retryable("the provider timed out"));
        }
        self.charges
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_insert(cents);
        Ok(())
    }
}

async fn start(harness: &Harness, provider: &Arc<Provider>) -> Runtime {
    let provider = Arc::clone(provider);
    harness
        .builder()
        .await
        .effect(move |charge: ChargeCard, context: EffectContext| {
            let provider = Arc::clone(&provider);
            async move {
                provider.charge(context.id(), charge.cents)?;
                context
                    .runtime()
                    .reference::<Checkout>(context.actor_id())
                    .paid(charge.hold_id)
                    .await?;
                Ok(())
            }
        })
        .start()
        .await
        .unwrap()
}

/// A fresh harness, a runtime on it whose charges go to a provider of their own (see
/// [`start`]), and that provider.
async fn started_with_provider() -> (Harness, Runtime, Arc<Provider>) {
    let harness = Harness::new();
    let provider = Arc::new(Provider::default());
    let runtime = start(&harness, &provider).await;
    (harness, runtime, provider)
}

/// Checkout "c-1" of `runtime` holds "h-1" for 300 cents, and stages its charge.
async fn hold_300_cents(runtime: &Runtime) {
    let checkout = runtime.reference::<Checkout>("c-1");
    checkout.hold("h-1", 300).await.unwrap();
}

#[tokio::test]
async fn an_effect_runs_after_its_turn_commits_and_reports_back() {
    let (harness, runtime, provider) = started_with_provider().await;
    let checkout = runtime.reference::<Checkout>("c-1");

    checkout.hold("h-1", 500).await.unwrap();
    assert!(
        provider.calls.lock().unwrap().is_empty(),
        "nothing runs inside the turn"
    );
    assert_eq!(
        count(&harness, "solid_effects WHERE status = 'ready'").await,
        1
    );

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let charges = provider.charges.lock().unwrap().clone();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges.values().copied().collect::<Vec<_>>(), [500]);
    let state = checkout.snapshot().await.unwrap();
    assert!(state.paid.contains("h-1") && state.held.is_empty());
    assert_eq!(
        count(&harness, "solid_effects WHERE status = 'done'").await,
        1
    );
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    runtime.close().await;
}

#[tokio::test]
async fn a_rejected_turn_emits_nothing() {
    let (harness, runtime, _provider) = started_with_provider().await;

    let result = runtime.reference::<Checkout>("c-1").hold("h-1", 0).await;

    assert_eq!(rejection_code(result), "invalid_amount");
    assert_eq!(count(&harness, "solid_effects").await, 0);
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    runtime.close().await;
}

#[tokio::test]
async fn a_failed_attempt_is_retried_with_backoff_under_the_same_id() {
    let (harness, runtime, provider) = started_with_provider().await;
    provider.failures_left.store(1, Ordering::SeqCst);
    let checkout = runtime.reference::<Checkout>("c-1");
    checkout.hold("h-1", 700).await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    assert!(provider.charges.lock().unwrap().is_empty());
    assert!(checkout.snapshot().await.unwrap().paid.is_empty());
    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'ready' AND attempts = 1"
        )
        .await,
        1
    );
    assert_eq!(
        runtime.testing().run_effects().await.unwrap(),
        0,
        "it waits for its backoff"
    );

    harness.clock.advance(Duration::from_secs(1));
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let calls = provider.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0], calls[1],
        "both attempts carry one idempotency key"
    );
    assert_eq!(provider.charges.lock().unwrap().len(), 1);
    assert!(checkout.snapshot().await.unwrap().paid.contains("h-1"));
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_whose_worker_died_runs_again_when_its_lease_runs_out() {
    // On a server leases run on the server's clock, which the manual clock does not move:
    // the MariaDB reliability cases have effect_lease_uses_the_database_clock.
    let Some(harness) = sqlite_harness("leases run on the server's clock") else {
        return;
    };
    let provider = Arc::new(Provider::default());
    let runtime = start(&harness, &provider).await;
    hold_300_cents(&runtime).await;
    let leased_until = harness.clock.now() + chrono::TimeDelta::minutes(5);
    execute(
        &harness,
        &format!(
            "UPDATE solid_effects SET status = 'running', attempts = 1, available_at = {}",
            leased_until.timestamp_micros()
        ),
    )
    .await;

    assert_eq!(
        runtime.testing().run_effects().await.unwrap(),
        0,
        "the lease holds"
    );
    harness.advance_minutes(5);
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);

    assert_eq!(provider.charges.lock().unwrap().len(), 1);
    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'done' AND attempts = 2"
        )
        .await,
        1
    );
    runtime.close().await;
}

/// A running effect keeps its lease while its handler runs: its runner renews it every
/// third of the lease, so a handler that outlives the lease it was claimed with is not run
/// a second time by another runner, and its own outcome is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_effect_renews_its_lease_and_is_not_run_twice() {
    // On a server leases run on the server's clock: the MariaDB reliability cases have
    // a_running_effect_keeps_its_lease_past_the_first.
    let Some(harness) = sqlite_harness("leases run on the server's clock") else {
        return;
    };
    let lease = Duration::from_millis(300);
    let runs = Arc::new(AtomicU32::new(0));
    let entered = Arc::new(tokio::sync::Semaphore::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    let start = || async {
        let (runs, entered, release) = (runs.clone(), entered.clone(), release.clone());
        harness
            .builder()
            .await
            .workers(Workers::default().effect_lease(lease))
            .effect(move |_: ChargeCard, _: EffectContext| {
                let (runs, entered, release) = (runs.clone(), entered.clone(), release.clone());
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    entered.add_permits(1);
                    release.notified().await;
                    Ok(())
                }
            })
            .start()
            .await
            .unwrap()
    };
    let first = start().await;
    let second = start().await;
    hold_300_cents(&first).await;
    let running = tokio::spawn({
        let first = first.clone();
        async move { first.testing().run_effects().await }
    });
    entered.acquire().await.unwrap().forget();

    // Far past the lease it was claimed with; its runner renews it from the new time.
    harness.clock.advance(Duration::from_secs(60));
    let renewed = eventually(Duration::from_secs(10), || async {
        let now = harness.clock.now().timestamp_micros();
        let leased = format!("solid_effects WHERE status = 'running' AND available_at > {now}");
        count(&harness, &leased).await == 1
    })
    .await;
    assert!(renewed, "the running effect's lease was not renewed");
    assert_eq!(
        second.testing().run_effects().await.unwrap(),
        0,
        "another runner took an effect whose handler is running"
    );
    release.notify_one();
    assert_eq!(running.await.unwrap().unwrap(), 1);

    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'done' AND attempts = 1"
        )
        .await,
        1
    );
    first.close().await;
    second.close().await;
}

/// A flaky delivery whose kind gets two attempts, whatever the runtime's policy says.
#[derive(Serialize, Deserialize)]
struct Deliver {
    parcel: String,
}

impl Effect for Deliver {
    const NAME: &'static str = "deliver";
    type Output = ();

    fn retry_policy() -> Option<RetryPolicy> {
        Some(RetryPolicy::new().max_attempts(2))
    }
}

/// Sends parcels.
#[actor]
#[derive(Default)]
struct Depot {}

#[actor]
impl Depot {
    #[command]
    fn send(&mut self, turn: &mut Turn<Self>, parcel: String) {
        turn.emit(Deliver { parcel });
    }
}

/// An effect kind's own retry policy decides its attempts (here 2 of the runtime's 5), and
/// its handler is told which attempt it runs, of how many, and whether it is the last.
#[tokio::test]
async fn an_effect_kind_has_its_own_retry_policy_and_its_handler_knows_the_last_attempt() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (harness, runtime) = started_with(|builder| {
        builder.retry(RetryPolicy::new().max_attempts(5)).effect({
            let seen = Arc::clone(&seen);
            move |_: Deliver, context: EffectContext| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push((
                        context.attempt(),
                        context.max_attempts(),
                        context.is_last_attempt(),
                    ));
                    Err::<(), _>(Failure::retryable("the courier did not come"))
                }
            }
        })
    })
    .await;
    runtime
        .reference::<Depot>("d")
        .send("p-1".to_owned())
        .await
        .unwrap();

    for _ in 0..4 {
        runtime.testing().run_effects().await.unwrap();
        harness.advance_minutes(10);
    }

    assert_eq!(*seen.lock().unwrap(), [(1, 2, false), (2, 2, true)]);
    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_permanent_failure_ends_the_effect_until_an_operator_retries_it() {
    let (harness, runtime, provider) = started_with_provider().await;
    provider.permanent.store(1, Ordering::SeqCst);
    hold_300_cents(&runtime).await;

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    harness.advance_minutes(60);
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);

    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'dead' AND last_error = 'the card is blocked'"
        )
        .await,
        1
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_effects() {
    let (_harness, runtime, provider) = started_with_provider().await;
    let checkout = runtime.reference::<Checkout>("c-1");
    checkout.hold("h-1", 900).await.unwrap();
    let worker = run_workers(&runtime);

    let paid = eventually(Duration::from_secs(10), || async {
        checkout.snapshot().await.unwrap().paid.contains("h-1")
    })
    .await;
    runtime.shutdown();
    worker.await.unwrap().unwrap();

    assert!(paid, "the workers did not run the effect");
    assert_eq!(provider.charges.lock().unwrap().len(), 1);
}

/// An effect handler that calls actors (each call a turn on the database) while its
/// runner renews its lease: a renewal must not wait for a transaction the handler holds
/// and cannot finish while the renewal waits (the handler is not polled meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewal_does_not_wedge_a_handler_that_calls_actors() {
    let calls = Arc::new(AtomicU32::new(0));
    let (harness, runtime) = started_with(|builder| {
        builder
            // Renewed every 5 ms: renewals fall while the handler's calls run their turns.
            .workers(Workers::default().effect_lease(Duration::from_millis(15)))
            .effect({
                let calls = Arc::clone(&calls);
                move |charge: ChargeCard, context: EffectContext| {
                    let calls = Arc::clone(&calls);
                    async move {
                        let checkout = context.runtime().reference::<Checkout>(context.actor_id());
                        for _ in 0..200 {
                            checkout.paid(charge.hold_id.clone()).await?;
                            calls.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(())
                    }
                }
            })
    })
    .await;
    hold_300_cents(&runtime).await;

    let ran = tokio::time::timeout(Duration::from_secs(60), runtime.testing().run_effects()).await;
    assert!(
        ran.is_ok(),
        "the effect wedged after {} of its 200 calls: a renewal waits for the writer its \
         own (unpolled) handler holds",
        calls.load(Ordering::SeqCst)
    );
    assert_eq!(ran.unwrap().unwrap(), 1);
    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'done' AND attempts = 1"
        )
        .await,
        1
    );
    runtime.close().await;
}

/// A runtime whose effects get `attempts` attempts, each a call to `provider`.
async fn start_with_attempts(
    harness: &Harness,
    provider: &Arc<Provider>,
    attempts: u32,
) -> Runtime {
    let provider = Arc::clone(provider);
    harness
        .builder()
        .await
        .retry(RetryPolicy::new().max_attempts(attempts))
        .effect(move |charge: ChargeCard, context: EffectContext| {
            let provider = Arc::clone(&provider);
            async move { provider.charge(context.id(), charge.cents) }
        })
        .start()
        .await
        .unwrap()
}

/// A deploy lowers the retry policy while an effect waits for its next attempt: the effect
/// is dead (its attempts are used up), but its error must still say why it failed, not
/// that its runner was killed (it was not), overwriting the handler's real error.
#[tokio::test]
async fn an_effect_dead_because_the_policy_was_lowered_keeps_its_real_error() {
    let harness = Harness::new();
    let provider = Arc::new(Provider::default());
    provider.failures_left.store(1, Ordering::SeqCst);
    let runtime = start_with_attempts(&harness, &provider, 5).await;
    hold_300_cents(&runtime).await;
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.close().await;

    let runtime = start_with_attempts(&harness, &provider, 1).await;
    harness.advance_minutes(10);
    runtime.testing().run_effects().await.unwrap();
    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 1);
    assert!(
        last_error(&dead[0]).contains("the provider timed out")
            && !last_error(&dead[0]).contains("killed"),
        "the dead effect's error is not true: {:?}",
        last_error(&dead[0])
    );
    runtime.close().await;
}

/// A shutdown whose deadline abandons a running effect: ShutdownReport says "an abandoned
/// effect runs again once its lease runs out". On its last attempt (here its only one) the
/// abandoned run is counted as a runner that died, and the effect is dead without ever
/// having failed, while an abandoned turn counts no attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_abandoned_by_a_shutdown_runs_again_even_on_its_last_attempt() {
    let harness = Harness::new();
    if harness.backend() == Backend::MariaDb {
        // The lease runs on the server's clock there.
        return;
    }
    let entered = Arc::new(tokio::sync::Semaphore::new(0));
    let runtime = harness
        .builder()
        .await
        .retry(RetryPolicy::new().max_attempts(1))
        .effect({
            let entered = Arc::clone(&entered);
            move |_: ChargeCard, _: EffectContext| {
                let entered = Arc::clone(&entered);
                async move {
                    entered.add_permits(1);
                    std::future::pending::<()>().await;
                    Ok(())
                }
            }
        })
        .start()
        .await
        .unwrap();
    hold_300_cents(&runtime).await;
    let workers = run_workers(&runtime);
    entered.acquire().await.unwrap().forget();
    let report = runtime
        .shutdown_with_deadline(Duration::from_millis(100))
        .await;
    assert_eq!(report.abandoned_effects, 1);
    workers.await.unwrap().unwrap();
    runtime.close().await;

    let provider = Arc::new(Provider::default());
    let runtime = start_with_attempts(&harness, &provider, 1).await;
    harness.advance_minutes(10);
    runtime.testing().run_effects().await.unwrap();
    let dead = dead_effects(&runtime).await;
    assert!(
        dead.is_empty() && provider.calls.lock().unwrap().len() == 1,
        "the abandoned effect did not run again: it is dead with {:?}",
        dead.iter().map(last_error).collect::<Vec<_>>()
    );
    runtime.close().await;
}

/// A ping whose kind's policy was built with its public field at zero attempts.
#[derive(Serialize, Deserialize)]
struct Ping;

impl Effect for Ping {
    const NAME: &'static str = "ping";
    type Output = ();

    fn retry_policy() -> Option<RetryPolicy> {
        let mut policy = RetryPolicy::new();
        policy.max_attempts = 0;
        Some(policy)
    }
}

#[actor]
#[derive(Default)]
struct Pinger {}

#[actor]
impl Pinger {
    #[command]
    fn ping(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Ping);
    }
}

/// A policy of zero attempts (its field is public; `max_attempts(0)` means 1): a message
/// under such a policy still runs once, an effect must too, not die unrun with "its last
/// attempt (0 of 0) stopped before it finished".
#[tokio::test]
async fn an_effect_kind_with_zero_attempts_still_runs_once() {
    let runs = Arc::new(AtomicU32::new(0));
    let (_harness, runtime) = started_with(|builder| {
        builder.effect({
            let runs = Arc::clone(&runs);
            move |_: Ping, _: EffectContext| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }
        })
    })
    .await;
    runtime.reference::<Pinger>("p").ping().await.unwrap();
    runtime.testing().run_effects().await.unwrap();
    let dead: Vec<_> = dead_effects(&runtime)
        .await
        .into_iter()
        .map(|dead| dead.last_error.unwrap_or_default())
        .collect();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler never ran: {dead:?}"
    );
    runtime.close().await;
}

/// The workers share their effect tasks among the kinds they handle: a kind with a backlog
/// does not keep every task while another kind's effect waits, whatever order the kinds were
/// registered in (every process registers them in the same order, so a kind-by-kind claim
/// would starve the same kind everywhere). Here a backlog of the till's charges, registered
/// first, each holds its task until the test opens the gate; the depot's delivery comes after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_with_a_backlog_does_not_starve_a_kind_registered_after_it() {
    const BACKLOG: u32 = 60;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let quick_ran = Arc::new(AtomicBool::new(false));
    let (_harness, runtime) = started_with(|builder| {
        builder
            .workers(1)
            .effect({
                let gate = Arc::clone(&gate);
                move |_: Charge, _: EffectContext| {
                    let gate = Arc::clone(&gate);
                    async move {
                        gate.acquire().await.expect("the gate stays open").forget();
                        Ok(())
                    }
                }
            })
            .effect({
                let quick_ran = Arc::clone(&quick_ran);
                move |_: Deliver, _: EffectContext| {
                    quick_ran.store(true, Ordering::SeqCst);
                    async { Ok(()) }
                }
            })
    })
    .await;
    let till = runtime.reference::<Till>("t");
    for number in 0..BACKLOG {
        till.ring_up(number.to_string()).await.unwrap();
    }
    let depot = runtime.reference::<Depot>("d");
    depot.send("p-1".to_owned()).await.unwrap();
    let worker = run_workers(&runtime);

    // Every effect task a kind-by-kind claim could give is held by a gated report: the quick
    // note runs only if the kinds take turns.
    let ran = eventually(Duration::from_secs(30), || async {
        quick_ran.load(Ordering::SeqCst)
    })
    .await;
    gate.add_permits(BACKLOG as usize);
    runtime.shutdown();
    worker.await.unwrap().unwrap();

    assert!(
        ran,
        "the quick note never ran: the kind registered first kept every effect task while \
         it had a backlog"
    );
}
