//! Nothing wedges: every failure is counted, every worker survives, a cancelled call leaves
//! the database usable. Each test is named after a way the first version could be wedged.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use solid_objects::prelude::*;
use solid_objects::{Clock, Effect, EffectContext, MessageStatus, RetryPolicy};
use support::cancellation::{drop_after, next_random};
use support::children::running_only;
use support::effect_actors::{Charge, Till};
use support::fixtures::{
    sqlite_harness, started, started_on, started_on_with, started_with, started_without_fsync,
    FileHolder,
};
use support::journal::Journal;
use support::operator::{dead_effects, dead_letters, prune, status_of};
use support::stored_rows::{insert_ready_message, insert_ready_messages, ready_message};
use support::workers::{answered, run_workers};
use support::{count, eventually, Harness};
use tokio::sync::Notify;

/// A field whose serialisation panics while `explode` is set: user serde code that panics.
#[derive(Default)]
struct Fuse {
    explode: bool,
}

impl Serialize for Fuse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        assert!(!self.explode, "the fuse blew while serialising");
        serializer.serialize_bool(false)
    }
}

impl<'de> Deserialize<'de> for Fuse {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        bool::deserialize(deserializer).map(|explode| Self { explode })
    }
}

/// An actor with a handler for each way a turn can go wrong.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Victim {
    log: Vec<String>,
    document: Value,
    fuse: Fuse,
}

#[actor]
impl Victim {
    #[command]
    fn record(&mut self, entry: String) -> usize {
        self.log.push(entry);
        self.log.len()
    }

    /// Stores `value` in the state as it is.
    #[command]
    fn store(&mut self, value: Value) {
        self.document = value;
    }

    /// Stores a document nested `depth` levels deep in the state.
    #[command]
    fn nest(&mut self, depth: u32) {
        self.document = nested(depth);
    }

    /// Makes the state's serialisation panic.
    #[command]
    fn light_the_fuse(&mut self) {
        self.fuse.explode = true;
    }

    /// Ends the turn's transaction behind the runtime's back and swallows any error.
    #[command]
    async fn swallow_sql_error(&mut self, turn: &mut Turn<Self>) -> Result<(), TurnError> {
        let _ignored = support::execute_in_turn(turn, "ROLLBACK", &[]).await;
        self.log.push("swallowed".to_owned());
        Ok(())
    }

    /// Schedules a reminder under `key`.
    #[command]
    fn remind_under(&mut self, turn: &mut Turn<Self>, key: String) {
        let at = turn.now() + TimeDelta::minutes(1);
        turn.schedule(at, key).ring();
    }

    /// Never returns.
    #[command]
    async fn hang(&mut self) {
        std::future::pending::<()>().await;
    }

    #[reminder]
    fn ring(&mut self) {
        self.log.push("ring".to_owned());
    }
}

/// A JSON array nested `depth` levels deep: `[[[...]]]`.
fn nested(depth: u32) -> Value {
    (1..depth).fold(Value::Array(Vec::new()), |inner, _| {
        Value::Array(vec![inner])
    })
}

const OUTSIDE_WRITER: &str = "RELIABILITY_OUTSIDE_WRITER";

