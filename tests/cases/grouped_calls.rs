//! Calls that share one transaction: the turns of a hot actor's callers, and on a server of
//! other actors' callers too, run in the transaction of the call before them and commit with
//! it; each caller hears its own turn, only after that commit, in the mailbox's order.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::GroupCommit;
use support::{count, together, Harness};

/// An actor that numbers what it is told, and can be told to reject.
#[actor]
#[derive(Default)]
struct Counter {
    seen: Vec<String>,
}

#[actor]
impl Counter {
    #[command]
    fn note(&mut self, what: String) -> usize {
        self.seen.push(what);
        self.seen.len()
    }

    #[command]
    fn refuse(&mut self, turn: &mut Turn<Self>, what: String) -> Result<usize, Rejection> {
        self.seen.push(what);
        turn.schedule(turn.now(), "never").tick();
        Err(reject!(refused, "refused"))
    }

    #[reminder]
    fn tick(&mut self) {}
}

/// The hot actor, which exists after its first call (its message is the mailbox's first).
async fn warm_hot_actor(runtime: &Runtime) -> <Counter as solid_objects::Actor>::Reference {
    let hot = runtime.reference::<Counter>("hot");
    hot.note("warm-up".to_owned()).await.unwrap();
    hot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_callers_of_one_actor_share_commits_and_each_hears_its_own_turn() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let hot = warm_hot_actor(&runtime).await;
    let before = runtime.stats();

    let answers = together(16, |caller| {
        let hot = hot.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..10 {
                answers.push(hot.note(format!("{caller}-{n}")).await.unwrap());
            }
            answers
        }
    })
    .await;

    let after = runtime.stats();
    // Every caller heard a different position, and its own calls in the order it made them.
    let heard: BTreeSet<usize> = answers.iter().flatten().copied().collect();
    assert_eq!(heard, (2..=161).collect::<BTreeSet<_>>());
    for calls in &answers {
        assert!(calls.windows(2).all(|pair| pair[0] < pair[1]), "{calls:?}");
    }
    let state = hot.snapshot().await.unwrap();
    assert_eq!(state.seen.len(), 161);
    for (caller, calls) in answers.iter().enumerate() {
        for (n, position) in calls.iter().enumerate() {
            assert_eq!(state.seen[position - 1], format!("{caller}-{n}"));
        }
    }
    let grouped = after.grouped_turns - before.grouped_turns;
    let transactions = after.transactions - before.transactions;
    assert!(
        grouped > 0,
        "sixteen callers of one actor and no turn shared a commit"
    );
    assert_eq!(
        transactions + grouped,
        160,
        "a transaction or a group's turn per call"
    );
    assert_eq!(count(&harness, "solid_messages").await, 161);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_rejects_keeps_nothing_and_the_others_commit() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let hot = warm_hot_actor(&runtime).await;

    let answers = together(12, |caller| {
        let hot = hot.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..6 {
                let what = format!("{caller}-{n}");
                answers.push(match (caller + n) % 2 {
                    0 => hot.note(what).await.map_err(|error| error.to_string()),
                    _ => hot.refuse(what).await.map_err(|error| error.to_string()),
                });
            }
            answers
        }
    })
    .await;

    let noted: usize = answers
        .iter()
        .flatten()
        .filter(|answer| answer.is_ok())
        .count();
    assert_eq!(noted, 36, "{answers:?}");
    let state = hot.snapshot().await.unwrap();
    assert_eq!(
        state.seen.len(),
        37,
        "only the notes are kept: {:?}",
        state.seen
    );
    for (caller, calls) in answers.iter().enumerate() {
        for (n, answer) in calls.iter().enumerate() {
            let kept = state.seen.contains(&format!("{caller}-{n}"));
            assert_eq!(kept, (caller + n) % 2 == 0, "{caller}-{n}: {answer:?}");
        }
    }
    // No rejected turn kept its reminder, and every call has its one message.
    assert_eq!(count(&harness, "solid_reminders").await, 0);
    assert_eq!(count(&harness, "solid_messages").await, 73);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_that_share_an_idempotency_key_on_a_hot_actor_run_it_once() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let hot = warm_hot_actor(&runtime).await;

    let answers = together(16, |caller| {
        let hot = hot.clone();
        async move {
            let key = format!("key-{}", caller % 4);
            let what = format!("once-{}", caller % 4);
            hot.idempotency_key(key).note(what).await.unwrap()
        }
    })
    .await;

    let state = hot.snapshot().await.unwrap();
    assert_eq!(state.seen.len(), 5, "{:?}", state.seen);
    for caller in 0..16 {
        let what = format!("once-{}", caller % 4);
        assert_eq!(state.seen[answers[caller] - 1], what);
        assert_eq!(answers[caller], answers[caller % 4]);
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_group_commit_off_every_call_is_a_transaction_of_its_own() {
    let harness = Harness::new();
    let runtime = harness
        .builder()
        .await
        .group_commit(GroupCommit::off())
        .start()
        .await
        .unwrap();
    let hot = warm_hot_actor(&runtime).await;
    let before = runtime.stats();
    together(8, |caller| {
        let hot = hot.clone();
        async move {
            for n in 0..5 {
                hot.note(format!("{caller}-{n}")).await.unwrap();
            }
        }
    })
    .await;
    let after = runtime.stats();
    assert_eq!(after.grouped_turns, before.grouped_turns);
    assert_eq!(after.transactions - before.transactions, 40);
    assert_eq!(hot.snapshot().await.unwrap().seen.len(), 41);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_dropped_while_they_wait_in_a_group_keep_all_or_nothing_and_nothing_wedges() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let hot = warm_hot_actor(&runtime).await;

    // Each caller drops some of its calls part-way: while queued in a group, while its turn
    // runs in another's transaction, or while it leads a group of its own.
    let answers = together(16, |caller| {
        let hot = hot.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..12u64 {
                let what = format!("{caller}-{n}");
                let patience = Duration::from_micros(50 * ((caller as u64 * 7 + n * 13) % 40));
                let call = hot.note(what.clone());
                answers.push((what, tokio::time::timeout(patience, call).await));
            }
            answers
        }
    })
    .await;

    let state = hot.snapshot().await.unwrap();
    let unique: BTreeSet<&String> = state.seen.iter().collect();
    assert_eq!(
        unique.len(),
        state.seen.len(),
        "a turn ran twice: {:?}",
        state.seen
    );
    for (what, answer) in answers.iter().flatten() {
        if let Ok(Ok(position)) = answer {
            assert_eq!(
                &state.seen[position - 1],
                what,
                "a caller heard another's turn"
            );
        }
    }
    // Every kept turn has its completed message row. A dropped call whose message was queued
    // behind another (committed, so it runs later) runs before the next call, once.
    let completed = count(&harness, "solid_messages WHERE status = 'completed'").await;
    assert_eq!(completed, i64::try_from(state.seen.len()).unwrap());
    let rows = count(&harness, "solid_messages").await;
    let next = hot.note("after".to_owned()).await.unwrap();
    assert_eq!(next, usize::try_from(rows).unwrap() + 1);
    let after = hot.snapshot().await.unwrap();
    let unique: BTreeSet<&String> = after.seen.iter().collect();
    assert_eq!(unique.len(), after.seen.len(), "a turn ran twice");
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_actor_locked_elsewhere_never_holds_the_group_its_call_would_join() {
    let harness = Harness::new();
    if !harness.backend().is_server() {
        // SQLite's other writer would hold every turn, not one actor's.
        return;
    }
    let runtime = harness.start().await;
    let held = runtime.reference::<Counter>("held");
    held.note("created".to_owned()).await.unwrap();
    for actor in 0..8 {
        let counter = runtime.reference::<Counter>(format!("c-{actor}"));
        counter.note("created".to_owned()).await.unwrap();
    }
    // Another program holds one actor's row while the calls run.
    let pool = support::connect(&harness).await;
    let mut other = pool.begin().await.unwrap();
    // By its whole key: InnoDB locks every row a scan passes.
    let lock = "SELECT 1 FROM solid_instances \
                WHERE actor_type = 'Counter' AND actor_id = 'held' FOR UPDATE";
    sqlx::query(lock).fetch_all(&mut *other).await.unwrap();
    let waiting = tokio::spawn({
        let held = held.clone();
        async move { held.note("after the lock".to_owned()).await }
    });

    let answers = together(16, |caller| {
        let runtime = runtime.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..5 {
                let counter = runtime.reference::<Counter>(format!("c-{}", (caller + n) % 8));
                answers.push(counter.note(format!("{caller}-{n}")).await);
            }
            answers
        }
    })
    .await;

    assert!(answers.iter().flatten().all(Result::is_ok), "{answers:?}");
    assert!(
        !waiting.is_finished(),
        "the held actor's call ran past the other lock"
    );
    other.commit().await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 2);
    for actor in 0..8 {
        let counter = runtime.reference::<Counter>(format!("c-{actor}"));
        assert_eq!(counter.snapshot().await.unwrap().seen.len(), 11);
    }
    pool.close().await;
    runtime.close().await;
}
