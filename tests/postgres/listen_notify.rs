//! PostgreSQL's LISTEN/NOTIFY wake-up: the listening connection comes back when it is
//! killed, a runtime of one connection still runs calls while it listens, and a resume wakes
//! idle workers (that a commit in one process wakes another's is a case of
//! tests/servers/several_runtimes.rs, on both servers).

use std::time::Duration;

use crate::administration::{ana, Postgres};
use crate::support::desk::Desk;
use crate::support::eventually;
use crate::support::runtimes::{completes, noticed_beyond, stop_workers};
use crate::support::workers::run_workers;

/// Promise: while `run` runs, one connection listens and idle workers wake on
/// commits; the builder accepts any number of connections from 1. With `postgres(url, 1)`
/// the listener must not take the only connection and starve every turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_one_connection_postgres_runtime_still_runs_calls_while_run_listens() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db
        .builder(1)
        .sync_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let running = run_workers(&runtime);
    db.assert_one_listens("the runtime listens").await;
    let added = tokio::time::timeout(
        Duration::from_secs(20),
        runtime.reference::<Desk>("d1").add(1),
    )
    .await
    .expect("the call ends");
    stop_workers(&runtime, running).await;
    assert_eq!(
        added.as_ref().ok(),
        Some(&1),
        "a call on a 1-connection runtime while run() listens: {added:?}"
    );
}

/// Promise: the LISTEN relay reconnects by itself. Its connection killed by the
/// server (`pg_terminate_backend`, a failover, an idle-connection reaper), a commit in
/// another process must still reach the idle workers as a notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_listen_connection_comes_back_and_notices_flow_again() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let caller = db.builder(2).start().await.unwrap();
    let (workers, running) = db.idle_listening_workers().await;
    let first = db
        .scalar(
            "SELECT MIN(pid)::BIGINT FROM pg_stat_activity \
             WHERE query LIKE 'LISTEN %solid_objects_work%'",
        )
        .await;
    db.scalar(&format!(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend({first})) AS t"
    ))
    .await;
    let relistened = eventually(Duration::from_secs(15), || async {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %solid_objects_work%' \
             AND pid <> {first}"
        ))
        .await
            == 1
    })
    .await;
    assert!(relistened, "the relay listens again on a new connection");
    let before = workers.stats().work_notices;
    let queued = caller
        .reference::<Desk>("after-kill")
        .enqueue()
        .add(3)
        .await
        .unwrap();
    let noticed = noticed_beyond(&workers, before, Duration::from_secs(10)).await;
    let ran = completes(&queued, Duration::from_secs(10)).await;
    stop_workers(&workers, running).await;
    assert!(noticed && ran, "noticed {noticed}, ran {ran}");
}

/// Promise: resuming from another process (an operator's CLI) wakes the idle workers on
/// PostgreSQL (the trigger of migration 7), without waiting for the polling fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_from_another_runtime_wakes_idle_workers_on_postgres() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let operator = db.builder(2).start().await.unwrap();
    operator
        .reference::<Desk>("waiting")
        .enqueue()
        .add(5)
        .await
        .unwrap();
    let admin = operator.admin().context(ana());
    assert!(admin.pause("Desk", "waiting").await.unwrap());
    let (workers, running) = db.idle_listening_workers().await;
    let before = workers.stats().work_notices;
    assert!(admin.resume("Desk", "waiting").await.unwrap());
    let ran = eventually(Duration::from_secs(15), || async {
        db.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'completed'")
            .await
            == 1
    })
    .await;
    let notices = workers.stats().work_notices - before;
    stop_workers(&workers, running).await;
    assert!(
        ran,
        "the resumed actor's message ran (notices since: {notices})"
    );
}
