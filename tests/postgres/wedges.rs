//! Nothing wedges on PostgreSQL: an upgraded database keeps its delayed messages waiting,
//! callers' deadlines bound their waits in the server, NUL bytes in error texts and huge
//! effect leases are stored, and callers that give up leave no session waiting. The cases of
//! tests/cases/wedges.rs that only PostgreSQL's store can show; they share that file's actors
//! and gates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use solid_objects::MessageStatus;
use solid_objects::Workers;

use crate::cases::wedges::{ran, runs};
use crate::support::counter::{the_previous_builds_delayed_message_waits, Counter};
use crate::support::effect_actors::{Charge, Till};
use crate::support::gates::gate;
use crate::support::operator::dead_effects;
use crate::support::runtimes::{builder, runtime as postgres_runtime};
use crate::support::workers::within;
use crate::support::{eventually, previous_build_rows, Backend, Harness};

/// Past any backoff of the default retry policy.
const PAST_BACKOFF: Duration = Duration::from_secs(3600);

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

/// A builder on `url` with `connections` and `clock`, allowing every call.
fn postgres_builder(url: &str, connections: u32, clock: &ManualClock) -> solid_objects::Builder {
    builder(url, connections)
        .clock(clock.clone())
        .policy(AllowAll)
}

/// Calls `touch` on `sloth` four times at once: every connection of a pool of four in use
/// at once, then idle in the pool.
async fn touch_with_every_connection(sloth: &<Sloth as solid_objects::Addressable>::Reference) {
    let warm: Vec<_> = (0..4).map(|_| sloth.touch()).collect();
    for touched in futures_util::future::join_all(warm).await {
        touched.unwrap();
    }
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
    let applied = format!(
        "INSERT INTO solid_schema_migrations (version, description) VALUES (1, 'actors');
         INSERT INTO solid_schema_migrations (version, description) VALUES (2, 'effects');
         {}",
        previous_build_rows(now, later)
    );
    for sql in [
        "CREATE TABLE solid_schema_migrations (
             version BIGINT PRIMARY KEY, description TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        include_str!("../../migrations/postgres/0001_actors.sql"),
        include_str!("../../migrations/postgres/0002_effects.sql"),
        &applied,
    ] {
        sqlx::raw_sql(sql).execute(&old).await.unwrap();
    }
    old.close().await;

    the_previous_builds_delayed_message_waits(postgres_runtime(&url, 4, &clock).await).await;
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
    let batch = postgres_builder(&url, 4, &clock)
        .turn_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    // A web process with a short turn timeout and a patient caller.
    let web = postgres_builder(&url, 4, &clock)
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
    let runtime = postgres_builder(&url, 4, &ManualClock::starting_now())
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
    let dead = dead_effects(&runtime).await;
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
    let runtime = postgres_builder(&url, 4, &ManualClock::starting_now())
        .workers(Workers::default().effect_lease(Duration::MAX))
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

/// The pool hands out a connection it used a moment ago without pinging it first (a round
/// trip per turn saved): when the server ended every session of the runtime meanwhile (a
/// restart, a failover, an operator's `pg_terminate_backend`), the next call's BEGIN meets a
/// closed connection, which has done nothing yet, and the call begins again on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_the_server_ended_the_pools_sessions_begins_on_a_new_connection() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&url, 4, &clock).await;
    let sloth = runtime.reference::<Sloth>("restarted");
    // Every connection of the pool in use at once, then idle in the pool.
    touch_with_every_connection(&sloth).await;
    end_the_runtimes_sessions(&url).await;

    assert_eq!(sloth.touch().await.unwrap(), 5);
    assert_eq!(sloth.touched().await.unwrap(), 5);
    runtime.close().await;
}

/// Ends every session the runtime holds on the server (as a restart, a failover or an
/// operator's `pg_terminate_backend` would) and waits until the server has ended them.
async fn end_the_runtimes_sessions(url: &str) {
    let observer = sqlx::PgPool::connect(url).await.unwrap();
    let sessions: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND backend_type = 'client backend'",
    )
    .fetch_all(&observer)
    .await
    .unwrap();
    assert!(!sessions.is_empty(), "the runtime had no session to end");
    for pid in &sessions {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&observer)
            .await
            .unwrap();
    }
    let gone = eventually(Duration::from_secs(10), || {
        let (observer, sessions) = (observer.clone(), sessions.clone());
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ANY($1)",
            )
            .bind(sessions)
            .fetch_one(&observer)
            .await
            .unwrap()
                == 0
        }
    })
    .await;
    assert!(gone, "the server did not end the runtime's sessions");
    observer.close().await;
}

/// The pool no longer pings a connection used a moment ago, and only a transaction's BEGIN
/// begins again on another connection when its own turns out lost: a read outside any
/// transaction (an actor's snapshot, a queued message's result) right after the server
/// ended the pool's sessions meets a closed connection too, and must not hand the caller a
/// database error for a read that could run on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_the_server_ended_the_pools_sessions_reads_on_a_new_connection() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&url, 4, &clock).await;
    let sloth = runtime.reference::<Sloth>("restarted-read");
    let queued = sloth.enqueue().touch().await.unwrap();
    runtime.testing().drain().await.unwrap();
    // Every connection of the pool in use at once, then idle in the pool.
    let warm: Vec<_> = (0..4).map(|_| sloth.snapshot()).collect();
    for read in futures_util::future::join_all(warm).await {
        read.unwrap();
    }
    end_the_runtimes_sessions(&url).await;

    let snapshot = sloth.snapshot().await.map(|state| state.touched);
    let result = queued.result().await;
    runtime.close().await;

    assert!(
        matches!(snapshot, Ok(1)) && matches!(result, Ok(Some(1))),
        "after the server ended the pool's sessions, a snapshot read {snapshot:?} and a \
         queued message's result read {result:?}"
    );
}

