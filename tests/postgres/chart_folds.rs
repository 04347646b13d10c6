//! The fold of the charts' minutes on PostgreSQL, where transaction ids are the whole
//! server's: a fold counts every turn that ended in the minutes it folds, whichever host's
//! clock stamped it and whatever other transactions the server runs. Time moves only
//! through the manual clocks.

use std::time::Duration;

use solid_objects::admin::Window;
use solid_objects::prelude::*;

use crate::backend::{another_database, database, observer, Observer};
use crate::support::charts::{noon, Station};

/// The fold mark: every row that finished before it is in the tallies.
async fn fold_mark(observer: &Observer) -> i64 {
    sqlx::query_scalar("SELECT folded_until FROM solid_activity_folded")
        .fetch_one(observer)
        .await
        .unwrap()
}

/// A runtime of stations on `url` by `clock`.
async fn stations(url: &str, clock: &ManualClock) -> Runtime {
    crate::support::runtimes::builder(url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Station>()
        .start()
        .await
        .unwrap()
}

/// Waits (20 s at most) until `sql`, a count, counts at least one.
async fn until_counted(observer: &Observer, sql: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let count: i64 = sqlx::query_scalar(sql).fetch_one(observer).await.unwrap();
        if count > 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "never counted: {sql}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_open_in_another_database_of_the_server_holds_back_no_fold() {
    let Some((server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::new(noon(0, 10));
    let runtime = stations(&url, &clock).await;
    runtime.reference::<Station>("s1").work().await.unwrap();
    // Another application's database on the same server: a transaction that wrote a row,
    // still open.
    let elsewhere = observer(&another_database(&server).await).await;
    sqlx::raw_sql("CREATE TABLE ledger (entry BIGINT)")
        .execute(&elsewhere)
        .await
        .unwrap();
    let mut open = elsewhere.begin().await.unwrap();
    sqlx::query("INSERT INTO ledger (entry) VALUES (1)")
        .execute(&mut *open)
        .await
        .unwrap();
    // 12:05:10: the upkeep folds the minutes to 12:03.
    clock.set(noon(5, 10));
    let started = std::time::Instant::now();
    runtime.testing().upkeep().await.unwrap();
    let took = started.elapsed();
    let here = observer(&url).await;
    assert_eq!(
        fold_mark(&here).await,
        noon(3, 0).timestamp_micros(),
        "a transaction in another database is no turn of this one (the upkeep took {took:?})"
    );
    open.rollback().await.unwrap();
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_on_a_host_whose_clock_lags_that_ends_while_a_fold_writes_is_counted() {
    let Some((_server, url)) = database().await else {
        return;
    };
    // Two hosts: the folding one's clock, and one three minutes behind it.
    let clock = ManualClock::new(noon(0, 10));
    let folding = stations(&url, &clock).await;
    let lagging_clock = ManualClock::new(noon(0, 10));
    let lagging = stations(&url, &lagging_clock).await;
    // 12:00:10: a turn completes, in the minute the fold will count first.
    folding.reference::<Station>("s1").work().await.unwrap();
    let observer = observer(&url).await;
    sqlx::raw_sql("CREATE TABLE ledger (entry BIGINT)")
        .execute(&observer)
        .await
        .unwrap();
    // A transaction that began before the fold: the fold waits for it.
    let mut older = observer.begin().await.unwrap();
    sqlx::query("INSERT INTO ledger (entry) VALUES (1)")
        .execute(&mut *older)
        .await
        .unwrap();
    // 12:05:10: the folding host's upkeep folds the minutes to 12:03.
    clock.set(noon(5, 10));
    let fold = {
        let folding = folding.clone();
        tokio::spawn(async move { folding.testing().upkeep().await })
    };
    until_counted(
        &observer,
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND backend_xid IS NOT NULL
           AND query LIKE '%pg_snapshot_xmin%' AND pid <> pg_backend_pid()",
    )
    .await;
    // A transaction that began after the fold holds the tally of 12:00's completed turns
    // (as a turn that writes a tally does): the fold does not wait for it before it reads,
    // and waits for it as it writes that tally.
    let mut younger = observer.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO solid_activity (minute, kind, bucket, count) VALUES ($1, 'completed', 0, 0)",
    )
    .bind(noon(0, 0).timestamp_micros())
    .execute(&mut *younger)
    .await
    .unwrap();
    older.rollback().await.unwrap();
    until_counted(
        &observer,
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .await;
    // Meanwhile, on the host whose clock says 12:02:10, a turn ends.
    lagging_clock.set(noon(2, 10));
    lagging.reference::<Station>("s2").work().await.unwrap();
    younger.rollback().await.unwrap();
    fold.await.unwrap().unwrap();
    // 12:10:10: every minute to 12:08 is folded.
    clock.set(noon(10, 10));
    folding.testing().upkeep().await.unwrap();
    assert_eq!(fold_mark(&observer).await, noon(8, 0).timestamp_micros());
    let activity = folding.admin().activity(Window::Hour).await.unwrap();
    let completed: Vec<(DateTime<Utc>, i64)> = activity
        .points
        .iter()
        .filter(|point| point.finished.completed > 0)
        .map(|point| (point.at, point.finished.completed))
        .collect();
    let stamped: i64 = sqlx::query_scalar(
        "SELECT finished_at FROM solid_messages WHERE actor_id = 's2' AND status = 'completed'",
    )
    .fetch_one(&observer)
    .await
    .unwrap();
    assert_eq!(
        completed.iter().map(|(_, count)| count).sum::<i64>(),
        2,
        "both turns are in the chart, the lagging host's too (finished at {}): {completed:?}",
        DateTime::from_timestamp_micros(stamped).unwrap()
    );
    lagging.close().await;
    folding.close().await;
}

/// A transaction of another program on `observer`'s database that wrote a row (a ledger
/// entry) and is still open.
async fn a_transaction_left_open(
    observer: &Observer,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS ledger (entry BIGINT)")
        .execute(observer)
        .await
        .unwrap();
    let mut open = observer.begin().await.unwrap();
    sqlx::query("INSERT INTO ledger (entry) VALUES (1)")
        .execute(&mut *open)
        .await
        .unwrap();
    open
}

/// Sessions of this database, the observer's aside, whose fold asks whether the
/// transactions older than it ended.
const FOLDS_WAITING: &str = "SELECT COUNT(*) FROM pg_stat_activity
     WHERE datname = current_database() AND backend_xid IS NOT NULL
       AND query LIKE '%pg_snapshot_xmin%' AND pid <> pg_backend_pid()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_held_back_by_an_open_transaction_holds_back_no_turn_of_its_worker() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::new(noon(0, 10));
    let runtime = crate::support::runtimes::builder(&url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Station>()
        .workers(1)
        .start()
        .await
        .unwrap();
    runtime.reference::<Station>("s1").work().await.unwrap();
    let observer = observer(&url).await;
    let open = a_transaction_left_open(&observer).await;
    // 12:05:10: the worker's pass folds the minutes that ended.
    clock.set(noon(5, 10));
    let workers = crate::support::workers::run_workers(&runtime);
    until_counted(&observer, FOLDS_WAITING).await;
    // A message enqueued as the worker folds.
    let started = std::time::Instant::now();
    let message = runtime
        .reference::<Station>("s2")
        .enqueue()
        .work()
        .await
        .unwrap();
    let answered = crate::support::workers::answered(&message, Duration::from_secs(1)).await;
    assert!(
        answered,
        "the worker ran the message within a second (it ran after {:?})",
        {
            crate::support::workers::answered(&message, Duration::from_secs(10)).await;
            started.elapsed()
        }
    );
    open.rollback().await.unwrap();
    runtime.close().await;
    workers.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_reports_charts_whose_fold_is_held_back() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::new(noon(0, 10));
    let runtime = stations(&url, &clock).await;
    runtime.reference::<Station>("s1").work().await.unwrap();
    let observer = observer(&url).await;
    let open = a_transaction_left_open(&observer).await;
    // 13:00:10: an hour of upkeeps has folded nothing.
    for minute in 5..=60 {
        clock.set(noon(minute, 10));
        if minute % 20 == 0 {
            runtime.testing().upkeep().await.unwrap();
        }
    }
    assert_eq!(fold_mark(&observer).await, 0, "held back");
    let report = runtime.admin().doctor().await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|problem| problem.contains("fold") || problem.contains("chart")),
        "the doctor says the charts are not folded: {:?}",
        report.problems
    );
    open.rollback().await.unwrap();
    runtime.close().await;
}
