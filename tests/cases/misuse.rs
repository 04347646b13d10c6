//! The traps a new user falls into in the first hour, each closed: a synchronous call from
//! inside a handler, a timeout too short to mean anything, a wait that times out without
//! saying why, a message found by its key that reveals a command's result, a rejection code
//! that is not snake_case, a runtime started without a policy, effects nobody handles.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::misuse_from_handlers::Counter;
use serde::{Deserialize, Serialize};
use solid_objects::policy::{Denied, Policy, Request, RequestKind};
use solid_objects::prelude::*;
use solid_objects::EffectContext;
use support::fixtures::{start_with_policy, started_on, started_on_system_time};
use support::{count, Harness};

/// The runtime a handler reaches for, as an application might keep it in a global.
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

#[actor]
#[derive(Default)]
struct Caller {}

#[actor]
impl Caller {
    /// Calls another actor synchronously, which a handler must not do; returns the error.
    #[command]
    async fn call_another(&mut self) -> String {
        let other = RUNTIME
            .get()
            .expect("the runtime")
            .reference::<Counter>("other");
        match other.add(1).await {
            Ok(value) => format!("it ran: {value}"),
            Err(error @ Error::CalledFromHandler { .. }) => error.to_string(),
            Err(other) => format!("the wrong error: {other:?}"),
        }
    }

    /// Calls another actor synchronously and passes the refusal on with `?`.
    #[command]
    async fn call_another_with_question_mark(&mut self) -> Result<u32, Failure> {
        let other = RUNTIME
            .get()
            .expect("the runtime")
            .reference::<Counter>("other");
        Ok(other.add(1).await?)
    }
}

