//! PostgreSQL's LISTEN/NOTIFY wake-up: a commit in one process reaches the idle workers of
//! another as a notice, the listening connection comes back when it is killed, and a runtime
//! of one connection still runs calls while it listens.

use std::time::Duration;

use solid_objects::prelude::*;

use crate::several_runtimes::{listeners, running_workers, runtime, Journal, TestDatabase};
use crate::support::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_in_one_process_wakes_the_idle_workers_of_another() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let caller = runtime(&db.url, &db.clock).await;
    let (workers, running) = running_workers(&db, true).await;
    let listening = eventually(Duration::from_secs(10), || async {
        listeners(&db.url).await == 1
    })
    .await;
    assert!(listening, "the workers' runtime listens for work");
    let before = workers.stats().work_notices;

    let queued = caller
        .reference::<Journal>("j")
        .enqueue()
        .record("from another process")
        .await
        .unwrap();

    let noticed = eventually(Duration::from_secs(10), || async {
        workers.stats().work_notices > before
    })
    .await;
    assert!(
        noticed,
        "the enqueue's commit reached the other runtime as a notice"
    );
    // Only the other runtime's worker runs it (the caller runs no workers).
    let ran = eventually(Duration::from_secs(10), || async {
        matches!(queued.status().await, Ok(MessageStatus::Completed))
    })
    .await;
    assert!(ran);
    assert_eq!(
        caller.stats().work_notices,
        0,
        "a runtime that does not run hears nothing"
    );
    workers.shutdown();
    running.await.unwrap().unwrap();
    workers.close().await;
    caller.close().await;
}
