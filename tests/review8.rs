//! review8: adversarial tests against issue 8 ("Installable and pleasant"). Each test fails
//! on the code it was written against because of a defect; see the doc comment of each.
//!
//! Every wait is bounded (`tokio::time::timeout`), nothing sleeps to synchronise, and every
//! runtime is on a real SQLite file in a temp dir. No test here sets the process default.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use axum_core::response::IntoResponse;
use serde::{Deserialize, Serialize};
use solid_objects::policy::{Denied, Policy, Request};
use solid_objects::prelude::*;
use support::Harness;
use tokio::sync::mpsc;

/// How long a call that "fails at once" may take here: far more than at once, far less
/// than the timeouts a hang runs into (60 s and more below).
const AT_ONCE: Duration = Duration::from_secs(10);

#[actor]
#[derive(Default)]
struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[command]
    fn add(&mut self, by: u32) -> u32 {
        self.value += by;
        self.value
    }

    #[query]
    fn value(&self) -> u32 {
        self.value
    }
}

// ---------------------------------------------------------------------------------------
// 1. Paths from inside a handler that wait on the handler's own turn and are not refused.
// ---------------------------------------------------------------------------------------

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

/// A runtime on the application's own SQLite pool of one connection, as
/// `Builder::sqlite_pool` recommends ("a pool of one connection serves turns best").
async fn on_a_pool_of_one(harness: &Harness) -> Runtime {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(harness.path())
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    Runtime::builder()
        .sqlite_pool(pool)
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(120))
        .turn_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap()
}

/// Issue 8: "A synchronous call made from inside a handler fails at once with a typed
/// error". `snapshot()` is not refused inside a handler (handler_scope is consulted only by
/// call, enqueue, ask and wait). On a runtime over a pool of one connection (the setting
/// `Builder::sqlite_pool` recommends) the turn holds that connection, so the snapshot waits
/// for the pool until sqlx's acquire timeout (30 s) or the turn timeout: the old trap.
#[tokio::test]
async fn a_snapshot_from_inside_a_handler_does_not_wait_for_its_own_turn() {
    let harness = Harness::new();
    let runtime = on_a_pool_of_one(&harness).await;
    SNAPSHOT_RUNTIME.set(runtime.clone()).unwrap();

    let audited =
        tokio::time::timeout(AT_ONCE, runtime.reference::<Auditor>("a").audit_snapshot()).await;

    let audited = audited
        .expect("snapshot() from inside a handler waited for the connection its own turn holds");
    let said = audited.unwrap();
    assert!(
        said == "read 0" || said.contains("CalledFromHandler"),
        "{said}"
    );
    runtime.close().await;
}

/// The same for `message_with_key(..)`, which the brief lists among the paths that wait on
/// the handler's own turn: not refused, and on a pool of one it waits for the connection
/// the turn holds.
#[tokio::test]
async fn message_with_key_from_inside_a_handler_does_not_wait_for_its_own_turn() {
    let harness = Harness::new();
    let runtime = on_a_pool_of_one(&harness).await;
    KEYED_RUNTIME.set(runtime.clone()).unwrap();
    runtime
        .reference::<Counter>("other")
        .idempotency_key("k")
        .add(1)
        .await
        .unwrap();

    let audited =
        tokio::time::timeout(AT_ONCE, runtime.reference::<Auditor>("a").audit_key()).await;

    let audited = audited.expect(
        "message_with_key() from inside a handler waited for the connection its own turn holds",
    );
    let said = audited.unwrap();
    assert!(
        said == "found true" || said.contains("CalledFromHandler"),
        "{said}"
    );
    runtime.close().await;
}

/// Issue 8: a synchronous call from inside a handler "fails at once with a typed error that
/// says to use `turn.send` (today it waits 5 s ...)". A handler that awaits a task it
/// spawned, where the task makes the call, is that call: the task does not inherit the
/// handler's task-local mark (handler_scope.rs), so the call is not refused and waits for
/// the SQLite writer the turn holds, until its sync timeout.
#[tokio::test]
async fn a_synchronous_call_from_a_task_the_handler_awaits_fails_at_once() {
    let harness = Harness::new();
    let runtime = Runtime::builder()
        .sqlite(harness.path())
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(60))
        .turn_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap();
    SPAWNING_RUNTIME.set(runtime.clone()).unwrap();

    let audited =
        tokio::time::timeout(AT_ONCE, runtime.reference::<Auditor>("a").audit_in_a_task()).await;

    let said = audited
        .expect("the call from the handler's task waited for the turn that runs the handler")
        .unwrap();
    assert!(said.contains("CalledFromHandler"), "{said}");
    runtime.close().await;
}

