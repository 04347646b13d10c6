//! Turns that conflict with other transactions (a Galera node certified another write first,
//! a serialization failure, a deadlock) are no failures of their messages: run again, then
//! left for a later pass with a stall counted, never an attempt, and counted in
//! `Stats::conflicts`; a message left unrun by many passes is what the doctor reports.

use solid_objects::admin::STALLS_WARNING;
use solid_objects::prelude::*;

use crate::backend::{self, database, scalar};
use crate::support::actors::Tally;

/// A runtime on `url` with `connections` and a clock of its own, allowing every call, that
/// knows the tally.
async fn tally_runtime(url: &str, connections: u32) -> Runtime {
    backend::builder(url, connections)
        .clock(ManualClock::starting_now())
        .policy(AllowAll)
        .actor::<Tally>()
        .start()
        .await
        .unwrap()
}

/// Five messages of one actor whose completions conflict twenty times (two whole passes of
/// reruns and more) all complete, each at its first attempt: the passes that gave up on the
/// first one counted two stalls and no attempt, and every conflict is in the stats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_actors_turns_that_conflict_for_whole_passes_complete_with_no_failed_attempt() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = tally_runtime(&url, 8).await;
    let hot = runtime.reference::<Tally>("hot");
    for _ in 0..5 {
        hot.enqueue().add().await.unwrap();
    }
    let observer = backend::observer(&url).await;
    for statement in backend::CONFLICTS_FOR_HOT {
        sqlx::raw_sql(statement).execute(&observer).await.unwrap();
    }
    let before = runtime.stats();

    let mut drains = 0;
    while scalar(
        &observer,
        "SELECT COUNT(*) FROM solid_messages WHERE status = 'ready'",
    )
    .await
        > 0
    {
        drains += 1;
        assert!(drains <= 10, "the conflicts ended after 20");
        runtime.testing().drain().await.unwrap();
    }

    assert_eq!(hot.snapshot().await.unwrap().count, 5);
    // A completed message counts the attempt that ran it: a failed one would make two.
    let failed = "SELECT COUNT(*) FROM solid_messages WHERE attempts <> 1";
    assert_eq!(
        scalar(&observer, failed).await,
        0,
        "no failed attempt counted"
    );
    let stalled = "SELECT COUNT(*) FROM solid_messages WHERE stalls > 0";
    assert_eq!(
        scalar(&observer, stalled).await,
        1,
        "the first message stalled"
    );
    let twice = "SELECT COUNT(*) FROM solid_messages WHERE stalls = 2";
    assert_eq!(
        scalar(&observer, twice).await,
        1,
        "two passes gave up on it"
    );
    let after = runtime.stats();
    assert_eq!(after.conflicts - before.conflicts, 20);
    runtime.close().await;
}

/// A ready message that passes left unrun [`STALLS_WARNING`] times is a problem the doctor
/// names; one short of it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_names_a_message_that_passes_kept_leaving_unrun() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = tally_runtime(&url, 4).await;
    let queued = runtime
        .reference::<Tally>("hot")
        .enqueue()
        .add()
        .await
        .unwrap();
    let observer = backend::observer(&url).await;
    let stall = |stalls: i64| {
        format!(
            "UPDATE solid_messages SET stalls = {stalls} WHERE id = {}",
            queued.id()
        )
    };
    let stalled = |problems: &[String]| {
        problems
            .iter()
            .any(|problem| problem.contains(&format!("message {} of Tally/hot", queued.id())))
    };
    sqlx::raw_sql(stall(STALLS_WARNING - 1).as_str())
        .execute(&observer)
        .await
        .unwrap();
    let report = runtime.admin().doctor().await.unwrap();
    assert!(!stalled(&report.problems), "{:?}", report.problems);
    sqlx::raw_sql(stall(STALLS_WARNING).as_str())
        .execute(&observer)
        .await
        .unwrap();
    let report = runtime.admin().doctor().await.unwrap();
    assert!(stalled(&report.problems), "{:?}", report.problems);
    runtime.close().await;
}

/// A turn that conflicts on every try, pass after pass (a trigger that always raises the
/// conflict), is never a failure of its message: past [`STALLS_WARNING`] passes it is still
/// ready with no attempt counted, each pass counted as a stall, and the doctor names it:
/// the escape hatch by which an endless conflict surfaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_conflicts_on_every_try_stays_ready_uncounted_and_the_doctor_names_it() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = backend::builder(&url, 4)
        .clock(ManualClock::starting_now())
        .policy(AllowAll)
        .actor::<Tally>()
        .start()
        .await
        .unwrap();
    let doomed = runtime.reference::<Tally>("doomed");
    let first = doomed.enqueue().add().await.unwrap();
    let observer = backend::observer(&url).await;
    for statement in backend::CONFLICTS_FOR_DOOMED_FOR_EVER {
        sqlx::raw_sql(statement).execute(&observer).await.unwrap();
    }

    for _ in 0..=STALLS_WARNING {
        runtime.testing().drain().await.unwrap();
    }

    let id = first.id();
    let row = format!("SELECT COUNT(*) FROM solid_messages WHERE id = {id} AND status = 'ready' AND attempts = 0 AND stalls = {}", STALLS_WARNING + 1);
    assert_eq!(
        scalar(&observer, &row).await,
        1,
        "message {id} is ready, with no attempt and a stall per pass"
    );
    let report = runtime.admin().doctor().await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|problem| problem.contains(&format!("message {id} of Tally/doomed"))),
        "{:?}",
        report.problems
    );
    runtime.close().await;
}
