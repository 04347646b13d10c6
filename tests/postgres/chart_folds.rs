//! The fold of the charts' minutes on PostgreSQL, where transaction ids are the whole
//! server's: a fold waits for the older transactions of its own database only. Time moves
//! only through the manual clock.

use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::GroupCommit;

use crate::backend::{another_database, database, observer, Observer};
use crate::support::charts::{noon, spawned_carry, Porter, Station};

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

/// `url` with `role` as its user instead of the server's superuser.
fn as_role(url: &str, role: &str) -> String {
    url.replacen(
        &format!("{}@", crate::support::postgres::USER),
        &format!("{role}@"),
        1,
    )
}

#[tokio::test(flavor = "current_thread")]
async fn turns_a_process_of_another_role_commits_after_a_fold_passed_their_minute_are_counted() {
    let Some((_server, url)) = database().await else {
        return;
    };
    // The application's database belongs to the role `app`, which its folding process runs
    // as; a second process runs turns as `carrier`, a member of `app` (it uses app's tables).
    let superuser = observer(&url).await;
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&superuser)
        .await
        .unwrap();
    for statement in [
        "CREATE ROLE app LOGIN".to_owned(),
        "CREATE ROLE carrier LOGIN IN ROLE app".to_owned(),
        format!("ALTER DATABASE \"{database}\" OWNER TO app"),
        "GRANT ALL ON SCHEMA public TO app".to_owned(),
    ] {
        sqlx::raw_sql(&statement).execute(&superuser).await.unwrap();
    }
    let clock = ManualClock::new(noon(0, 10));
    let folding = crate::support::runtimes::builder(&as_role(&url, "app"), 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Porter>()
        .start()
        .await
        .unwrap();
    let carrying = crate::support::runtimes::builder(&as_role(&url, "carrier"), 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Porter>()
        .group_commit(GroupCommit::default().max_wait(Duration::from_secs(8)))
        .start()
        .await
        .unwrap();
    let hot = carrying
        .reference::<Porter>("hot")
        .timeout(Duration::from_secs(60));
    let (lead, free, held) = ("role-fold-lead", "role-fold-free", "role-fold-held");
    crate::support::gates::gate(free).open();
    assert_eq!(hot.carry(free.to_owned()).await.unwrap(), 1);
    // A group at 12:00:10: its leader's turn and a member's are written in its transaction,
    // stamped 12:00, and its last member waits in its handler, the transaction open.
    let leader = spawned_carry(&hot, lead).await;
    crate::support::gates::gate(lead).reached(1).await;
    let member = spawned_carry(&hot, free).await;
    let last = spawned_carry(&hot, held).await;
    crate::support::gates::gate(lead).open();
    crate::support::gates::gate(held).reached(1).await;
    // Five minutes later the folding process folds the minutes that ended two minutes ago,
    // 12:00 among them, while the group is still open; then the group commits.
    clock.set(noon(5, 10));
    folding.testing().upkeep().await.unwrap();
    crate::support::gates::gate(held).open();
    let mut carried = Vec::new();
    for call in [leader, member, last] {
        carried.push(call.await.unwrap().unwrap());
    }
    assert_eq!(carried, [2, 3, 4]);
    clock.set(noon(10, 10));
    folding.testing().upkeep().await.unwrap();
    let completed = crate::support::charts::completed_each_minute_of_the_hour(&folding).await;
    assert_eq!(
        completed.iter().sum::<i64>(),
        4,
        "the first carry and the group's three are in the chart: {completed:?}"
    );
    carrying.close().await;
    folding.close().await;
}