/// Issue 8: the refusal "says to use `turn.send`". For a query or a `MessageRef::wait` made
/// from a handler, the error tells the user to write `turn.send::<Counter>(id).value(..)`
/// and `turn.send::<Counter>(id).wait(..)`: neither exists (a sender has one method per
/// command; ui-tests/fail/send_a_reminder.rs shows what calling a non-command on it gives).
/// error.rs formats every refusal as a send of `operation`, whatever the operation is.
#[tokio::test]
async fn the_fix_a_refusal_names_is_code_that_exists() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    ADVICE_RUNTIME.set(runtime.clone()).unwrap();
    let queued = runtime
        .reference::<Counter>("other")
        .enqueue()
        .add(1)
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------
// 2. The default runtime: a runtime's own effect handlers cannot reach it by `reference`.
// ---------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Ping {}

impl Effect for Ping {
    const NAME: &'static str = "review8_ping";
}

#[actor]
#[derive(Default)]
struct Pinger {}

#[actor]
impl Pinger {
    #[command]
    fn ping(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Ping {});
    }
}

/// Issue 8: "which runtime it reaches must never surprise ... a scoped override for a task
/// (`runtime.scope(fut)`) that tests can use in parallel". A runtime's own effect handler,
/// run by that runtime's workers, that reaches an actor with the generated
/// `Counter::reference(id)` reaches no runtime (NoRuntime) here, or whichever runtime
/// another test made the process default; and no API can scope it: the workers and each
/// effect are `tokio::spawn`ed (runtime.rs `spawn_worker`, effect.rs `start_due`), so even
/// `runtime.scope(runtime.run())` does not carry over. The same handler run by
/// `runtime.testing().run_effects()` inside the scope reaches the runtime, so a test
/// passes where production fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtimes_own_effect_handler_reaches_that_runtime() {
    let harness = Harness::new();
    let (reached, mut answers) = mpsc::unbounded_channel();
    let runtime = Runtime::builder()
        .sqlite(harness.path())
        .policy(AllowAll)
        .effect(move |_: Ping, _context: EffectContext| {
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
        .scope(async { Pinger::reference("p").ping().await })
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(20), answers.recv())
        .await
        .expect("the workers ran the effect")
        .expect("an answer");

    let own = runtime
        .reference::<Counter>("c")
        .snapshot()
        .await
        .unwrap()
        .value;
    runtime.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(20), workers).await;
    runtime.close().await;
    assert_eq!((answer, own), (Ok(1), 1));
}

// ---------------------------------------------------------------------------------------
// 3. Rejection codes: `Rejection::new` checks them, the struct literal does not.
// ---------------------------------------------------------------------------------------

#[actor]
#[derive(Default)]
struct Hotel {}

#[actor]
impl Hotel {
    #[command]
    fn book(&mut self, room: u32) -> Result<u32, Rejection> {
        Err(Rejection {
            code: "room not found".to_owned(),
            message: format!("No room {room}"),
            details: None,
        })
    }
}

