//! Large states held in memory between turns: a turn of an actor whose last commit this
//! process made does not read its state back, yet every turn runs on the state committed at
//! the row's revision: another runtime's commits, a destroy and a changed row are read; a
//! rejected, failed, timed-out or abandoned turn leaves the committed state for the next.

use std::time::Duration;

use crate::support;

use solid_objects::prelude::*;
use support::cancellation::abort_some;
use support::fixtures::{started, started_on, started_on_with};
use support::{execute, Harness};

/// The bytes of an archive's pages: past the size the runtime keeps in memory (8 KiB).
const PAGES: usize = 16 * 1024;

/// An actor whose state is large enough to be kept between turns; a failure is final.
#[actor(max_attempts = 1)]
#[derive(Default)]
struct Archive {
    pages: String,
    total: u64,
}

#[actor]
impl Archive {
    /// Adds `amount` to the total (filling the pages on first use); returns the total.
    #[command]
    fn add(&mut self, amount: u64) -> u64 {
        if self.pages.is_empty() {
            self.pages = "p".repeat(PAGES);
        }
        self.total += amount;
        self.total
    }

    /// Changes the state, then rejects.
    #[command]
    fn add_then_reject(&mut self, amount: u64) -> Result<u64, Rejection> {
        self.total += amount;
        self.pages.clear();
        Err(reject!(refused, "Refused after a change"))
    }

    /// Changes the state, then fails for good.
    #[command]
    fn add_then_fail(&mut self, amount: u64) -> Result<u64, Failure> {
        self.total += amount;
        self.pages.clear();
        Err(Failure::permanent("failed after a change"))
    }

    /// Changes the state, then never returns.
    #[command]
    async fn add_then_hang(&mut self, amount: u64) {
        self.total += amount;
        self.pages.clear();
        std::future::pending::<()>().await;
    }

    /// Destroys the archive.
    #[command]
    fn burn(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }

    /// The total and the pages' length.
    #[query]
    fn contents(&self) -> (u64, usize) {
        (self.total, self.pages.len())
    }
}

/// Replaces the archive's stored state behind the runtime's back with a small one whose
/// total is `total`, moving its revision on when `new_revision`.
async fn rewrite_state(harness: &Harness, actor_id: &str, total: u64, new_revision: bool) {
    let revision = if new_revision {
        ", revision = revision + 1"
    } else {
        ""
    };
    execute(
        harness,
        &format!(
            "UPDATE solid_instances SET state = '{{\"pages\": \"\", \"total\": {total}}}'{revision} \
             WHERE actor_id = '{actor_id}'"
        ),
    )
    .await;
}

#[tokio::test]
async fn two_runtimes_taking_turns_on_one_actor_each_see_the_others_commits() {
    let harness = Harness::new();
    let first = harness.start().await;
    let second = harness.start().await;
    let on_first = first.reference::<Archive>("a-1");
    let on_second = second.reference::<Archive>("a-1");

    let mut totals = Vec::new();
    for round in 0..3 {
        totals.push(on_first.add(1 + round * 100).await.unwrap());
        totals.push(on_second.add(10 + round * 100).await.unwrap());
        totals.push(on_second.add(1000).await.unwrap());
    }

    assert_eq!(
        totals,
        [1, 11, 1011, 1112, 1222, 2222, 2423, 2633, 3633],
        "each runtime's turn ran on the other's last commit"
    );
    assert_eq!(on_first.contents().await.unwrap(), (3633, PAGES));
    first.close().await;
    second.close().await;
}

#[tokio::test]
async fn a_rejected_or_failed_turn_leaves_the_committed_state_to_the_next() {
    let (_harness, runtime, archive) = started_on::<Archive>("a-1").await;
    assert_eq!(archive.add(1).await.unwrap(), 1);

    let rejected = archive.add_then_reject(10).await;
    let after_rejection = archive.add(1).await.unwrap();
    let failed = archive.add_then_fail(100).await;
    let after_failure = archive.add(1).await.unwrap();

    assert_eq!(support::rejection_code(rejected), "refused");
    assert!(
        matches!(failed, Err(Error::HandlerFailed { .. })),
        "{failed:?}"
    );
    assert_eq!((after_rejection, after_failure), (2, 3));
    assert_eq!(archive.contents().await.unwrap(), (3, PAGES));
    runtime.close().await;
}

