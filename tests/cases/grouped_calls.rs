//! Calls that share one transaction: the turns of a hot actor's callers, and on a server of
//! other actors' callers too, run in the transaction of the call before them and commit with
//! it; each caller hears its own turn, only after that commit, in the mailbox's order.

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use solid_objects::prelude::*;
use solid_objects::GroupCommit;
use support::fixtures::started;
use support::gates::gate;
use support::journal::{Journal, JournalRef};
use support::{count, together, Harness};

/// The hot actor, which exists after its first call (its message is the mailbox's first).
async fn warm_hot_actor(runtime: &Runtime) -> JournalRef {
    let hot = runtime.reference::<Journal>("hot");
    hot.record("warm-up".to_owned()).await.unwrap();
    hot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_callers_of_one_actor_share_commits_and_each_hears_its_own_turn() {
    let (harness, runtime) = started().await;
    let hot = warm_hot_actor(&runtime).await;
    let before = runtime.stats();

    let answers = together(16, |caller| {
        let hot = hot.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..10 {
                answers.push(hot.record(format!("{caller}-{n}")).await.unwrap());
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
    assert_eq!(state.entries.len(), 161);
    for (caller, calls) in answers.iter().enumerate() {
        for (n, position) in calls.iter().enumerate() {
            assert_eq!(state.entries[position - 1], format!("{caller}-{n}"));
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
    let (harness, runtime) = started().await;
    let hot = warm_hot_actor(&runtime).await;

    let answers = together(12, |caller| {
        let hot = hot.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..6 {
                let what = format!("{caller}-{n}");
                answers.push(match (caller + n) % 2 {
                    0 => hot.record(what).await.map_err(|error| error.to_string()),
                    _ => hot
                        .record_then_reject(what)
                        .await
                        .map_err(|error| error.to_string()),
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
        state.entries.len(),
        37,
        "only the notes are kept: {:?}",
        state.entries
    );
    for (caller, calls) in answers.iter().enumerate() {
        for (n, answer) in calls.iter().enumerate() {
            let kept = state.entries.contains(&format!("{caller}-{n}"));
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
    let (_harness, runtime) = started().await;
    let hot = warm_hot_actor(&runtime).await;

    let answers = together(16, |caller| {
        let hot = hot.clone();
        async move {
            let key = format!("key-{}", caller % 4);
            let what = format!("once-{}", caller % 4);
            hot.idempotency_key(key).record(what).await.unwrap()
        }
    })
    .await;

    let state = hot.snapshot().await.unwrap();
    assert_eq!(state.entries.len(), 5, "{:?}", state.entries);
    for caller in 0..16 {
        let what = format!("once-{}", caller % 4);
        assert_eq!(state.entries[answers[caller] - 1], what);
        assert_eq!(answers[caller], answers[caller % 4]);
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_group_commit_off_every_call_is_a_transaction_of_its_own() {
    let harness = Harness::new();
    let runtime = grouped_runtime(&harness, GroupCommit::off()).await;
    let hot = warm_hot_actor(&runtime).await;
    let before = runtime.stats();
    together(8, |caller| {
        let hot = hot.clone();
        async move {
            for n in 0..5 {
                hot.record(format!("{caller}-{n}")).await.unwrap();
            }
        }
    })
    .await;
    let after = runtime.stats();
    assert_eq!(after.grouped_turns, before.grouped_turns);
    assert_eq!(after.transactions - before.transactions, 40);
    assert_eq!(hot.snapshot().await.unwrap().entries.len(), 41);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_dropped_while_they_wait_in_a_group_keep_all_or_nothing_and_nothing_wedges() {
    let (harness, runtime) = started().await;
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
                let call = hot.record(what.clone());
                answers.push((what, tokio::time::timeout(patience, call).await));
            }
            answers
        }
    })
    .await;
    // A dropped call whose message was committed behind another's turn runs later, by the
    // workers: the checks wait until none is left to run.
    let settled = support::eventually(Duration::from_secs(20), || async {
        count(&harness, "solid_messages WHERE status = 'ready'").await == 0
    })
    .await;
    assert!(settled, "queued messages never ran");

    let state = hot.snapshot().await.unwrap();
    let unique: BTreeSet<&String> = state.entries.iter().collect();
    assert_eq!(
        unique.len(),
        state.entries.len(),
        "a turn ran twice: {:?}",
        state.entries
    );
    for (what, answer) in answers.iter().flatten() {
        if let Ok(Ok(position)) = answer {
            assert_eq!(
                &state.entries[position - 1],
                what,
                "a caller heard another's turn"
            );
        }
    }
    // Every kept turn has its completed message row, and the next call comes after them.
    let completed = count(&harness, "solid_messages WHERE status = 'completed'").await;
    assert_eq!(completed, i64::try_from(state.entries.len()).unwrap());
    let rows = count(&harness, "solid_messages").await;
    let next = hot.record("after".to_owned()).await.unwrap();
    assert_eq!(next, usize::try_from(rows).unwrap() + 1);
    let after = hot.snapshot().await.unwrap();
    let unique: BTreeSet<&String> = after.entries.iter().collect();
    assert_eq!(unique.len(), after.entries.len(), "a turn ran twice");
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
    let held = runtime.reference::<Journal>("held");
    held.record("created".to_owned()).await.unwrap();
    for actor in 0..8 {
        let counter = runtime.reference::<Journal>(format!("c-{actor}"));
        counter.record("created".to_owned()).await.unwrap();
    }
    // Another program holds one actor's row while the calls run.
    let pool = support::connect(&harness).await;
    let mut other = pool.begin().await.unwrap();
    // By its whole key: InnoDB locks every row a scan passes.
    let lock = "SELECT 1 FROM solid_instances \
                WHERE actor_type = 'Journal' AND actor_id = 'held' FOR UPDATE";
    sqlx::query(lock).fetch_all(&mut *other).await.unwrap();
    let waiting = tokio::spawn({
        let held = held.clone();
        async move { held.record("after the lock".to_owned()).await }
    });

    let answers = together(16, |caller| {
        let runtime = runtime.clone();
        async move {
            let mut answers = Vec::new();
            for n in 0..5 {
                let counter = runtime.reference::<Journal>(format!("c-{}", (caller + n) % 8));
                answers.push(counter.record(format!("{caller}-{n}")).await);
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
        let counter = runtime.reference::<Journal>(format!("c-{actor}"));
        assert_eq!(counter.snapshot().await.unwrap().entries.len(), 11);
    }
    pool.close().await;
    runtime.close().await;
}

/// A number no other run of a handler in this process got.
static STAMPS: AtomicU64 = AtomicU64::new(1000);

/// How many times each named handler ran, committed or not.
static RUNS: LazyLock<Mutex<HashMap<String, u32>>> = LazyLock::new(Mutex::default);

fn runs_of(name: &str) -> u32 {
    RUNS.lock().unwrap().get(name).copied().unwrap_or(0)
}

/// An actor whose every run of a turn answers a number of its own, so a caller that heard a
/// run that never committed cannot match the committed one by chance.
#[actor]
#[derive(Default)]
struct Stamper {
    kept: Vec<String>,
}

#[actor]
impl Stamper {
    /// A fresh number for this run.
    #[command]
    fn stamp(&mut self) -> u64 {
        let stamp = STAMPS.fetch_add(1, Ordering::SeqCst);
        self.kept.push(format!("stamp-{stamp}"));
        stamp
    }

    /// Marks `what` in the application's table, then runs a statement that takes about a
    /// second, in the turn's transaction.
    #[command]
    async fn slow_mark(&mut self, turn: &mut Turn<Self>, what: String) -> Result<u64, TurnError> {
        *RUNS.lock().unwrap().entry(what.clone()).or_default() += 1;
        support::execute_in_turn(turn, "INSERT INTO marks (what) VALUES (?)", &[&what]).await?;
        let slow = if turn.sqlite().await.is_ok() {
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) \
             SELECT count(*) FROM c"
        } else if turn.postgres().await.is_ok() {
            "SELECT pg_sleep(1)"
        } else {
            "SELECT SLEEP(1)"
        };
        support::execute_in_turn(turn, slow, &[]).await?;
        self.kept.push(what);
        Ok(STAMPS.fetch_add(1, Ordering::SeqCst))
    }

    /// Counts its run under `name`, waits at the gate `name`, then answers a fresh number.
    #[command]
    async fn wait_at(&mut self, name: String) -> u64 {
        *RUNS.lock().unwrap().entry(name.clone()).or_default() += 1;
        self.kept.push(name.clone());
        gate(&name).pass().await;
        STAMPS.fetch_add(1, Ordering::SeqCst)
    }
}

/// A runtime on the harness that groups commits as `grouping` says.
async fn grouped_runtime(harness: &Harness, grouping: GroupCommit) -> Runtime {
    let builder = harness.builder().await.group_commit(grouping);
    builder.start().await.unwrap()
}

/// A runtime whose groups take members in for at most `max_wait`.
async fn grouping_for(harness: &Harness, max_wait: Duration) -> Runtime {
    grouped_runtime(harness, GroupCommit::default().max_wait(max_wait)).await
}

/// A runtime whose groups take members in for long enough that a case arranges them, and
/// the stamper `id` on it, warm.
async fn patient_stamper(id: &str) -> (Harness, Runtime, StamperRef) {
    let harness = Harness::new();
    let runtime = grouping_for(&harness, Duration::from_secs(20)).await;
    let stamper = warm_stamper(&runtime, id).await;
    (harness, runtime, stamper)
}

/// Spawns `call` and lets it run to where it waits: these cases run on one thread, where a
/// call enters its group without awaiting anything, so it joins (or leads) before the case
/// goes on, and the calls queue in the order they were made.
async fn spawned<T: Send + 'static>(
    call: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let handle = tokio::spawn(call);
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    handle
}

/// A call of a stamper spawned as [`spawned`] spawns it; its answer, once it has one.
type Spawned = JoinHandle<Result<u64, Error>>;

/// `stamper.wait_at(name)`, spawned.
async fn spawned_wait_at(stamper: &StamperRef, name: &str) -> Spawned {
    let (stamper, name) = (stamper.clone(), name.to_owned());
    spawned(async move { stamper.wait_at(name).await }).await
}

/// `stamper.wait_at(name)` of a caller that gives up after 700 ms, spawned: the gate `name`
/// never opens.
async fn spawned_giving_up(stamper: &StamperRef, name: &str) -> Spawned {
    let impatient = stamper.clone().timeout(Duration::from_millis(700));
    spawned_wait_at(&impatient, name).await
}

/// `stamper.stamp()`, under the idempotency key `key` if there is one, spawned.
async fn spawned_stamp(stamper: &StamperRef, key: Option<&str>) -> Spawned {
    let stamper = match key {
        Some(key) => stamper.clone().idempotency_key(key),
        None => stamper.clone(),
    };
    spawned(async move { stamper.stamp().await }).await
}

/// A call of `hot.wait_at(name)` that waits at its gate: the leader of a group whose
/// members the case then queues behind it.
async fn leader(hot: &StamperRef, name: &str) -> Spawned {
    let leader = spawned_wait_at(hot, name).await;
    gate(name).reached(1).await;
    leader
}

/// A stamper of the runtime that exists (its first turn has committed).
async fn warm_stamper(runtime: &Runtime, id: &str) -> StamperRef {
    let stamper = runtime.reference::<Stamper>(id);
    stamper.stamp().await.unwrap();
    stamper
}

#[tokio::test(flavor = "current_thread")]
async fn a_member_whose_caller_gives_up_mid_handler_undoes_only_its_own_turn() {
    let (_harness, runtime, hot) = patient_stamper("late").await;

    let (leader_gate, member_gate) = ("late-leader", "late-member");
    let leader = leader(&hot, leader_gate).await;
    let member = spawned_wait_at(&hot, member_gate).await;
    let late = spawned_giving_up(&hot, "late-never-opened").await;
    gate(leader_gate).open();
    gate(member_gate).open();

    assert!(late.await.unwrap().is_err(), "its caller gave up");
    leader.await.unwrap().unwrap();
    member.await.unwrap().unwrap();
    assert_eq!(
        (runs_of(leader_gate), runs_of(member_gate)),
        (1, 1),
        "a member that ran out of its caller's time undid the other turns of its group"
    );
    let kept = hot.snapshot().await.unwrap().kept;
    assert_eq!(kept[1..], [leader_gate, member_gate], "{kept:?}");
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_member_whose_key_an_earlier_member_wrote_hears_only_what_commits() {
    let (_harness, runtime, hot) = patient_stamper("keys").await;

    // The leader's handler waits while two calls under one key queue behind it, then one
    // whose caller gives up in its handler: its turn is undone, the rest commit.
    let leader_gate = "keys-leader";
    let leader = leader(&hot, leader_gate).await;
    let first = spawned_stamp(&hot, Some("k")).await;
    let second = spawned_stamp(&hot, Some("k")).await;
    let late = spawned_giving_up(&hot, "keys-never-opened").await;
    gate(leader_gate).open();

    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(late.await.unwrap().is_err(), "its caller gave up");
    leader.await.unwrap().unwrap();
    let again = hot.idempotency_key("k").stamp().await.unwrap();
    assert_eq!(first, again, "the first caller heard what committed");
    assert_eq!(
        second, first,
        "the second caller of key k heard another run"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_leader_dropped_after_taking_members_leaves_no_caller_a_false_answer() {
    let (_harness, runtime, hot) = patient_stamper("dropped").await;

    let (leader_gate, blocker_gate) = ("dropped-leader", "dropped-blocker");
    let leader = leader(&hot, leader_gate).await;
    let first = spawned_stamp(&hot, Some("k")).await;
    let second = spawned_stamp(&hot, Some("k")).await;
    let blocker = spawned_wait_at(&hot, blocker_gate).await;
    gate(leader_gate).open();
    // The leader has run its members' turns, and waits in the last one's handler.
    gate(blocker_gate).reached(1).await;
    let heard_before_the_commit = first.is_finished() || second.is_finished();
    leader.abort();
    let _ = leader.await;
    gate(blocker_gate).open();

    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    blocker.await.unwrap().unwrap();
    assert!(
        !heard_before_the_commit,
        "a member heard its answer while its group's transaction was open"
    );
    let again = hot.idempotency_key("k").stamp().await.unwrap();
    assert_eq!(
        first, again,
        "the first caller of key k heard a run that never committed"
    );
    assert_eq!(
        second, first,
        "the second caller of key k heard another run"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn grouped_turns_counts_only_turns_that_committed_in_a_group() {
    let (_harness, runtime, hot) = patient_stamper("counted").await;

    let (leader_gate, blocker_gate) = ("counted-leader", "counted-blocker");
    let leader = leader(&hot, leader_gate).await;
    let before = runtime.stats();
    let member = spawned_stamp(&hot, None).await;
    let blocker = spawned_wait_at(&hot, blocker_gate).await;
    gate(leader_gate).open();
    gate(blocker_gate).reached(1).await;
    // The leader goes away with its group: nothing of it commits, and its members run again
    // in transactions of their own.
    leader.abort();
    let _ = leader.await;
    gate(blocker_gate).open();
    member.await.unwrap().unwrap();
    blocker.await.unwrap().unwrap();
    let after = runtime.stats();

    let kept = hot.snapshot().await.unwrap().kept;
    assert_eq!(
        kept.len(),
        3,
        "the warm-up, the member and the blocker: {kept:?}"
    );
    assert_eq!(
        after.grouped_turns - before.grouped_turns,
        0,
        "no turn committed in a group ({} transactions)",
        after.transactions - before.transactions
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_group_that_takes_members_in_for_ever_still_answers_its_calls() {
    let harness = Harness::new();
    let runtime = grouping_for(&harness, Duration::MAX).await;
    let hot = runtime.reference::<Stamper>("for-ever");
    let answer = tokio::spawn(async move { hot.stamp().await }).await;
    assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_member_cut_off_mid_statement_by_the_groups_budget_keeps_nothing_and_runs_once() {
    let harness = Harness::new();
    support::execute(&harness, "CREATE TABLE marks (what TEXT NOT NULL)").await;
    let runtime = grouping_for(&harness, Duration::from_millis(300)).await;
    let hot = warm_stamper(&runtime, "slow").await;

    let leader_gate = "slow-leader";
    let leader = leader(&hot, leader_gate).await;
    let slow = spawned({
        let hot = hot.clone();
        async move { hot.slow_mark("slow-member".to_owned()).await }
    })
    .await;
    let after = spawned_stamp(&hot, None).await;
    gate(leader_gate).open();
    let (leader, slow, after) = (
        leader.await.unwrap(),
        slow.await.unwrap(),
        after.await.unwrap(),
    );
    assert!(
        leader.is_ok() && slow.is_ok() && after.is_ok(),
        "{leader:?} {slow:?} {after:?}"
    );
    assert_eq!(
        runs_of(leader_gate),
        1,
        "the group's transaction was lost with the member"
    );
    let marks = count(&harness, "marks").await;
    let kept = hot.snapshot().await.unwrap().kept;
    let slow_kept = kept.iter().filter(|what| *what == "slow-member").count();
    assert_eq!((marks, slow_kept), (1, 1), "{kept:?}");
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_new_actor_created_elsewhere_never_holds_the_group_its_call_joins() {
    let harness = Harness::new();
    if !harness.backend().is_server() {
        return;
    }
    let runtime = grouping_for(&harness, Duration::from_secs(20)).await;
    let one = runtime.reference::<Stamper>("one");
    let two = runtime.reference::<Stamper>("two");
    let other = runtime.reference::<Stamper>("other");
    let fresh = runtime.reference::<Stamper>("fresh");
    for actor in [&one, &two, &other] {
        actor.stamp().await.unwrap();
    }
    // Another program creates actor "fresh", as another process's first call of it does,
    // and holds its new row.
    let pool = support::connect(&harness).await;
    let mut elsewhere = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO solid_instances (actor_type, actor_id, updated_at) \
         VALUES ('Stamper', 'fresh', 0)",
    )
    .execute(&mut *elsewhere)
    .await
    .unwrap();

    // Two groups open; the second takes members in, and waits in its first member's handler.
    let (one_gate, two_gate, member_gate) = ("fresh-one", "fresh-two", "fresh-two-member");
    let first = leader(&one, one_gate).await;
    let second = leader(&two, two_gate).await;
    let member = spawned_wait_at(&two, member_gate).await;
    gate(two_gate).open();
    gate(member_gate).reached(1).await;
    // Calls of other actors join the group that takes members in.
    let fresh_call = spawned_stamp(&fresh, None).await;
    let other_call = spawned_stamp(&other, None).await;
    gate(member_gate).open();

    let other_heard = tokio::time::timeout(Duration::from_secs(3), other_call).await;
    elsewhere.commit().await.unwrap();
    gate(one_gate).open();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    member.await.unwrap().unwrap();
    fresh_call.await.unwrap().unwrap();
    assert!(
        matches!(other_heard, Ok(Ok(Ok(_)))),
        "a call waited behind a member whose new row another program was creating: \
         {other_heard:?}"
    );
    pool.close().await;
    runtime.close().await;
}
