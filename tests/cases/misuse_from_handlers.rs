//! Misuse from handlers and at the edges: what a handler reaches through a
//! reference (a snapshot, a message by key, from one or many turns at once), what an effect
//! handler and a dropped default runtime reach, builders kept past their turn, a panicking
//! policy behind an HTTP endpoint, and an application's own pool left as it was.
//!
//! Every wait is bounded (`tokio::time::timeout`) and nothing sleeps to synchronise. One test
//! sets the process default; the others do not rely on it.

use crate::support;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use axum_core::response::IntoResponse;
use solid_objects::policy::{Denied, Policy, Request};
use solid_objects::prelude::*;
use solid_objects::Builder;
use support::effect_actors::{Charge, Till};
use support::fixtures::{
    application_pool, on_application_pool, sqlite_harness, start_with_policy, started, started_on,
};
use support::{Backend, Harness};
use tokio::sync::mpsc;

/// How long a call that "fails at once" may take here: far more than at once, far less
/// than the timeouts a hang runs into (60 s and more below).
const AT_ONCE: Duration = Duration::from_secs(10);

/// A counter that the handlers here (and misuse's callers) reach for.
#[actor]
#[derive(Default)]
pub(crate) struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    /// Adds `by`; returns the value after it.
    #[command]
    pub(crate) fn add(&mut self, by: u32) -> u32 {
        self.value += by;
        self.value
    }

    /// The value.
    #[query]
    pub(crate) fn value(&self) -> u32 {
        self.value
    }
}

/// The runtime each handler-side test reaches for, as an application keeps it in a global;
/// one per test, since tests run in parallel.
static SNAPSHOT_RUNTIME: OnceLock<Runtime> = OnceLock::new();
static KEYED_RUNTIME: OnceLock<Runtime> = OnceLock::new();
static SPAWNING_RUNTIME: OnceLock<Runtime> = OnceLock::new();
static ADVICE_RUNTIME: OnceLock<Runtime> = OnceLock::new();

#[actor]
#[derive(Default)]
struct Auditor {}

#[actor]
impl Auditor {
    /// Reads another actor's committed state from inside a handler.
    #[command]
    async fn audit_snapshot(&mut self) -> String {
        let runtime = SNAPSHOT_RUNTIME.get().expect("the runtime");
        match runtime.reference::<Counter>("other").snapshot().await {
            Ok(counter) => format!("read {}", counter.value),
            Err(error) => format!("{error:?}"),
        }
    }

    /// Looks a message up by its key from inside a handler.
    #[command]
    async fn audit_key(&mut self) -> String {
        let runtime = KEYED_RUNTIME.get().expect("the runtime");
        match runtime
            .reference::<Counter>("other")
            .message_with_key("k")
            .await
        {
            Ok(found) => format!("found {}", found.is_some()),
            Err(error) => format!("{error:?}"),
        }
    }

    /// Calls another actor from a task it spawns and awaits (a handler that fans work out
    /// to a task, or that hands it to a library that does).
    #[command]
    async fn audit_in_a_task(&mut self) -> String {
        let runtime = SPAWNING_RUNTIME.get().expect("the runtime").clone();
        let task = tokio::spawn(async move { runtime.reference::<Counter>("other").add(1).await });
        match task.await.expect("the task ran") {
            Ok(value) => format!("it ran: {value}"),
            Err(error) => format!("{error:?}"),
        }
    }

    /// A query and a wait from inside a handler: both are refused; what does the error say
    /// to do instead?
    #[command]
    async fn ask_and_wait(&mut self) -> (String, String) {
        let runtime = ADVICE_RUNTIME.get().expect("the runtime");
        let counter = runtime.reference::<Counter>("other");
        let asked = match counter.value().await {
            Ok(value) => format!("it ran: {value}"),
            Err(error) => error.to_string(),
        };
        let queued = QUEUED.get().expect("a queued message");
        let waited = match queued.wait(Duration::from_secs(1)).await {
            Ok(value) => format!("it ran: {value}"),
            Err(error) => error.to_string(),
        };
        (asked, waited)
    }
}