/// The second process: writes one row to the database the parent names (by its URL), in a
/// transaction that takes the write lock first (on SQLite, `BEGIN IMMEDIATE`; sqlx waits up
/// to its 5-second busy timeout for it).
#[tokio::test]
async fn outside_writer_process() {
    let Ok(url) = std::env::var(OUTSIDE_WRITER) else {
        return;
    };
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let begin = if url.starts_with("sqlite:") {
        "BEGIN IMMEDIATE"
    } else {
        "BEGIN"
    };
    let mut tx = pool.begin_with(begin).await.unwrap();
    sqlx::query("CREATE TABLE IF NOT EXISTS outside (n INTEGER)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("INSERT INTO outside (n) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Whether another OS process can write to the harness's database.
async fn another_process_writes(harness: &Harness) -> bool {
    running_only(&support::test_name(
        module_path!(),
        "outside_writer_process",
    ))
    .env(OUTSIDE_WRITER, harness.url().await)
    .status()
    .unwrap()
    .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_calls_never_wedge_the_writer() {
    let (harness, runtime) = started().await;
    let mut tasks = Vec::new();
    for task in 0..8_u64 {
        let runtime = runtime.clone();
        tasks.push(tokio::spawn(async move {
            let mut random = (task + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let victim = runtime.reference::<Victim>(format!("v-{}", task % 3));
            for round in 0..120 {
                let roll = next_random(&mut random);
                let entry = format!("{task}-{round}");
                match roll % 4 {
                    0 => {
                        let deadline = Duration::from_micros(roll % 2_000);
                        let _ = tokio::time::timeout(deadline, victim.record(entry)).await;
                    }
                    1 => drop_after(victim.record(entry), roll % 120).await,
                    2 => drop_after(victim.enqueue().record(entry), roll % 120).await,
                    _ => {
                        let quick = victim.clone().timeout(Duration::from_millis(roll % 3 + 1));
                        let _ = quick.record(entry).await;
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    let victim = runtime.reference::<Victim>("after");
    for n in 1..=100 {
        let result = victim.record(format!("after-{n}")).await;
        assert_eq!(result.unwrap(), n, "call {n} after the cancellations");
    }
    assert!(
        another_process_writes(&harness).await,
        "another process cannot write to the file"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_state_nested_too_deep_to_read_back_is_never_committed() {
    let (_harness, runtime, victim) = started_on::<Victim>("deep").await;
    victim.record("before").await.unwrap();

    let result = victim.nest(127).await;

    assert!(result.is_err(), "the unreadable state was committed");
    let state = victim.snapshot().await.expect("the state still reads");
    assert_eq!(state.log, ["before"]);
    assert_eq!(victim.record("after").await.unwrap(), 2);
    runtime.close().await;
}

#[tokio::test]
async fn arguments_nested_too_deep_to_read_back_are_refused_at_the_door() {
    let (harness, runtime, victim) = started_on::<Victim>("deep").await;

    let sync = victim.store(nested(128)).await;
    let queued = victim.enqueue().store(nested(128)).await;

    assert!(sync.is_err(), "{sync:?}");
    assert!(queued.is_err(), "{queued:?}");
    assert_eq!(count(&harness, "solid_messages").await, 0);
    assert_eq!(victim.record("after").await.unwrap(), 1);
    runtime.close().await;
}

#[tokio::test]
async fn stored_arguments_that_do_not_decode_become_a_dead_letter_and_later_messages_run() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    victim.record("one").await.unwrap();
    insert_ready_message(
        &harness,
        "Victim",
        "v",
        "record",
        r#"{"entry": 42}"#,
        "r-bad",
    )
    .await;
    let later = victim.enqueue().record("three").await.unwrap();

    let _ = runtime.testing().drain().await;

    assert!(
        matches!(
            status_of(&runtime, "r-bad").await,
            MessageStatus::Dead { attempts: 1, .. }
        ),
        "{:?}",
        status_of(&runtime, "r-bad").await
    );
    assert_eq!(later.result().await.unwrap(), Some(2));
    runtime.close().await;
}

#[tokio::test]
async fn a_swallowed_sql_error_is_a_counted_attempt() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    let poisoned = victim.enqueue().swallow_sql_error().await.unwrap();
    let later = victim.enqueue().record("later").await.unwrap();

    let _ = runtime.testing().drain().await;
    let first = poisoned.status().await.unwrap();
    harness.advance_minutes(1);
    let _ = runtime.testing().drain().await;

    assert!(
        matches!(
            first,
            MessageStatus::Ready {
                attempts: 1,
                last_error: Some(_),
                ..
            }
        ),
        "{first:?}"
    );
    assert!(matches!(
        poisoned.status().await.unwrap(),
        MessageStatus::Dead { attempts: 2, .. }
    ));
    assert_eq!(later.result().await.unwrap(), Some(1));
    assert_eq!(victim.snapshot().await.unwrap().log, ["later"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_panicking_serialize_is_a_counted_attempt() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    victim.record("one").await.unwrap();

    let runtime_task = runtime.clone();
    let call =
        tokio::spawn(async move { runtime_task.reference::<Victim>("v").light_the_fuse().await })
            .await;

    let call = call.expect("the panic stays inside the runtime");
    assert!(matches!(call, Err(Error::HandlerFailed { .. })), "{call:?}");
    harness.advance_minutes(1);
    let _ = runtime.testing().drain().await;
    assert_eq!(victim.record("two").await.unwrap(), 2);
    runtime.close().await;
}

/// A reminder scheduled under a key no database may store, or sent to such an id.
#[tokio::test]
async fn ids_and_keys_with_nul_bytes_are_typed_errors_and_write_nothing() {
    let (harness, runtime) = started().await;

    let id = runtime.reference::<Victim>("a\0b").record("x").await;
    let key = runtime
        .reference::<Victim>("v")
        .enqueue()
        .idempotency_key("k\0")
        .record("x")
        .await;

    assert!(matches!(id, Err(Error::InvalidActorId { .. })), "{id:?}");
    assert!(!matches!(key, Ok(_) | Err(Error::Database(_))), "{key:?}");
    assert_eq!(count(&harness, "solid_messages").await, 0);

    let reminder = runtime
        .reference::<Victim>("v")
        .remind_under("r\0".to_owned())
        .await;
    assert!(
        matches!(reminder, Err(Error::HandlerFailed { .. })),
        "{reminder:?}"
    );
    assert_eq!(count(&harness, "solid_reminders").await, 0);
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_handler_that_panics_before_its_future_is_a_failed_attempt() {
    let (harness, runtime) = started_with(|builder| {
        builder.effect(|charge: Charge, _context: EffectContext| {
            assert!(
                charge.tag != "armed",
                "the handler panicked before its future"
            );
            std::future::ready(Ok(()))
        })
    })
    .await;
    let till = runtime.reference::<Till>("t");
    till.ring_up("armed").await.unwrap();

    let runtime_task = runtime.clone();
    let ran = tokio::spawn(async move { runtime_task.testing().run_effects().await }).await;

    let ran = ran.expect("the panic stays inside the runtime");
    assert_eq!(ran.unwrap(), 1);
    assert_eq!(
        count(
            &harness,
            "solid_effects WHERE status = 'ready' AND attempts = 1"
        )
        .await,
        1
    );
    runtime.close().await;
}

/// A clock that panics the next `armed` times it is read: a fault inside a worker pass.
#[derive(Clone)]
struct TrippingClock {
    inner: ManualClock,
    armed: Arc<AtomicU32>,
}

impl Clock for TrippingClock {
    fn now(&self) -> DateTime<Utc> {
        let armed = self
            .armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        assert!(armed.is_err(), "the clock tripped");
        self.inner.now()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_is_restarted_and_run_returns_only_after_shutdown() {
    let harness = Harness::new();
    let armed = Arc::new(AtomicU32::new(0));
    let runtime = harness
        .store()
        .await
        .clock(TrippingClock {
            inner: harness.clock.clone(),
            armed: Arc::clone(&armed),
        })
        .policy(AllowAll)
        .workers(1)
        .actor::<Victim>()
        .start()
        .await
        .unwrap();
    armed.store(1, Ordering::SeqCst);
    let run = run_workers(&runtime);
    let tripped = eventually(Duration::from_secs(10), || async {
        armed.load(Ordering::SeqCst) == 0
    })
    .await;
    assert!(tripped, "the worker never read the clock");

    let victim = runtime.reference::<Victim>("v");
    let queued = victim.enqueue().record("served").await.unwrap();
    let served = answered(&queued, Duration::from_secs(10)).await;

    assert!(served, "no worker ran the message after the first one died");
    assert!(!run.is_finished(), "run() returned before shutdown");
    runtime.shutdown();
    run.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_blocked_heads_do_not_delay_a_ready_actor() {
    // Each blocked actor's message behind its delayed one is ready (a delayed message holds
    // back nothing), so the ready actor, the newest, comes after a thousand turns: about a
    // second on SQLite, several on a server. The bound is for a worker that never reaches
    // it, not a speed: speed is the bench's.
    let (_harness, runtime) = started_without_fsync(|builder| builder.workers(1)).await;
    for n in 0..1000 {
        let blocked = runtime.reference::<Victim>(format!("blocked-{n}"));
        blocked
            .enqueue()
            .delay(Duration::from_secs(3600))
            .record("later")
            .await
            .unwrap();
        blocked.enqueue().record("behind").await.unwrap();
    }
    let victim = runtime.reference::<Victim>("ready");
    let ready = victim.enqueue().record("now").await.unwrap();

    let run = run_workers(&runtime);
    let served = answered(&ready, Duration::from_secs(60)).await;
    runtime.shutdown();
    run.await.unwrap().unwrap();

    assert!(served, "the ready actor waited behind the blocked ones");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_messages_for_unknown_types_do_not_delay_a_ready_actor() {
    let harness = Harness::new();
    let runtime = harness.builder().await.workers(1).start().await.unwrap();
    let victim = runtime.reference::<Victim>("ready");
    let ready = victim.enqueue().record("now").await.unwrap();
    let ghosts: Vec<String> = (1..=1000)
        .map(|i| {
            ready_message(
                "Ghost",
                &format!("g-{i}"),
                "haunt",
                "{}",
                &format!("r-ghost-{i}"),
            )
        })
        .collect();
    insert_ready_messages(&harness, &ghosts).await;

    let run = run_workers(&runtime);
    let served = answered(&ready, Duration::from_secs(10)).await;
    runtime.shutdown();
    run.await.unwrap().unwrap();

    assert!(served, "the ready actor waited behind unknown types");
}

#[tokio::test]
async fn an_unknown_operation_waits_for_a_build_that_knows_it_and_says_why() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    victim.record("one").await.unwrap();
    insert_ready_message(&harness, "Victim", "v", "vanished", "{}", "r-vanished").await;

    let drained = runtime.testing().drain().await;
    let called = runtime.reference::<Victim>("v").record("two").await;
    runtime.testing().upkeep().await.unwrap();

    assert_eq!(
        drained.unwrap().turns,
        0,
        "workers leave it for a build that knows it"
    );
    assert!(
        matches!(&called, Err(Error::Queued { reason, .. })
            if matches!(**reason, Error::UnknownOperation { .. })),
        "{called:?}"
    );
    match status_of(&runtime, "r-vanished").await {
        MessageStatus::Ready {
            attempts: 0,
            last_error: Some(why),
            ..
        } => assert!(why.contains("vanished"), "{why}"),
        other => panic!("the status does not say why it waits: {other:?}"),
    }
    runtime.close().await;
}

#[tokio::test]
async fn caller_supplied_durations_never_panic() {
    let mut retry = RetryPolicy::default();
    retry.base_delay = Duration::MAX;
    retry.max_delay = Duration::MAX;
    let mut limits = solid_objects::Limits::default();
    limits.retention = Duration::MAX;
    let (_harness, runtime) = started_with(|builder| builder.retry(retry).limits(limits)).await;
    let victim = runtime.reference::<Victim>("v");

    let patient = victim.clone().timeout(Duration::MAX).record("one").await;
    let failing = victim.enqueue().swallow_sql_error().await.unwrap();
    let _ = runtime.testing().drain().await;
    // Refused or saturated: either is fine, a panic is not.
    let _far = victim.enqueue().delay(Duration::MAX).record("far").await;
    let pruned = runtime.admin().prune().await.map(|pruned| pruned.total());

    assert_eq!(patient.unwrap(), 1);
    assert!(
        matches!(
            failing.status().await.unwrap(),
            MessageStatus::Ready { attempts: 1, .. }
        ),
        "{:?}",
        failing.status().await
    );
    assert_eq!(pruned.unwrap(), 0);
    runtime.close().await;
}

#[cfg(unix)]
#[tokio::test]
async fn the_database_file_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let Some(harness) = sqlite_harness("a database file is SQLite's") else {
        return;
    };
    let runtime = harness.start().await;
    let victim = runtime.reference::<Victim>("v");
    victim.record("one").await.unwrap();

    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", harness.path().display());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{path} has mode {mode:o}");
    }
    runtime.close().await;
}

#[tokio::test]
async fn another_process_holding_the_file_gives_a_sync_timeout_not_database_locked() {
    let Some(harness) = sqlite_harness("the file lock is SQLite's") else {
        return;
    };
    let runtime = harness.start().await;
    let victim = runtime.reference::<Victim>("v");
    victim.record("one").await.unwrap();
    let outsider = FileHolder::take(&harness).await;

    let blocked = victim
        .clone()
        .timeout(Duration::from_secs(6))
        .record("two")
        .await;
    outsider.release().await;

    assert!(
        matches!(blocked, Err(Error::SyncTimeout { .. })),
        "{blocked:?}"
    );
    assert_eq!(victim.record("three").await.unwrap(), 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_clock_that_steps_back_never_blocks_the_mailbox() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    let queued = victim.enqueue().record("one").await.unwrap();

    harness.clock.set(harness.clock.now() - TimeDelta::hours(1));
    let ran = runtime.testing().drain().await.unwrap();

    assert_eq!(ran.turns, 1);
    assert_eq!(queued.result().await.unwrap(), Some(1));
    assert_eq!(victim.record("two").await.unwrap(), 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_delayed_message_holds_back_no_call_and_its_wait_says_when_it_is_due() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;
    let later = victim
        .enqueue()
        .delay(Duration::from_secs(3600))
        .record("later")
        .await
        .unwrap();

    let now = victim
        .clone()
        .timeout(Duration::from_millis(100))
        .record("now")
        .await;
    let waited = later.wait(Duration::from_millis(20)).await;

    assert_eq!(now.unwrap(), 1);
    match waited {
        Err(Error::WaitTimeout { waiting_on, .. }) => {
            assert!(
                waiting_on.starts_with("it is not due until"),
                "{waiting_on}"
            );
        }
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    harness.advance_minutes(61);
    assert_eq!(later.wait(Duration::from_secs(5)).await.unwrap(), 2);
    runtime.close().await;
}

/// Fails while its switch is off.
#[actor(max_attempts = 1)]
#[derive(Default)]
struct Switch {
    on: bool,
    count: u32,
}

#[actor]
impl Switch {
    #[command]
    fn bump(&mut self) -> Result<u32, Failure> {
        if !self.on {
            return Err(Failure::retryable("the switch is off"));
        }
        self.count += 1;
        Ok(self.count)
    }

    #[command]
    fn turn_on(&mut self) {
        self.on = true;
    }
}

#[tokio::test]
async fn a_retried_dead_letter_answers_its_original_idempotency_key() {
    let (_harness, runtime, switch) = started_on::<Switch>("s").await;
    let failed = switch.clone().idempotency_key("k").bump().await;
    assert!(matches!(
        failed,
        Err(Error::HandlerFailed { retry_at: None, .. })
    ));
    switch.turn_on().await.unwrap();
    let dead = dead_letters(&runtime).await;
    let retried = runtime
        .admin()
        .retry_dead_letter(dead[0].message_id)
        .await
        .unwrap();
    retried.wait(Duration::from_secs(5)).await.unwrap();

    let again = switch.clone().idempotency_key("k").bump().await;

    assert_eq!(again.unwrap(), 1);
    assert_eq!(switch.snapshot().await.unwrap().count, 1);
    runtime.close().await;
}

/// Counts runs of each effect id; the first run of the first effect waits for a signal.
#[derive(Default)]
struct SlowProvider {
    runs: Mutex<Vec<String>>,
    release: Notify,
    started: Notify,
    blocking: Mutex<bool>,
}

async fn provider_runtime(harness: &Harness, provider: &Arc<SlowProvider>) -> Runtime {
    let provider = Arc::clone(provider);
    harness
        .builder()
        .await
        .effect(move |charge: Charge, context: EffectContext| {
            let provider = Arc::clone(&provider);
            async move {
                provider
                    .runs
                    .lock()
                    .unwrap()
                    .push(format!("{}:{}", charge.tag, context.id()));
                let block = std::mem::take(&mut *provider.blocking.lock().unwrap());
                if block {
                    provider.started.notify_one();
                    provider.release.notified().await;
                    return Err(Failure::permanent("a stale runner's verdict"));
                }
                Ok(())
            }
        })
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_run_once_per_lease_and_a_stale_runner_cannot_undo_them() {
    let Some(harness) = sqlite_harness(
        "leases run on the manual clock only on SQLite; a server's on its own clock",
    ) else {
        return;
    };
    let provider = Arc::new(SlowProvider::default());
    let first = provider_runtime(&harness, &provider).await;
    let second = provider_runtime(&harness, &provider).await;
    let till = first.reference::<Till>("t");
    for n in 1..=3 {
        till.ring_up(n.to_string()).await.unwrap();
    }
    *provider.blocking.lock().unwrap() = true;
    let stale = tokio::spawn({
        let first = first.clone();
        async move { first.testing().run_effects().await }
    });
    provider.started.notified().await;

    harness.advance_minutes(6);
    second.testing().run_effects().await.unwrap();
    provider.release.notify_one();
    stale.await.unwrap().unwrap();

    let runs = provider.runs.lock().unwrap().clone();
    for n in 2..=3 {
        let prefix = format!("{n}:");
        let times = runs.iter().filter(|run| run.starts_with(&prefix)).count();
        assert_eq!(times, 1, "effect {n} ran {times} times: {runs:?}");
    }
    assert!(
        dead_effects(&first).await.is_empty(),
        "a stale runner turned a done effect dead"
    );
    assert_eq!(
        count(&harness, "solid_effects WHERE status = 'done'").await,
        3
    );
    first.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_handler_is_abandoned_after_the_turn_timeout_and_counted() {
    let (harness, runtime, victim) = started_on_with::<Victim>("v", |builder| {
        builder.turn_timeout(Duration::from_millis(200))
    })
    .await;
    let hung = victim.enqueue().hang().await.unwrap();
    let later = victim.enqueue().record("later").await.unwrap();

    runtime.testing().drain().await.unwrap();
    let first = hung.status().await.unwrap();
    let other = runtime.reference::<Victim>("other").record("served").await;
    harness.advance_minutes(1);
    runtime.testing().drain().await.unwrap();

    match first {
        MessageStatus::Ready {
            attempts: 1,
            last_error: Some(error),
            ..
        } => assert!(error.contains("turn timeout"), "{error}"),
        other => panic!("the hung attempt was not counted: {other:?}"),
    }
    assert_eq!(other.unwrap(), 1, "the writer was free for another actor");
    assert!(matches!(
        hung.status().await.unwrap(),
        MessageStatus::Dead { attempts: 2, .. }
    ));
    assert_eq!(later.result().await.unwrap(), Some(1));
    runtime.close().await;
}

#[tokio::test]
async fn a_sync_call_whose_handler_hangs_past_the_turn_timeout_fails_and_is_counted() {
    let (harness, runtime, victim) = started_on_with::<Victim>("v", |builder| {
        builder.turn_timeout(Duration::from_millis(100))
    })
    .await;

    let result = victim.hang().await;

    match result {
        Err(Error::HandlerFailed {
            error,
            attempts: 1,
            retry_at: Some(_),
            ..
        }) => assert!(error.contains("turn timeout"), "{error}"),
        other => panic!("expected a counted failure, got {other:?}"),
    }
    assert_eq!(
        count(
            &harness,
            "solid_messages WHERE attempts = 1 AND status = 'ready'"
        )
        .await,
        1
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_caller_that_gives_up_on_a_slow_handler_leaves_nothing_behind() {
    let (harness, runtime, victim) = started_on::<Victim>("v").await;

    let result = victim
        .clone()
        .timeout(Duration::from_millis(100))
        .hang()
        .await;

    assert!(
        matches!(result, Err(Error::SyncTimeout { .. })),
        "{result:?}"
    );
    assert_eq!(count(&harness, "solid_messages").await, 0);
    assert_eq!(victim.record("next").await.unwrap(), 1);
    runtime.close().await;
}

/// Fails for good at once.
#[derive(Serialize, Deserialize)]
struct Doomed {}

impl Effect for Doomed {
    const NAME: &'static str = "doomed";
    type Output = ();
}

#[actor]
#[derive(Default)]
struct Undertaker {}

#[actor]
impl Undertaker {
    #[command]
    fn doom(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Doomed {});
    }
}

async fn undertaker_runtime(harness: &Harness, dead_retention: Duration) -> Runtime {
    let mut limits = solid_objects::Limits::default();
    limits.dead_retention = dead_retention;
    harness
        .builder()
        .await
        .limits(limits)
        .effect(|_: Doomed, _: EffectContext| async { Err(Failure::permanent("never")) })
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn dead_letters_and_dead_effects_are_pruned_after_their_retention() {
    let harness = Harness::new();
    let runtime = undertaker_runtime(&harness, Duration::from_secs(24 * 3600)).await;
    runtime.reference::<Undertaker>("u").doom().await.unwrap();
    let journal = runtime.reference::<Journal>("u");
    journal.invalid().await.unwrap_err();
    runtime.testing().run_effects().await.unwrap();
    assert_eq!(dead_letters(&runtime).await.len(), 1);
    assert_eq!(dead_effects(&runtime).await.len(), 1);

    harness.advance_minutes(23 * 60);
    prune(&runtime).await;
    let kept = (
        dead_letters(&runtime).await.len(),
        dead_effects(&runtime).await.len(),
    );
    harness.advance_minutes(2 * 60);
    prune(&runtime).await;

    assert_eq!(kept, (1, 1), "pruned before their retention");
    assert!(dead_letters(&runtime).await.is_empty());
    assert!(dead_effects(&runtime).await.is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn a_dead_retention_of_zero_keeps_dead_letters() {
    let harness = Harness::new();
    let runtime = undertaker_runtime(&harness, Duration::ZERO).await;
    let journal = runtime.reference::<Journal>("u");
    journal.invalid().await.unwrap_err();

    harness.advance_minutes(365 * 24 * 60);
    prune(&runtime).await;

    assert_eq!(dead_letters(&runtime).await.len(), 1);
    runtime.close().await;
}

#[tokio::test]
async fn effects_without_a_handler_are_listed_for_operators() {
    let (_harness, runtime, undertaker) = started_on::<Undertaker>("u").await;
    undertaker.doom().await.unwrap();
    undertaker.doom().await.unwrap();

    let unhandled = runtime.admin().unhandled_effects().await.unwrap();

    assert_eq!(unhandled.len(), 1);
    assert_eq!(unhandled[0].name, "doomed");
    assert_eq!(unhandled[0].count, 2);
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    runtime.close().await;
}
