//! A turn on PostgreSQL reads the mailbox table through its indexes, never whole: with a
//! table of finished messages, the server's own count of sequential scans of
//! `solid_messages` does not grow with the turns (a plan that read it whole on every turn
//! cost the hot key three quarters of its rate, and every turn a read of all the rows kept).

use std::time::Duration;

use solid_objects::prelude::*;

use crate::backend::{self, database, observer, Observer};
use crate::support::actors::Tally;

/// The turns the case runs.
const TURNS: i64 = 40;

/// The finished messages the table holds before the turns.
const KEPT: i64 = 20_000;

/// The server's counts for `solid_messages`, once they include `inserted` inserted rows
/// (each backend reports its counts when it ends or goes idle): its sequential scans.
async fn sequential_scans_once_counted(observer: &Observer, inserted: i64) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (inserts, scans): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_ins, seq_scan FROM pg_stat_user_tables WHERE relname = 'solid_messages'",
        )
        .fetch_one(observer)
        .await
        .unwrap();
        if inserts >= inserted {
            return scans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server counted {inserts} inserts of {inserted} in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A runtime of tallies on `url` (it makes the schema), after which the table holds
/// [`KEPT`] finished messages, analysed; an observer's connection, and the server's count of
/// sequential scans of the table by then.
async fn with_finished_messages(url: &str) -> (Runtime, Observer, i64) {
    let runtime = backend::builder(url, 4)
        .policy(AllowAll)
        .actor::<Tally>()
        .start()
        .await
        .unwrap();
    let observer = observer(url).await;
    let fill = format!(
        "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
             status, attempts, available_at, created_at, finished_at)
         SELECT 'Tally', 'kept-' || (n % 100), 'add', '{{}}', 'kept-' || n, 'completed', 1, 0,
             n, n
         FROM generate_series(1, {KEPT}) AS n;
         ANALYZE solid_messages"
    );
    sqlx::raw_sql(&fill).execute(&observer).await.unwrap();
    let before = sequential_scans_once_counted(&observer, KEPT).await;
    (runtime, observer, before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_reads_the_mailbox_table_by_its_indexes_never_whole() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let (runtime, observer, before) = with_finished_messages(&url).await;

    let tally = runtime.reference::<Tally>("hot");
    for turn in 1..=TURNS {
        assert_eq!(tally.add().await.unwrap(), turn);
    }
    // The runtime's sessions report their counts as they end.
    runtime.close().await;
    let after = sequential_scans_once_counted(&observer, KEPT + TURNS).await;
    assert!(
        after - before < TURNS / 4,
        "{} sequential scans of solid_messages during {TURNS} turns",
        after - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_turn_reads_the_mailbox_table_by_its_indexes_never_whole() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let (runtime, observer, before) = with_finished_messages(&url).await;

    // Messages enqueued for one actor, then taken up a turn at a time by the workers' pass
    // (which locks the actor without waiting).
    let tally = runtime.reference::<Tally>("hot");
    for _ in 0..TURNS {
        tally.enqueue().add().await.unwrap();
    }
    let drained = runtime.testing().drain().await.unwrap();
    assert_eq!(drained.completed, usize::try_from(TURNS).unwrap());
    runtime.close().await;
    let after = sequential_scans_once_counted(&observer, KEPT + TURNS).await;
    assert!(
        after - before < TURNS / 4,
        "{} sequential scans of solid_messages during {TURNS} enqueues and turns",
        after - before
    );
}