static QUEUED: OnceLock<MessageRef<u32>> = OnceLock::new();

/// On SQLite, a fresh harness and a runtime on the application's own SQLite pool of one
/// connection, as `Builder::sqlite_pool` recommends ("a pool of one connection serves turns
/// best"), which is also put in `for_handlers` for the handlers to reach; on the other
/// backends `None`, after saying why the case skips.
async fn started_on_a_pool_of_one(for_handlers: &OnceLock<Runtime>) -> Option<(Harness, Runtime)> {
    let harness = sqlite_harness("the application's own pool of one is a SQLite pool")?;
    let pool = application_pool(&harness, 1, None).await;
    let runtime = start_for_handlers(on_application_pool(&harness, pool), for_handlers).await;
    Some((harness, runtime))
}

/// Starts `builder` with call and turn timeouts far past the hangs these cases wait for
/// (120 s), and puts the runtime in `for_handlers` for the handlers to reach.
async fn start_for_handlers(builder: Builder, for_handlers: &OnceLock<Runtime>) -> Runtime {
    let runtime = builder
        .sync_timeout(Duration::from_secs(120))
        .turn_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap();
    for_handlers.set(runtime.clone()).unwrap();
    runtime
}

/// Checks that `audit`, a handler's `read` of its own runtime, answers at once (it does not
/// wait for the connection its own turn holds), with `answer` or a refusal that names
/// `CalledFromHandler`.
async fn answers_at_once(
    audit: impl Future<Output = solid_objects::Result<String>>,
    read: &str,
    answer: &str,
) {
    let said = tokio::time::timeout(AT_ONCE, audit)
        .await
        .unwrap_or_else(|_| {
            panic!("{read} from inside a handler waited for the connection its own turn holds")
        })
        .unwrap();
    assert!(
        said == answer || said.contains("CalledFromHandler"),
        "{said}"
    );
}

/// A snapshot from inside a handler is refused at once: on a runtime over a pool of one
/// connection (the setting `Builder::sqlite_pool` recommends) the turn holds that
/// connection, and a read that waited for it would wait for its own turn.
#[tokio::test]
async fn a_snapshot_from_inside_a_handler_does_not_wait_for_its_own_turn() {
    let Some((_harness, runtime)) = started_on_a_pool_of_one(&SNAPSHOT_RUNTIME).await else {
        return;
    };

    let auditor = runtime.reference::<Auditor>("a");
    answers_at_once(auditor.audit_snapshot(), "snapshot()", "read 0").await;
    runtime.close().await;
}

/// The same for `message_with_key(..)`.
#[tokio::test]
async fn message_with_key_from_inside_a_handler_does_not_wait_for_its_own_turn() {
    let Some((_harness, runtime)) = started_on_a_pool_of_one(&KEYED_RUNTIME).await else {
        return;
    };
    let counter = runtime.reference::<Counter>("other");
    counter.idempotency_key("k").add(1).await.unwrap();

    let auditor = runtime.reference::<Auditor>("a");
    answers_at_once(auditor.audit_key(), "message_with_key()", "found true").await;
    runtime.close().await;
}

/// The refusal of a query or a `MessageRef::wait` made from a handler names code that exists
/// (a sender has one method per command: a query or `wait` cannot be sent).
#[tokio::test]
async fn the_fix_a_refusal_names_is_code_that_exists() {
    let (_harness, runtime) = started().await;
    ADVICE_RUNTIME.set(runtime.clone()).unwrap();
    let counter = runtime.reference::<Counter>("other");
    let queued = counter.enqueue().add(1).await.unwrap();
    QUEUED.set(queued).unwrap();

    let (asked, waited) =
        tokio::time::timeout(AT_ONCE, runtime.reference::<Auditor>("a").ask_and_wait())
            .await
            .expect("refused at once")
            .unwrap();

    assert!(asked.contains("turn.send"), "{asked}");
    assert!(
        !asked.contains("turn.send::<Counter>(id).value(..)"),
        "the advice for a query names a method no sender has: {asked}"
    );
    assert!(
        !waited.contains("turn.send::<Counter>(id).wait(..)"),
        "the advice for a wait names a method no sender has: {waited}"
    );
    runtime.close().await;
}