#[tokio::test]
async fn a_turn_past_the_turn_timeout_or_the_callers_deadline_leaves_the_committed_state() {
    let (_harness, runtime, archive) = started_on_with::<Archive>("a-1", |builder| {
        builder.turn_timeout(Duration::from_millis(200))
    })
    .await;
    assert_eq!(archive.add(1).await.unwrap(), 1);

    let timed_out = archive.add_then_hang(10).await;
    let after_timeout = archive.add(1).await.unwrap();
    let abandoned = archive
        .clone()
        .timeout(Duration::from_millis(50))
        .add_then_hang(100)
        .await;
    let after_abandon = archive.add(1).await.unwrap();

    assert!(
        matches!(&timed_out, Err(Error::HandlerFailed { error, .. }) if error.contains("turn timeout")),
        "{timed_out:?}"
    );
    assert!(
        matches!(abandoned, Err(Error::SyncTimeout { .. })),
        "{abandoned:?}"
    );
    assert_eq!((after_timeout, after_abandon), (2, 3));
    assert_eq!(archive.contents().await.unwrap(), (3, PAGES));
    runtime.close().await;
}

#[tokio::test]
async fn a_call_after_a_destroy_starts_from_the_default_state() {
    let (harness, runtime, archive) = started_on::<Archive>("a-1").await;
    assert_eq!(archive.add(5).await.unwrap(), 5);

    archive.destroy().await.unwrap();
    let after_destroy = archive.add(1).await.unwrap();
    archive.burn().await.unwrap();
    let after_burn = archive.add(2).await.unwrap();
    let other = harness.start().await;
    other.reference::<Archive>("a-1").add(7).await.unwrap();
    other.reference::<Archive>("a-1").destroy().await.unwrap();
    let after_destroy_elsewhere = archive.add(3).await.unwrap();

    assert_eq!((after_destroy, after_burn), (1, 2));
    assert_eq!(after_destroy_elsewhere, 3);
    runtime.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_state_committed_outside_this_process_is_read_by_its_next_turn() {
    let (harness, runtime, archive) = started_on::<Archive>("a-1").await;
    assert_eq!(archive.add(1).await.unwrap(), 1);

    rewrite_state(&harness, "a-1", 500, true).await;
    let after_rewrite = archive.add(1).await.unwrap();
    let worker_ran = archive.enqueue().add(10).await.unwrap();
    runtime.testing().drain().await.unwrap();
    rewrite_state(&harness, "a-1", 700, true).await;
    let queued = archive.enqueue().add(20).await.unwrap();
    runtime.testing().drain().await.unwrap();

    assert_eq!(after_rewrite, 501);
    assert_eq!(worker_ran.result().await.unwrap(), Some(511));
    assert_eq!(queued.result().await.unwrap(), Some(720));
    runtime.close().await;
}

/// A row's state changes only with its revision: every writer of this library (a turn, a
/// destroy) moves the revision on under the row's lock, so a process that committed a
/// revision holds that revision's state, and its next turn reads only the revision. A
/// write behind the runtime's back that keeps the revision is therefore not seen by the
/// process that holds it: this is what spares a large state's read on every turn. A
/// runtime that holds nothing (the cache turned off, or another process) reads the row.
#[tokio::test]
async fn a_state_changed_without_a_new_revision_is_not_read_while_this_process_holds_it() {
    let (harness, runtime) = started().await;
    let uncached = harness
        .builder()
        .await
        .state_cache(0)
        .start()
        .await
        .expect("the runtime starts");
    let archive = runtime.reference::<Archive>("a-1");
    assert_eq!(archive.add(1).await.unwrap(), 1);

    rewrite_state(&harness, "a-1", 500, false).await;
    let held = archive.add(1).await.unwrap();
    rewrite_state(&harness, "a-1", 600, false).await;
    let read = uncached.reference::<Archive>("a-1").add(1).await.unwrap();
    let after_other = archive.add(1).await.unwrap();

    assert_eq!(
        held, 2,
        "the process held revision 1's state and did not read it"
    );
    assert_eq!(read, 601, "a runtime without the cache read the row");
    assert_eq!(after_other, 602, "the other runtime's commit was read");
    runtime.close().await;
    uncached.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_racing_on_one_actor_in_one_process_each_run_on_the_last_commit() {
    let (_harness, runtime, archive) = started_on::<Archive>("a-1").await;
    assert_eq!(archive.add(1).await.unwrap(), 1);

    let mut totals = support::together(8, |_| {
        let archive = archive.clone();
        async move { archive.add(1).await.unwrap() }
    })
    .await;
    totals.sort_unstable();

    assert_eq!(totals, (2..=9).collect::<Vec<u64>>());
    assert_eq!(archive.add(1).await.unwrap(), 10);
    runtime.close().await;
}

/// The state of `actor_id` as a runtime that holds nothing in memory reads it, and the
/// number of `add` messages committed as completed for it.
async fn total_and_completed_adds(harness: &Harness, actor_id: &str) -> (u64, i64) {
    let uncached = harness
        .builder()
        .await
        .state_cache(0)
        .start()
        .await
        .expect("the runtime starts");
    let (total, _) = uncached
        .reference::<Archive>(actor_id)
        .contents()
        .await
        .unwrap();
    uncached.close().await;
    let completed = support::count(
        harness,
        &format!(
            "solid_messages WHERE actor_id = '{actor_id}' AND operation = 'add' \
             AND status = 'completed'"
        ),
    )
    .await;
    (total, completed)
}

/// Callers of two runtimes race on one actor whose large state each runtime holds, and half
/// of them are dropped at varied points of their calls (before the lock, inside it, inside
/// the write, at the commit): every `add(1)` that committed is in the total exactly once, as
/// the database holds it and as each runtime's next turn runs on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_dropped_mid_call_on_two_runtimes_leave_every_committed_add_in_the_total_once() {
    let harness = Harness::new();
    let first = harness.start().await;
    let second = harness.start().await;
    let on_first = first.reference::<Archive>("a-chaos");
    let on_second = second.reference::<Archive>("a-chaos");
    assert_eq!(on_first.add(0).await.unwrap(), 0);
    assert_eq!(on_second.add(0).await.unwrap(), 0);

    for round in 0..6_usize {
        let mut calls = Vec::new();
        for n in 0..8_usize {
            let archive = if n % 2 == 0 {
                on_first.clone()
            } else {
                on_second.clone()
            };
            calls.push(tokio::spawn(async move { archive.add(1).await }));
        }
        abort_some(calls, |n| ((n + round) % 2 == 0).then_some(n * 3 + round)).await;
    }
    first.testing().drain().await.unwrap();
    second.testing().drain().await.unwrap();
    let (stored, completed) = total_and_completed_adds(&harness, "a-chaos").await;
    // Each runtime's next turn runs on the committed total (its own held state or the row).
    let from_first = on_first.add(0).await.unwrap();
    let from_second = on_second.add(0).await.unwrap();

    let adds = u64::try_from(completed).unwrap();
    assert_eq!(
        (stored, from_first, from_second),
        (adds - 2, adds - 2, adds - 2),
        "{completed} completed adds (two of them add(0)); the database, the first and the \
         second runtime saw these totals"
    );
    first.close().await;
    second.close().await;
}

/// The largest id of a completed message of `operation` for `actor_id` (0 if none).
async fn last_completed(harness: &Harness, actor_id: &str, operation: &str) -> i64 {
    let pool = support::connect(harness).await;
    let id: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT MAX(id) FROM solid_messages WHERE actor_id = '{actor_id}' \
         AND operation = '{operation}' AND status = 'completed'"
    ))
    .fetch_one(&pool)
    .await
    .expect("the query runs");
    pool.close().await;
    id.unwrap_or(0)
}