#[tokio::test]
async fn a_synchronous_call_from_inside_a_handler_fails_at_once_and_says_to_send() {
    let (harness, runtime) =
        started_on_system_time(|builder| builder.sync_timeout(Duration::from_secs(60))).await;
    RUNTIME.set(runtime.clone()).unwrap();

    let said = tokio::time::timeout(
        Duration::from_secs(30),
        runtime.reference::<Caller>("caller").call_another(),
    )
    .await
    .expect("the call did not wait for its own turn")
    .unwrap();

    assert!(said.contains("turn.send::<Counter>(id)"), "{said}");
    assert_eq!(
        count(&harness, "solid_messages WHERE actor_id = 'other'").await,
        0
    );

    // Passed on with `?`, the refusal is a failure no retry can fix: dead at once.
    let passed_on = runtime
        .reference::<Caller>("caller")
        .call_another_with_question_mark()
        .await;
    assert!(
        matches!(
            &passed_on,
            Err(Error::HandlerFailed {
                attempts: 1,
                retry_at: None,
                ..
            })
        ),
        "{passed_on:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_timeout_under_a_millisecond_is_refused_before_anything_is_written() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;

    let called = counter.clone().timeout(Duration::ZERO).add(1).await;
    let tiny = counter
        .clone()
        .timeout(Duration::from_micros(999))
        .add(1)
        .await;
    let queued = counter.enqueue().add(1).await.unwrap();
    let waited = queued.wait(Duration::ZERO).await;

    assert!(
        matches!(called, Err(Error::InvalidTimeout { .. })),
        "{called:?}"
    );
    assert!(
        matches!(tiny, Err(Error::InvalidTimeout { .. })),
        "{tiny:?}"
    );
    assert!(
        matches!(waited, Err(Error::InvalidTimeout { .. })),
        "{waited:?}"
    );
    assert_eq!(count(&harness, "solid_messages").await, 1);
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'ready'").await,
        1
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_wait_that_times_out_says_why_the_message_has_not_run_and_a_delayed_one_blocks_nothing() {
    let (_harness, runtime, counter) = started_on::<Counter>("c").await;
    let delayed = counter
        .enqueue()
        .delay(TimeDelta::hours(1))
        .add(1)
        .await
        .unwrap();
    let behind = counter.enqueue().add(2).await.unwrap();

    let own = delayed.wait(TimeDelta::milliseconds(50)).await;
    let queued = behind.wait(Duration::from_millis(50)).await;

    match own {
        Err(Error::WaitTimeout { waiting_on, .. }) => {
            assert!(
                waiting_on.starts_with("it is not due until"),
                "{waiting_on}"
            );
        }
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    // The delayed message is not in line before it is due: the one behind it runs.
    assert_eq!(queued.unwrap(), 2);
    runtime.close().await;
}

/// Reads anything, runs only `add`.
struct ReadOnly;

impl Policy for ReadOnly {
    fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
        match request.kind {
            RequestKind::Command if request.operation == "add" => Ok(()),
            _ => Err(Denied::new("read-only")),
        }
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

/// Allows everything but `add`.
struct NoAdding;

impl Policy for NoAdding {
    fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
        if request.operation == "add" {
            return Err(Denied::new("no adding"));
        }
        Ok(())
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

#[tokio::test]
async fn a_message_found_by_key_is_revealed_only_to_a_caller_allowed_its_command() {
    let harness = Harness::new();
    let writer = start_with_policy(&harness, ReadOnly).await;
    let counter = writer.reference::<Counter>("c");
    counter.idempotency_key("k").add(5).await.unwrap();
    let reader = start_with_policy(&harness, NoAdding).await;

    let allowed = writer.reference::<Counter>("c").message_with_key("k").await;
    let denied = reader.reference::<Counter>("c").message_with_key("k").await;

    assert!(allowed.unwrap().is_some());
    assert!(
        matches!(&denied, Err(Error::Unauthorized { operation, .. }) if operation == "add"),
        "{denied:?}"
    );
    writer.close().await;
    reader.close().await;
}

#[test]
fn a_rejection_code_that_is_not_snake_case_is_refused() {
    assert!(matches!(
        Rejection::new("room not found", "No room 12"),
        Err(Error::InvalidRejectionCode { .. })
    ));
    assert!(matches!(
        Rejection::new("RoomNotFound", "No room 12"),
        Err(Error::InvalidRejectionCode { .. })
    ));
    assert_eq!(
        Rejection::new("room_not_found_2", "No room 12")
            .unwrap()
            .code(),
        "room_not_found_2"
    );
}

/// Log lines written by the runtime while a test runs.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_runtime_started_without_a_policy_warns() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let harness = Harness::new();

    let runtime = harness.store().await.start().await.unwrap();

    assert!(
        logs.text()
            .contains("no authorisation policy is configured"),
        "{}",
        logs.text()
    );
    runtime.close().await;
}

#[derive(Serialize, Deserialize)]
struct Postcard {}

impl Effect for Postcard {
    const NAME: &'static str = "postcard";
    type Output = ();
}

#[actor]
#[derive(Default)]
struct Traveller {}

#[actor]
impl Traveller {
    #[command]
    fn write_home(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Postcard {});
    }
}

/// A runtime of the harness's with every call allowed, and the postcard's handler if
/// `handles` (which counts its runs).
async fn postcard_runtime(harness: &Harness, handles: Option<Arc<Mutex<usize>>>) -> Runtime {
    let mut builder = harness.builder().await;
    if let Some(runs) = handles {
        builder = builder.effect(move |_: Postcard, _: EffectContext| {
            let runs = Arc::clone(&runs);
            async move {
                *runs.lock().unwrap() += 1;
                Ok(())
            }
        });
    }
    builder.start().await.unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn an_effect_no_handler_runs_leaves_the_drain_unclean_and_the_doctor_names_it() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let harness = Harness::new();
    let runtime = postcard_runtime(&harness, None).await;
    let traveller = runtime.reference::<Traveller>("t");
    traveller.write_home().await.unwrap();
    traveller.write_home().await.unwrap();

    let drained = runtime.testing().drain().await.unwrap();
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);

    assert!(!drained.is_clean(), "{drained:?}");
    let kinds: Vec<_> = drained
        .unhandled_effects
        .iter()
        .map(|kind| (kind.name.as_str(), kind.count))
        .collect();
    assert_eq!(kinds, [("postcard", 2)]);
    let report = runtime.admin().doctor().await.unwrap();
    assert_eq!(report.unhandled_effects, drained.unhandled_effects);
    assert!(
        report
            .problems
            .iter()
            .any(|problem| problem.contains("2 effects of kind \"postcard\" wait")),
        "{:?}",
        report.problems
    );
    runtime.close().await;

    // The next runtime of this process says so as it starts, before any worker runs.
    let again = postcard_runtime(&harness, None).await;
    let warned = logs
        .text()
        .lines()
        .filter(|line| line.contains("this runtime has no handler") && line.contains("postcard"))
        .count();
    assert_eq!(warned, 1, "{}", logs.text());
    again.close().await;

    // With the handler, the effects run and the drain is clean.
    let runs = Arc::new(Mutex::new(0));
    let handled = postcard_runtime(&harness, Some(Arc::clone(&runs))).await;
    assert_eq!(handled.testing().run_effects().await.unwrap(), 2);
    let drained = handled.testing().drain().await.unwrap();
    assert!(drained.is_clean(), "{drained:?}");
    assert!(handled.admin().doctor().await.unwrap().problems.is_empty());
    assert_eq!(*runs.lock().unwrap(), 2);
    handled.close().await;
}

/// A telegram: an effect of another kind than the postcard.
#[derive(Serialize, Deserialize)]
struct Telegram {}

impl Effect for Telegram {
    const NAME: &'static str = "telegram";
    type Output = ();
}

/// Writes home, and says so: it declares the postcards it emits.
#[actor(effects(Postcard))]
#[derive(Default)]
struct Correspondent {}

#[actor]
impl Correspondent {
    #[command]
    fn write_home(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Postcard {});
    }
}

#[tokio::test]
async fn a_runtime_that_runs_effects_refuses_to_start_without_a_handler_its_actors_declare() {
    let harness = Harness::new();
    let builder = || async {
        harness
            .store()
            .await
            .policy(AllowAll)
            .actor::<Correspondent>()
    };

    let refused = builder()
        .await
        .effect(|_: Telegram, _: EffectContext| async { Ok(()) })
        .start()
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(refused, solid_objects::Error::Config(_))
            && message.contains("\"postcard\" (emitted by Correspondent)")
            && message.contains("Builder::effect"),
        "{message}"
    );

    // A process that runs no effects (a web server, say) starts, and leaves them to others.
    let web = builder().await.start().await.unwrap();
    web.reference::<Correspondent>("c")
        .write_home()
        .await
        .unwrap();
    web.close().await;
    let runs = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&runs);
    let runner = builder()
        .await
        .effect(move |_: Postcard, _: EffectContext| {
            let counted = Arc::clone(&counted);
            async move {
                *counted.lock().unwrap() += 1;
                Ok(())
            }
        })
        .start()
        .await
        .unwrap();
    assert_eq!(runner.testing().run_effects().await.unwrap(), 1);
    assert_eq!(*runs.lock().unwrap(), 1);
    runner.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn effects_nobody_handles_are_warned_about_once_and_listed() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let harness = Harness::new();
    let runtime = harness.builder().await.start().await.unwrap();
    let traveller = runtime.reference::<Traveller>("t");
    traveller.write_home().await.unwrap();
    traveller.write_home().await.unwrap();
    harness.advance_minutes(2);

    for _ in 0..2 {
        runtime.testing().upkeep().await.unwrap();
    }

    let warnings = logs.text().matches("no handler in this process").count();
    assert_eq!(warnings, 1, "{}", logs.text());
    let listed = runtime.admin().unhandled_effects().await.unwrap();
    assert_eq!((listed[0].name.as_str(), listed[0].count), ("postcard", 2));
    runtime.close().await;
}

