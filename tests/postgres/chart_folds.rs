//! The fold of the charts' minutes on PostgreSQL, where transaction ids are the whole
//! server's: a fold waits for the older transactions of its own database only. Time moves
//! only through the manual clock.

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
    runtime.testing().upkeep().await.unwrap();
    let here = observer(&url).await;
    assert_eq!(
        fold_mark(&here).await,
        noon(3, 0).timestamp_micros(),
        "a transaction in another database is no turn of this one"
    );
    open.rollback().await.unwrap();
    runtime.close().await;
}
