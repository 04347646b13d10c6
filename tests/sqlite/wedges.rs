//! Nothing wedges on a SQLite file: a handler stuck in its own query on `turn.sqlite()`
//! frees the writer at the turn timeout, another process holding the file gives a typed
//! timeout (and is waited for until each caller's own deadline), an upgraded file keeps its delayed messages waiting, a stale effect runner
//! cannot overwrite a retried effect, and a newer build's broadcast never starves a ready
//! message. The cases of tests/cases/wedges.rs that only SQLite's store can show; they share
//! that file's actors and gates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use solid_objects::{EffectContext, MessageStatus};

use crate::support::counter::{the_previous_builds_delayed_message_waits, Counter};
use crate::support::effect_actors::{Charge, Till};
use crate::support::fixtures::{started_on, started_with, started_without_fsync, FileHolder};
use crate::support::gates::gate;
use crate::support::operator::dead_effects;
use crate::support::workers::{answered, run_workers, within};
use crate::support::{count, eventually, previous_build_rows, Harness};

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

/// README: "A hung handler is abandoned after the turn timeout: its turn rolls back, its
/// connection is closed ... so one hung handler cannot hold the SQLite writer". A handler
/// busy in its own query on `turn.sqlite()` is abandoned as a future, but nothing
/// interrupts SQLite: the writer connection's thread keeps running the query inside
/// `BEGIN IMMEDIATE`, closing it waits behind the query, and every other actor's turn
/// finds the database locked until the query ends. The attempt is not even counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_stuck_in_its_own_sqlite_query_frees_the_writer_at_the_turn_timeout() {
    let (_harness, runtime) =
        started_with(|builder| builder.turn_timeout(Duration::from_millis(300))).await;
    let grinder = runtime.reference::<Grinder>("g");
    let grinding = grinder.enqueue().grind().await.unwrap();

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

/// The promise: "A second process on the same SQLite file: the busy wait follows the caller's
/// deadline, and the caller gets SyncTimeout, never `database is locked`." An enqueue gets
/// `Error::Database(database is locked)` (engine/call.rs `enqueue` returns a busy error as
/// it is).
#[tokio::test]
async fn an_enqueue_while_another_process_writes_gets_a_typed_timeout_not_database_locked() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    counter.bump().await.unwrap();
    let outsider = FileHolder::take(&harness).await;

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
    outsider.release().await;
    runtime.close().await;

    assert!(
        !matches!(enqueued, Err(Error::Database(_))),
        "a caller got a database error: {enqueued:?}"
    );
}

/// A call with a short timeout leaves a short busy timeout on the writer's connection (the
/// writer sets one only when the connection's would outlast a transaction's bound); a call
/// after it with a long timeout still waits for another process's write lock until that
/// lock is released, well past the short one, and runs. SQLite's busy wait is real time: the
/// other process holds the file until the long call has waited half a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_another_process_until_its_own_deadline_after_a_shorter_call() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    counter.bump().await.unwrap();
    let outsider = FileHolder::take(&harness).await;

    let short = counter
        .clone()
        .timeout(Duration::from_millis(100))
        .bump()
        .await;
    assert!(
        matches!(short, Err(Error::SyncTimeout { .. })),
        "the short call heard {short:?}"
    );
    let long = counter.clone().timeout(Duration::from_secs(30));
    let mut long = tokio::spawn(async move { long.bump().await });
    // Well past the short call's busy timeout, the long call still waits for the file.
    let early = tokio::time::timeout(Duration::from_millis(500), &mut long).await;
    assert!(
        early.is_err(),
        "the long call ended while the other process held the file: {early:?}"
    );
    outsider.release().await;
    let long = within(30, "the long call", long).await.unwrap();
    runtime.close().await;

    assert_eq!(
        long.unwrap(),
        2,
        "the long call gave up before the other process let go"
    );
}

/// Migration 0003 sets `available_at = 0` on every ready message without attempts, to make
/// undelayed messages immune to a clock that steps back; it also releases every message a
/// client enqueued with a delay, which runs at once after the upgrade.
#[tokio::test]
async fn upgrading_a_sqlite_database_keeps_delayed_messages_waiting() {
    let harness = Harness::new();
    let now = harness.clock.now().timestamp_micros();
    let later = now + 3_600_000_000;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(harness.path())
        .create_if_missing(true);
    let old = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let applied = format!(
        "INSERT INTO solid_schema_migrations VALUES (1, 'actors', datetime('now'));
         INSERT INTO solid_schema_migrations VALUES (2, 'effects', datetime('now'));
         {}",
        previous_build_rows(now, later)
    );
    for sql in [
        "CREATE TABLE solid_schema_migrations (
             version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)",
        include_str!("../../migrations/sqlite/0001_actors.sql"),
        include_str!("../../migrations/sqlite/0002_effects.sql"),
        &applied,
    ] {
        sqlx::raw_sql(sql).execute(&old).await.unwrap();
    }
    old.close().await;

    the_previous_builds_delayed_message_waits(harness.start().await).await;
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
    let start = || async {
        harness
            .builder()
            .await
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
    let till = first.reference::<Till>("t");
    till.ring_up("x".to_owned()).await.unwrap();

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
    let dead = dead_effects(&second).await;
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

    let dead = dead_effects(&first).await;
    let done = count(&harness, "solid_effects WHERE status = 'done'").await;
    first.close().await;
    second.close().await;
    assert!(
        dead.is_empty() && done == 1,
        "the retried effect succeeded, but a stale runner's verdict was kept: dead {:?}, done {done}",
        dead.iter().map(|effect| effect.last_error.as_deref().unwrap_or_default()).collect::<Vec<_>>()
    );
}

/// A rolling deploy: a newer build enqueued a new operation for every user (10,150 actors
/// of a type this build knows), and then a ready message arrives for another actor. This
/// build leaves each unknown operation alone, but only after claiming it, and the claim
/// query takes `100 + stalled` heads, oldest first, with the stalled set capped at 10,000
/// entries: once it is full, every pass spends itself on the same unknown heads past the
/// cap, and the ready message behind them is never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_builds_broadcast_never_starves_a_ready_message() {
    let (harness, runtime) = started_without_fsync(|builder| builder.actor::<Counter>()).await;
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
    let counter = runtime.reference::<Counter>("ready");
    let ready = counter.enqueue().bump().await.unwrap();
    let run = run_workers(&runtime);

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
    let served = answered(&ready, Duration::from_secs(10)).await;
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
