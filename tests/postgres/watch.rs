//! Watching on PostgreSQL: commits reach watchers by `NOTIFY`, and only watched actors (those
//! some runtime holds a lease on in `solid_watched`) send notices.

use std::time::Duration;

use solid_objects::prelude::*;
use sqlx::Connection;

use crate::cases::watch::{next, next_state, Counter, Dial, SOON};
use crate::support::{eventually, Harness};

/// The rows of `solid_watched`: which actors some runtime holds a lease on.
async fn leases(url: &str) -> Vec<String> {
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT actor_id FROM solid_watched ORDER BY 1")
        .fetch_all(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
    rows
}

#[tokio::test]
async fn only_watched_actors_notify_their_commits() {
    let harness = Harness::new();
    let url = harness.url().await;
    // Notices only (an hour between polls): what reaches the watcher came by NOTIFY.
    let runtime = pg_runtime(&url).await;
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen("solid_objects_state").await.unwrap();

    let quiet = runtime.reference::<Counter>("quiet");
    let loud = runtime.reference::<Counter>("loud");
    loud.add(1).await.unwrap();
    let mut watch = loud.watch();
    assert_eq!(next_state(&mut watch).await.0, 1);
    let leased = eventually(SOON, || async { leases(&url).await == ["loud"] }).await;
    assert!(
        leased,
        "no lease on the watched actor: {:?}",
        leases(&url).await
    );

    for n in 1..=3 {
        quiet.add(n).await.unwrap();
    }
    // A commit of another process (as the database sees it: a write that is not this
    // runtime's turn) reaches the watcher by its notice alone.
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "UPDATE solid_instances SET state = '{\"value\":7,\"notes\":[]}', revision = revision + 1
         WHERE actor_type = 'Counter' AND actor_id = 'loud'",
    )
    .execute(&mut other)
    .await
    .unwrap();
    assert_eq!(
        next_state(&mut watch).await,
        (
            2,
            Counter {
                value: 7,
                notes: Vec::new()
            }
        )
    );
    // The first notice on the channel is the watched actor's: the quiet one's three
    // commits, earlier, sent none.
    let first = tokio::time::timeout(SOON, listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.payload(), r#"["Counter", "loud", 1, 2]"#);

    // A lease that ran out (a runtime that died) notifies nothing either.
    sqlx::query(
        "INSERT INTO solid_watched (actor_type, actor_id, watcher, expires_at)
         VALUES ('Counter', 'quiet', 'a runtime that died', 0)",
    )
    .execute(&mut other)
    .await
    .unwrap();
    quiet.add(10).await.unwrap();
    loud.add(1).await.unwrap();
    let next_notice = tokio::time::timeout(SOON, listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next_notice.payload(), r#"["Counter", "loud", 1, 3]"#);

    // The last watcher gone, the runtime gives its lease up (and the dead one's goes with it).
    drop(watch);
    let released = eventually(SOON, || async { leases(&url).await.is_empty() }).await;
    assert!(released, "leases left: {:?}", leases(&url).await);
    other.close().await.unwrap();
    runtime.close().await;
}

/// A runtime on `url` whose watches poll once an hour: what reaches them comes by notice.
async fn pg_runtime(url: &str) -> Runtime {
    Runtime::builder()
        .postgres(url, 8)
        .watch_poll(Duration::from_secs(3600))
        .policy(AllowAll)
        .start()
        .await
        .unwrap()
}

async fn bump(connection: &mut sqlx::PgConnection, id: &str) {
    sqlx::query(
        "UPDATE solid_instances SET state = '{\"value\":99}', revision = revision + 1
         WHERE actor_type = 'Dial' AND actor_id = $1",
    )
    .bind(id)
    .execute(connection)
    .await
    .unwrap();
}

/// The watch documents: "on PostgreSQL so do those [commits] of every process (NOTIFY)". A
/// commit by another process right after the watch's first item must reach it by notice,
/// not at the next poll (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_right_after_the_first_item_reaches_the_watch() {
    let harness = Harness::new();
    let url = harness.url().await;
    let runtime = pg_runtime(&url).await;
    // The follower is already running for another actor.
    let mut keep = runtime.reference::<Dial>("anchor").watch();
    next(&mut keep).await.unwrap().unwrap();
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut missed = Vec::new();
    for round in 0..10 {
        let id = format!("a{round}");
        let counter = runtime.reference::<Dial>(&id);
        counter.add(1).await.unwrap();
        let mut watch = counter.watch();
        assert!(matches!(
            next(&mut watch).await,
            Some(Ok(Watched::State { revision: 1, .. }))
        ));
        bump(&mut other, &id).await;
        match tokio::time::timeout(Duration::from_secs(3), watch.next()).await {
            Ok(Some(Ok(Watched::State { revision: 2, .. }))) => {}
            Ok(other) => panic!("round {round}: {other:?}"),
            Err(_) => missed.push(id),
        }
    }
    assert!(
        missed.is_empty(),
        "commits by another process not seen within 3 s: {missed:?}"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_runtime_dropping_its_watch_leaves_the_others_notices() {
    let harness = Harness::new();
    let url = harness.url().await;
    let a = pg_runtime(&url).await;
    let b = pg_runtime(&url).await;
    a.reference::<Dial>("shared").add(1).await.unwrap();
    let mut watch_a = a.reference::<Dial>("shared").watch();
    let mut watch_b = b.reference::<Dial>("shared").watch();
    next(&mut watch_a).await.unwrap().unwrap();
    next(&mut watch_b).await.unwrap().unwrap();
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let count = || async {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM solid_watched")
            .fetch_one(&mut c)
            .await
            .unwrap();
        n
    };
    assert!(eventually(SOON, || async { count().await == 2 }).await);
    drop(watch_b);
    assert!(eventually(SOON, || async { count().await == 1 }).await);
    bump(&mut other, "shared").await;
    assert!(matches!(
        next(&mut watch_a).await,
        Some(Ok(Watched::State { revision: 2, .. }))
    ));
    a.close().await;
    b.close().await;
}
