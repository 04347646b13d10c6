//! A MariaDB primary lost under load behind one endpoint: killed and restarted, then killed
//! and replaced by its semi-synchronous replica.
//!
//! The soak of [`chaos`](crate::chaos) (4 worker processes, one SIGKILLed every 2 s, and 8
//! drivers over 50 actors: sync calls and enqueues, sends, effects, reminders) runs on the
//! URL of one endpoint (tests/support/mariadb_replication.rs), as an application behind a
//! managed MySQL endpoint or a proxy is. From half its chaos time the primary's `mariadbd`
//! is SIGKILLed; while it is down a call fails with `Error::DatabaseUnavailable` once its
//! deadline passes; it is started again on its datadir; the soak runs a while on it; then
//! it is killed again and replaced: the replica applies what it received, accepts writes,
//! and the endpoint points at it. The soak's checks then hold on the replacement: every
//! acknowledged call there, nothing applied twice, every actor's order exact, every effect
//! run, every reminder fired once. Calls that failed because no server answered were
//! retried under their keys; the soak prints how many, and how many named their message
//! because their turn may have committed. It prints the seconds from each kill to the first
//! turn committed afterwards.
//!
//! About 40 s of wall time: 20 s of chaos at least, with both outages inside it, then the
//! drain.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use solid_objects::prelude::*;

use crate::chaos::{self, Application, Disturbance, Topology};
use crate::support::actors::Tally;
use crate::support::commit_cutter::{CommitCutter, Cut};
use crate::support::mariadb_replication::MariaDbReplication;

/// How long the soak runs on one primary before the next step of the disturbance.
const BETWEEN_STEPS: Duration = Duration::from_secs(4);
/// How long a call made while the primary is down waits for a server.
const OUTAGE_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the server back or the replacement may take to commit its first turn.
const FIRST_COMMIT_WAIT: Duration = Duration::from_secs(60);
/// How often the test looks for a new turn.
const POLL: Duration = Duration::from_millis(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soak_loses_no_acknowledged_turn_when_the_primary_restarts_and_is_then_replaced_behind_one_endpoint(
) {
    let _turn = chaos::SOAKS.lock().await;
    let Some(replication) = MariaDbReplication::start().await else {
        return;
    };
    let url = replication.database().await;
    let replication = Arc::new(tokio::sync::Mutex::new(replication));
    // The test holds the servers until the soak's checks are done.
    let disturbed = Arc::clone(&replication);
    let url_of_disturbance = url.clone();
    let dir = tempfile::tempdir().expect("a temp dir");
    // On a thread and a Tokio runtime of its own, like a separate operator: rustc cannot yet
    // prove these futures `Send` for every lifetime, which a spawned task needs.
    let disturbance: Disturbance = Box::pin(async move {
        let disturbing = tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the disturbance")
                .block_on(restart_then_replace(disturbed, url_of_disturbance))
        });
        disturbing
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    });
    let unavailable = chaos::soak(
        "mariadb outage",
        &Topology::single(&url),
        4,
        dir.path(),
        Some(disturbance),
    )
    .await;
    assert!(
        unavailable > 0,
        "the drivers' calls met the outages as Error::DatabaseUnavailable"
    );
}

/// Kills the primary right after it ran a call's `COMMIT` and before it answered, checks
/// that call and one made while it is down fail as unavailable (the first naming its
/// message, which is kept), restarts it; later kills it again and replaces it by the
/// replica; returns the figures of each step.
async fn restart_then_replace(
    replication: Arc<tokio::sync::Mutex<MariaDbReplication>>,
    url: String,
) -> String {
    let mut replication = replication.lock().await;
    let application = Application::new(&url);
    let (cut_url, cutter) = CommitCutter::in_front_of(&url).await;
    let runtime = chaos::builder(&cut_url, 2)
        .actor::<Tally>()
        .start()
        .await
        .expect("a runtime of the test's own");
    let before = applied(&application).await;
    // A call whose COMMIT the primary ran and never answered: it went away right after.
    cutter.arm(Cut::AnswerWithheld, 0);
    let committed_then_down = runtime
        .reference::<Tally>("committed-then-down")
        .timeout(OUTAGE_CALL_TIMEOUT);
    let in_doubt = committed_then_down.add();
    let kill = async {
        let armed = Instant::now();
        while cutter.withheld() == 0 {
            assert!(armed.elapsed() < FIRST_COMMIT_WAIT, "the COMMIT ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        replication.kill_primary();
        Instant::now()
    };
    let (in_doubt, killed) = tokio::join!(in_doubt, kill);
    let Err(Error::DatabaseUnavailable {
        request_id: Some(in_doubt_request),
        ..
    }) = &in_doubt
    else {
        panic!("a call whose turn may have committed names its message: {in_doubt:?}");
    };
    let refused = runtime
        .reference::<Tally>("while-down")
        .timeout(OUTAGE_CALL_TIMEOUT)
        .add()
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::DatabaseUnavailable {
                backend: "MySQL",
                request_id: None,
                ..
            })
        ),
        "a call while the primary is down fails as unavailable, naming no message: {refused:?}"
    );
    let restarting = killed.elapsed();
    replication.restart_primary();
    let restarted = killed.elapsed();
    let restart = first_commit_after(&application, before, killed).await;
    let kept = runtime
        .message(in_doubt_request)
        .await
        .expect("the message is looked up")
        .expect("the turn in doubt committed: the server ran its COMMIT");
    assert_eq!(kept.status().await.unwrap(), MessageStatus::Completed);
    tokio::time::sleep(BETWEEN_STEPS).await;

    let before = applied(&application).await;
    let killed = Instant::now();
    replication.kill_primary();
    replication.promote_replica().await;
    let promoted = killed.elapsed();
    let replace = first_commit_after(&application, before, killed).await;
    runtime.close().await;
    format!(
        "restart: a call whose COMMIT ran as the primary went away answered {}; a call \
         while it was down answered {}; restarted after {:.2} s (started at {:.2} s), \
         first commit after {restart:.2} s; replacement: replica promoted and the endpoint \
         switched after {:.2} s, first commit after {replace:.2} s",
        in_doubt.expect_err("unavailable"),
        refused.expect_err("unavailable"),
        restarted.as_secs_f64(),
        restarting.as_secs_f64(),
        promoted.as_secs_f64(),
    )
}

/// How many turns the application's table `applied` holds, through the endpoint, waiting
/// for a server that accepts writes.
async fn applied(application: &Application) -> i64 {
    loop {
        let pool = application
            .pool_by(Instant::now() + FIRST_COMMIT_WAIT)
            .await;
        match sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM applied")
            .fetch_one(&pool)
            .await
        {
            Ok(count) => return count,
            Err(_) => {
                application.forget().await;
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// The seconds from `killed` until `applied` holds more than `before` turns.
async fn first_commit_after(application: &Application, before: i64, killed: Instant) -> f64 {
    while applied(application).await <= before {
        assert!(
            killed.elapsed() < FIRST_COMMIT_WAIT,
            "no turn committed within {FIRST_COMMIT_WAIT:?} of the kill"
        );
        tokio::time::sleep(POLL).await;
    }
    killed.elapsed().as_secs_f64()
}