/// Ends its own database session from its own SQL (as an operator's `pg_terminate_backend`
/// of a runaway session, or a server-side `idle_in_transaction_session_timeout`, would):
/// the handler fails with a lost connection, every time, long before any `COMMIT`.
#[actor(max_attempts = 3)]
#[derive(Default)]
struct SelfTerminator {}

#[actor]
impl SelfTerminator {
    #[command]
    async fn end_own_session(&mut self, turn: &mut Turn<Self>) -> Result<(), TurnError> {
        ran(&format!("end-own-session:{}", turn.actor_id()));
        sqlx::query("SELECT pg_terminate_backend(pg_backend_pid())")
            .execute(turn.postgres().await?)
            .await?;
        Ok(())
    }
}

/// A connection lost inside a handler's own SQL, before its turn sent `COMMIT`, leaves
/// nothing in doubt: nothing of the turn can have committed, so the attempt counts, and a
/// message whose handler loses its connection on every attempt is dead after its
/// `max_attempts` (3), not run again uncounted for ever (a drain that never ends, a worker
/// that spins on one actor). Takes about a second on a working runtime; 30 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_loses_its_connection_on_every_attempt_is_dead_after_its_attempts() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&url, 4, &clock).await;
    let queued = runtime
        .reference::<SelfTerminator>("queued")
        .enqueue()
        .end_own_session()
        .await
        .unwrap();
    let mut drains = Vec::new();
    for _ in 0..4 {
        let drained = tokio::time::timeout(Duration::from_secs(8), runtime.testing().drain()).await;
        drains.push(drained.is_ok());
        clock.advance(PAST_BACKOFF);
    }
    let status = tokio::time::timeout(Duration::from_secs(10), queued.status()).await;
    let runs = runs("end-own-session:queued");
    within(30, "closing the runtime", runtime.close()).await;
    assert!(
        drains.iter().all(|ended| *ended)
            && runs == 3
            && matches!(status, Ok(Ok(MessageStatus::Dead { attempts: 3, .. }))),
        "a message whose handler loses its connection on every attempt: drains ended {drains:?}, \
         the handler ran {runs} times, the message is {status:?}; want every drain ended, 3 \
         runs, dead after 3 attempts"
    );
}

/// A synchronous call whose handler loses its connection before `COMMIT` hears that its
/// handler failed (its message kept for a retry, as any failed attempt), after one run:
/// not a call whose outcome is "not known" after the handler ran again and again until the
/// caller's deadline, when nothing of any run could have committed. About a second on a
/// working runtime; 3 s deadline, 10 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_handler_loses_its_connection_before_commit_hears_it_failed_after_one_run() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = postgres_runtime(&url, 4, &clock).await;
    let called = tokio::time::timeout(
        Duration::from_secs(10),
        runtime
            .reference::<SelfTerminator>("called")
            .timeout(Duration::from_secs(3))
            .end_own_session(),
    )
    .await;
    let runs = runs("end-own-session:called");
    within(30, "closing the runtime", runtime.close()).await;
    assert!(
        runs == 1 && matches!(called, Ok(Err(Error::HandlerFailed { .. }))),
        "a call whose handler lost its connection before COMMIT ran it {runs} times and \
         heard {called:?}; want one run and HandlerFailed"
    );
}

/// On the application's own pool (`Builder::postgres_pool`), which the runtime neither
/// opened nor checks out with its own hooks: after the server ended every session of the
/// pool, a call, an enqueue and a drain go on on new connections, within the caller's
/// deadline, and the application's pool still answers. A few seconds; 30 s bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_pool_goes_on_after_the_server_ended_its_sessions() {
    let Some((_server, url)) = postgres().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    let runtime = Runtime::builder()
        .postgres_pool(pool.clone())
        .clock(clock.clone())
        .sync_timeout(Duration::from_secs(10))
        .policy(AllowAll)
        .start()
        .await
        .expect("the runtime starts on the application's pool");
    let sloth = runtime.reference::<Sloth>("application-pool");
    touch_with_every_connection(&sloth).await;
    end_the_runtimes_sessions(&url).await;

    let called = within(30, "a call", sloth.touch()).await;
    let enqueued = within(30, "an enqueue", sloth.enqueue().touch()).await;
    let drained = within(30, "a drain", runtime.testing().drain()).await;
    let touched = within(30, "a query", sloth.touched()).await;
    let application: Result<i32, _> = within(
        30,
        "the application's query",
        sqlx::query_scalar("SELECT 1").fetch_one(&pool),
    )
    .await;
    within(30, "closing the runtime", runtime.close()).await;
    pool.close().await;
    assert!(
        matches!(called, Ok(5))
            && enqueued.is_ok()
            && drained.is_ok()
            && matches!(touched, Ok(6))
            && application.is_ok(),
        "after the server ended the application pool's sessions: call {called:?}, enqueue \
         {enqueued:?}, drain {drained:?}, query {touched:?}, the application's own query \
         {application:?}"
    );
}