/// A letter: an effect that another process runs while this one looks.
#[derive(Serialize, Deserialize)]
struct Letter {}

impl Effect for Letter {
    const NAME: &'static str = "letter";
    type Output = ();
}

#[actor]
#[derive(Default)]
struct LetterWriter {}

#[actor]
impl LetterWriter {
    #[command]
    fn write(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Letter {});
    }
}

/// An effect that another process's handler is running right now (claimed, its lease live)
/// is not one "waiting to run" with no handler: a runtime without the handler (a web
/// process that leaves effects to the workers', as the guide suggests) lists no unhandled
/// effect for it, its doctor names no problem ("register one .. or they never run" would
/// be untrue: one runs), and its drain is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_another_process_is_running_is_not_listed_as_unhandled() {
    let harness = Harness::new();
    let gate = support::gates::gate("misuse-letter-running");
    let worker = {
        let gate = Arc::clone(&gate);
        harness
            .builder()
            .await
            .effect(move |_: Letter, _: EffectContext| {
                let gate = Arc::clone(&gate);
                async move {
                    gate.pass().await;
                    Ok(())
                }
            })
            .start()
            .await
            .unwrap()
    };
    worker.reference::<LetterWriter>("w").write().await.unwrap();
    let running = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.testing().run_effects().await })
    };
    gate.reached(1).await;

    // Another process, without the letter's handler, looks while the worker runs it.
    let web = harness
        .builder()
        .await
        .actor::<LetterWriter>()
        .start()
        .await
        .unwrap();
    let listed = web.admin().unhandled_effects().await.unwrap();
    let report = web.admin().doctor().await.unwrap();
    let drained = web.testing().drain().await.unwrap();
    gate.open();
    assert_eq!(running.await.unwrap().unwrap(), 1);
    web.close().await;
    worker.close().await;
    assert!(
        listed.is_empty() && report.unhandled_effects.is_empty(),
        "an effect another runtime's handler is running is listed as unhandled: {listed:?}"
    );
    assert!(
        !report
            .problems
            .iter()
            .any(|problem| problem.contains("letter")),
        "the doctor calls an effect another runtime is running a problem: {:?}",
        report.problems
    );
    assert!(drained.is_clean(), "{drained:?}");
}

/// The promise of `#[actor(effects(..))]`: in a runtime that runs effects, a forgotten
/// `.effect(..)` fails, not in production. An application names its actor types by the
/// references it takes (`Builder::actor` is for processes that only run workers): a call
/// through a reference to an actor that declares an effect this runtime has no handler for
/// is refused with the same configuration error, before it stores an effect that waits for
/// ever.
#[tokio::test]
async fn a_declared_effect_without_a_handler_is_refused_for_an_actor_referenced_after_start() {
    let (_harness, runtime) = started_on_system_time(|builder| {
        builder.effect(|_: Telegram, _: EffectContext| async { Ok(()) })
    })
    .await;
    let called = runtime
        .reference::<Correspondent>("later")
        .write_home()
        .await;
    let drained = runtime.testing().drain().await.unwrap();
    runtime.close().await;
    assert!(
        matches!(&called, Err(solid_objects::Error::Config(message)) if message.contains("postcard")),
        "a call through an actor that declares an effect with no handler here heard {called:?} \
         (and left {:?} waiting)",
        drained.unhandled_effects
    );
}