/// A runtime's own effect handler, run by that runtime's workers, reaches that runtime with
/// the generated `Counter::reference(id)`, whatever the process default is: workers and
/// effects run inside their runtime's scope, as `testing().run_effects()` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtimes_own_effect_handler_reaches_that_runtime() {
    let harness = Harness::new();
    let (reached, mut answers) = mpsc::unbounded_channel();
    let runtime = harness
        .store()
        .await
        .policy(AllowAll)
        .effect(move |_: Charge, _context: EffectContext| {
            let reached = reached.clone();
            async move {
                let answer = Counter::reference("c").add(1).await;
                let _ = reached.send(answer.map_err(|error| format!("{error:?}")));
                Ok::<(), Failure>(())
            }
        })
        .start()
        .await
        .unwrap();

    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.scope(runtime.run()).await }
    });
    runtime
        .scope(async { Till::reference("t").ring_up("ping").await })
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(20), answers.recv())
        .await
        .expect("the workers ran the effect")
        .expect("an answer");

    let counter = runtime.reference::<Counter>("c");
    let own = counter.snapshot().await.unwrap().value;
    runtime.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(20), workers).await;
    runtime.close().await;
    assert_eq!((answer, own), (Ok(1), 1));
}

/// The body of a response, as JSON.
async fn body_of(response: axum_core::response::Response) -> (u16, serde_json::Value) {
    use futures_util::StreamExt;
    let status = response.status().as_u16();
    let mut stream = response.into_body().into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// A policy with a bug: it panics, and its panic message holds what it was looking at.
struct BuggyPolicy;

impl Policy for BuggyPolicy {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        panic!("tenant lookup failed: postgres://policy:hunter2@10.0.0.7/tenants");
    }

    fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied> {
        self.authorize_message(request)
    }
}

/// With the `axum` feature, a policy that panics is a denial whose text says nothing of the
/// panic (here a connection string with its password): that goes to the server's log.
#[tokio::test]
async fn a_panicking_policy_leaks_nothing_into_the_http_response() {
    let harness = Harness::new();
    let runtime = start_with_policy(&harness, BuggyPolicy).await;

    let error = runtime
        .reference::<Counter>("c")
        .add(1)
        .await
        .expect_err("a panicking policy denies");
    let (status, body) = body_of(error.into_response()).await;

    runtime.close().await;
    let text = body.to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("panicked"),
        "{status}: {text}"
    );
}

/// A rejection's 409 body always has `code`, `message` and `details` (null without details).
#[tokio::test]
async fn a_rejection_response_always_has_code_message_and_details() {
    let (_harness, runtime) = started().await;
    let error = Error::Rejected(Rejection::new("room_not_found", "No room 12").unwrap());

    let (status, body) = body_of(error.into_response()).await;

    runtime.close().await;
    assert_eq!(status, 409);
    let fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["code", "details", "message"], "{body}");
}

/// A runtime on an application's own SQLite pool leaves its connections' busy timeout as
/// the application set it (the runtime bounds its waits by `busy_timeout` only on the
/// connections it opens).
#[tokio::test]
async fn a_runtime_leaves_the_applications_sqlite_connections_as_it_found_them() {
    let Some(harness) = sqlite_harness("the application's own pool is a SQLite pool") else {
        return;
    };
    let pool = application_pool(&harness, 1, Some(Duration::from_secs(5))).await;
    let before: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    let builder = on_application_pool(&harness, pool.clone());
    let runtime = builder.start().await.unwrap();

    let _ = runtime
        .reference::<Counter>("c")
        .timeout(Duration::from_millis(1))
        .add(1)
        .await;
    runtime.close().await;

    let after: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(before, 5000);
    assert_eq!(
        after, before,
        "the runtime left the application's connection with busy_timeout = {after} ms"
    );
}