/// Issue 8: "`Rejection::new`, the public constructor, checks the code as `reject!` does
/// (a snake_case identifier) and refuses others; today `Rejection::new("room not found",
/// ..)` is stored as is." Rejection's fields are all `pub` and it is not `#[non_exhaustive]`
/// (error.rs), so `Rejection { code: "room not found".into(), .. }` is a public constructor
/// too, and that code is still committed and handed to callers as is.
#[tokio::test]
async fn a_rejection_code_that_is_not_snake_case_is_never_stored() {
    let harness = Harness::new();
    let runtime = harness.start().await;

    let booked = runtime.reference::<Hotel>("h").book(12).await;

    runtime.close().await;
    match booked {
        Err(Error::Rejected(rejection)) => assert!(
            rejection
                .code
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "a rejection with the code {:?} was committed and returned",
            rejection.code
        ),
        other => panic!("expected the booking to be refused somehow, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// 4. Error as an axum response.
// ---------------------------------------------------------------------------------------

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

/// Issue 8: with the `axum` feature, errors map to statuses "without leaking internals". A
/// policy that panics is an internal failure, yet it becomes `Unauthorized` with the reason
/// "the policy panicked: <panic text>" (reference.rs `authorize`), and the 403 body's
/// message is `error.to_string()` (axum_response.rs `brief`): the panic text, here a
/// connection string with its password, goes to the HTTP client.
#[tokio::test]
async fn a_panicking_policy_leaks_nothing_into_the_http_response() {
    let harness = Harness::new();
    let runtime = Runtime::builder()
        .sqlite(harness.path())
        .policy(BuggyPolicy)
        .start()
        .await
        .unwrap();

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

/// Issue 8: "rejected 409 with `{code, message, details}`" (and axum_response.rs's own table
/// says the body is `{"code", "message", "details"}`). A rejection without details has no
/// `details` field at all (`#[serde(skip_serializing_if = "Option::is_none")]` on
/// Rejection), so a client that reads `details` finds it missing rather than null.
#[tokio::test]
async fn a_rejection_response_always_has_code_message_and_details() {
    let harness = Harness::new();
    let runtime = harness.start().await;
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

// ---------------------------------------------------------------------------------------
// 5. An application's own SQLite pool is changed by the runtime.
// ---------------------------------------------------------------------------------------

/// Issue 8: `Runtime::builder().sqlite_pool(pool)` accepts "an application's existing sqlx
/// pool". Every write transaction the runtime begins runs `PRAGMA busy_timeout = <time left
/// to the caller's deadline>` on the application's connection (sqlite.rs `begin`) and never
/// puts it back: after one call with a short timeout, the application's own statements on
/// that connection give up on another process's lock within a millisecond instead of the 5
/// s the application configured.
#[tokio::test]
async fn a_runtime_leaves_the_applications_sqlite_connections_as_it_found_them() {
    let harness = Harness::new();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(harness.path())
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let before: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    let runtime = Runtime::builder()
        .sqlite_pool(pool.clone())
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .unwrap();

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

// ---------------------------------------------------------------------------------------
// 6. The default runtime a builder sets is gone with the handle `start()` returned.
// ---------------------------------------------------------------------------------------

/// Issue 8: "which runtime it reaches must never surprise". `Builder::set_default()` says:
/// "Makes the runtime the process default once it starts: `Actor::reference(id)` then
/// reaches it." The process default is a weak handle (default_runtime.rs `DEFAULT`), which
/// no public doc says: an application that starts its runtime with `.set_default()` and
/// keeps no handle, because it only ever calls `Counter::reference(id)` (what set_default
/// is for), finds no runtime at the very next call.
///
/// This test sets the process default; the others here do not rely on it (the effect test
/// checks its own runtime's state).
#[tokio::test]
async fn a_runtime_started_as_the_default_is_reached_by_reference() {
    let harness = Harness::new();
    Runtime::builder()
        .sqlite(harness.path())
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .set_default()
        .start()
        .await
        .unwrap();

    let added = Counter::reference("started-as-default").add(1).await;

    assert!(matches!(added, Ok(1)), "{added:?}");
}

// ---------------------------------------------------------------------------------------
// 7. A builder that outlives its turn stages into nothing, silently.
// ---------------------------------------------------------------------------------------

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

/// Issue 8 made the builders hold no borrow of the turn (turn.rs `Staging`, an `Arc` the
/// builder shares with the turn). Before, a sender could not outlive its turn; now it is
/// `'static + Send`, so it can be kept or moved into a task, and a command staged through
/// it after the turn committed goes into an outbox nobody reads: no message, no error, no
/// panic. `Turn` promises "Everything staged commits in the turn's transaction, or not at
/// all (a rejection or a failure discards it)"; this one is neither committed nor refused.
#[tokio::test]
async fn a_send_staged_after_its_turn_is_never_silently_dropped() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    runtime
        .reference::<Notifier>("n")
        .notify_later()
        .await
        .unwrap();

    let sender = ESCAPED.lock().unwrap().take().expect("the handler kept it");
    let staged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sender.add(1)));
    runtime.testing().drain().await.unwrap();
    let delivered = runtime
        .reference::<Counter>("notified")
        .snapshot()
        .await
        .unwrap()
        .value;

    runtime.close().await;
    assert!(
        staged.is_err() || delivered == 1,
        "add(1) was staged after the turn: it neither arrived nor failed"
    );
}

// ---------------------------------------------------------------------------------------
// 8. The same on the real PostgreSQL server: turns that read from inside their handlers
//    starve the pool their own turns hold.
// ---------------------------------------------------------------------------------------

static PG_RUNTIME: OnceLock<Runtime> = OnceLock::new();
static PG_TOGETHER: std::sync::LazyLock<tokio::sync::Barrier> =
    std::sync::LazyLock::new(|| tokio::sync::Barrier::new(2));

#[actor]
#[derive(Default)]
struct Reporter {}

#[actor]
impl Reporter {
    /// Reads another actor's committed state, once the other report's turn is running too.
    #[command]
    async fn report(&mut self) -> String {
        let _ = tokio::time::timeout(Duration::from_secs(5), PG_TOGETHER.wait()).await;
        let runtime = PG_RUNTIME.get().expect("the runtime");
        match runtime.reference::<Counter>("other").snapshot().await {
            Ok(counter) => format!("read {}", counter.value),
            Err(error) => format!("{error:?}"),
        }
    }
}

/// Issue 8's refusal covers calls, enqueues, queries and waits, not `snapshot()` (nor
/// `message_with_key`). On PostgreSQL each turn holds one pooled connection while its
/// handler runs; two turns of two actors at once on a pool of two (`postgres(url, 2)`)
/// hold both, and each handler's snapshot then waits for a connection (the runtime's pool
/// waits up to an hour, postgres.rs `acquire_timeout`) until the turn timeout abandons both
/// turns: the "waits on its own turn" trap, at the scale of the pool. The same happens with
/// the default 16 connections under 16 concurrent turns. (With `postgres(url, 3)` this test
/// passes: the reads themselves are fine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_from_handlers_on_postgres_do_not_starve_the_pool_their_turns_hold() {
    let Some(server) = support::postgres::PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let runtime = Runtime::builder()
        .postgres(url, 2)
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(120))
        .turn_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap();
    PG_RUNTIME.set(runtime.clone()).unwrap();

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
    assert_eq!(said, ["read 0", "read 0"]);
    runtime.shutdown();
}