/// One runtime adds to an actor whose large state it holds while another destroys it by a
/// turn, both with callers dropped at varied points: the total is the number of adds
/// committed after the last destroy, as the database holds it and as each runtime's next turn
/// runs on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_racing_destroys_on_two_runtimes_count_only_what_followed_the_last_destroy() {
    let harness = Harness::new();
    let adder = harness.start().await;
    let burner = harness.start().await;
    let adding = adder.reference::<Archive>("a-burnt");
    let burning = burner.reference::<Archive>("a-burnt");
    assert_eq!(adding.add(1).await.unwrap(), 1);

    for round in 0..6_usize {
        let mut calls = Vec::new();
        for n in 0..6_usize {
            let adding = adding.clone();
            calls.push(tokio::spawn(async move { adding.add(1).await.map(|_| ()) }));
            if n == 2 + round % 3 {
                let burning = burning.clone();
                calls.push(tokio::spawn(async move { burning.burn().await }));
            }
        }
        abort_some(calls, |n| ((n + round) % 3 == 0).then_some(n * 2 + round)).await;
    }
    adder.testing().drain().await.unwrap();
    burner.testing().drain().await.unwrap();
    let last_burn = last_completed(&harness, "a-burnt", "burn").await;
    let adds_since = support::count(
        &harness,
        &format!(
            "solid_messages WHERE actor_id = 'a-burnt' AND operation = 'add' \
             AND status = 'completed' AND id > {last_burn}"
        ),
    )
    .await;
    let (stored, _) = total_and_completed_adds(&harness, "a-burnt").await;
    let from_adder = adding.add(0).await.unwrap();
    let from_burner = burning.add(0).await.unwrap();

    let adds = u64::try_from(adds_since).unwrap();
    assert_eq!(
        (stored, from_adder, from_burner),
        (adds, adds, adds),
        "{adds_since} adds completed after the last destroy (message {last_burn})"
    );
    adder.close().await;
    burner.close().await;
}