/// A runtime started with `Builder::set_default()` is reached by `Actor::reference(id)` even
/// when the caller keeps no handle: the process default keeps its runtime alive.
///
/// This test sets the process default; the others here do not rely on it.
#[tokio::test]
async fn a_runtime_started_as_the_default_is_reached_by_reference() {
    let harness = Harness::new();
    harness.builder().await.set_default().start().await.unwrap();

    let added = Counter::reference("started-as-default").add(1).await;

    assert!(matches!(added, Ok(1)), "{added:?}");
}

static ESCAPED: std::sync::Mutex<Option<CounterSender>> = std::sync::Mutex::new(None);

#[actor]
#[derive(Default)]
struct Notifier {}

#[actor]
impl Notifier {
    /// Keeps the sender to use once some outside work is done (a task, a callback).
    #[command]
    fn notify_later(&mut self, turn: &mut Turn<Self>) {
        *ESCAPED.lock().unwrap() = Some(turn.send::<Counter>("notified"));
    }
}

/// A builder kept past its turn (the builders hold no borrow of the turn, so one can be
/// moved into a task) cannot stage into nothing: using it panics with what to do instead.
#[tokio::test]
async fn a_send_staged_after_its_turn_is_never_silently_dropped() {
    let (_harness, runtime, notifier) = started_on::<Notifier>("n").await;
    notifier.notify_later().await.unwrap();

    let sender = ESCAPED.lock().unwrap().take().expect("the handler kept it");
    let staged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sender.add(1)));
    runtime.testing().drain().await.unwrap();
    let counter = runtime.reference::<Counter>("notified");
    let delivered = counter.snapshot().await.unwrap().value;

    runtime.close().await;
    assert!(
        staged.is_err() || delivered == 1,
        "add(1) was staged after the turn: it neither arrived nor failed"
    );
}

static POOL_RUNTIME: OnceLock<Runtime> = OnceLock::new();
static POOL_TOGETHER: std::sync::LazyLock<tokio::sync::Barrier> =
    std::sync::LazyLock::new(|| tokio::sync::Barrier::new(2));

#[actor]
#[derive(Default)]
struct Reporter {}

#[actor]
impl Reporter {
    /// Reads another actor's committed state, once the other report's turn is running too.
    #[command]
    async fn report(&mut self) -> String {
        let _ = tokio::time::timeout(Duration::from_secs(5), POOL_TOGETHER.wait()).await;
        let runtime = POOL_RUNTIME.get().expect("the runtime");
        match runtime.reference::<Counter>("other").snapshot().await {
            Ok(counter) => format!("read {}", counter.value),
            Err(error) => format!("{error:?}"),
        }
    }
}

/// On a server each turn holds one pooled connection while its handler runs: two turns at
/// once on a pool of two hold both, so a snapshot from either handler that waited for a
/// connection would wait for the turns themselves. Both are refused at once instead. (SQLite
/// has no pool of that size to starve.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_from_handlers_on_a_server_do_not_starve_the_pool_their_turns_hold() {
    let harness = Harness::new();
    let url = match harness.backend() {
        Backend::Sqlite => return,
        Backend::Postgres | Backend::MariaDb => harness.url().await,
    };
    let builder = if harness.backend() == Backend::Postgres {
        Runtime::builder().postgres(url, 2)
    } else {
        Runtime::builder().mysql(url, 2)
    };
    let runtime = start_for_handlers(builder.policy(AllowAll), &POOL_RUNTIME).await;

    let reports = ["r-1", "r-2"].map(|id| {
        let reporter = runtime.reference::<Reporter>(id);
        tokio::spawn(async move { reporter.report().await })
    });
    let both = tokio::time::timeout(AT_ONCE, async {
        let mut said = Vec::new();
        for report in reports {
            said.push(report.await.expect("the task ran").unwrap());
        }
        said
    })
    .await;

    let said = both.expect("two handlers' snapshots waited for the connections their turns hold");
    for answer in said {
        assert!(
            answer.starts_with("CalledFromHandler"),
            "a handler reads other actors by messages, and is told so at once: {answer}"
        );
    }
    runtime.shutdown();
}

/// A charge that fails on its first attempt (the bank timed out) and succeeds on its retry.
#[actor]
#[derive(Default)]
struct Charger {
    charged: u32,
}

#[actor]
impl Charger {
    #[command]
    fn charge(&mut self, turn: &mut Turn<Self>) -> Result<u32, Failure> {
        if turn.attempt() == 1 {
            return Err(Failure::retryable("the bank timed out"));
        }
        self.charged += 1;
        Ok(self.charged)
    }
}

/// A call whose first attempt failed is committed and retried later (HandlerFailed with a
/// retry_at and a request id): through axum it must not be a bare 500 "internal error",
/// which tells the HTTP client nothing was kept, so it sends the request again and the
/// charge runs twice. The response names the queued message, as Queued's 202 does.
#[tokio::test]
async fn a_failed_call_to_be_retried_names_its_queued_message_in_the_http_response() {
    let (_harness, runtime) = started().await;
    let error = runtime
        .reference::<Charger>("card")
        .charge()
        .await
        .expect_err("the first attempt fails");
    let request_id = error
        .queued_request_id()
        .expect("the failed attempt is committed and retried")
        .to_owned();
    assert!(runtime.message(&request_id).await.unwrap().is_some());

    let (status, body) = body_of(error.into_response()).await;

    runtime.close().await;
    assert!(
        status != 500 && body["request_id"] == request_id.as_str(),
        "a committed, queued call answers {status} naming no message: {body}"
    );
}

/// A call whose message is queued but whose wait ended on a database error is Queued (202):
/// its body must leak no more than a bare database error's 500 does ("internal error"), but
/// its message is the error's whole text, reason included.
#[tokio::test]
async fn a_queued_response_leaks_nothing_of_a_database_error() {
    let internal = "connection to 10.0.0.7:5432 refused for role app_owner";
    let database = || Error::Database(sqlx::Error::Protocol(internal.to_owned()));
    let (status, body) = body_of(database().into_response()).await;
    assert_eq!(status, 500);
    assert!(!body.to_string().contains("10.0.0.7"), "{body}");

    let queued = Error::Queued {
        actor_type: "Counter",
        actor_id: "c".to_owned(),
        operation: "add",
        message_id: 7,
        request_id: "r-7".to_owned(),
        reason: Box::new(database()),
    };
    let (status, body) = body_of(queued.into_response()).await;
    assert_eq!(status, 202);
    assert!(
        !body.to_string().contains("10.0.0.7"),
        "the 202 body leaks the database error: {body}"
    );
}

/// A call that timed out after its message was committed (SyncTimeout naming a request id)
/// is still queued and runs later; a 504 `timeout` tells an HTTP client to try again, and its
/// body carries no `request_id` to look the message up by (only prose, which also tells a
/// web client to call `runtime.message`).
#[tokio::test]
async fn a_timed_out_call_whose_message_is_queued_names_it_in_the_http_response() {
    let timed_out = Error::SyncTimeout {
        actor_type: "Counter",
        actor_id: "c".to_owned(),
        operation: "add",
        message_id: Some(7),
        request_id: Some(Box::new("r-7".to_owned())),
        waiting_on: "the actor".to_owned(),
        timeout: Duration::from_secs(5),
    };
    assert_eq!(timed_out.queued_request_id(), Some("r-7"));

    let (status, body) = body_of(timed_out.into_response()).await;

    assert!(
        body["request_id"] == "r-7",
        "a queued call's {status} response has no request_id: {body}"
    );
}
