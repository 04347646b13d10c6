//! Group commit on SQLite: turns that arrive together share one transaction and one commit,
//! each inside its own savepoint; a turn that rejects or is cancelled undoes only its own part;
//! a process killed during a group loses that whole group and nothing else, and every message
//! in it runs once after a restart.
//!
//! The crash test re-runs this binary as a child that executes only `group_worker_process`
//! (which does nothing unless the parent set `GROUP_WORKER_DATABASE`).

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::GroupCommit;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use support::steps::{completed, create_steps, grouped, stored_steps};
use support::{eventually, together, Harness};

const DATABASE: &str = "GROUP_WORKER_DATABASE";
const RAN_LOG: &str = "GROUP_WORKER_RAN_LOG";
const HANG_AFTER: &str = "GROUP_WORKER_HANG_AFTER";

/// A counter whose every step also writes an application row in the turn.
#[actor]
#[derive(Default)]
struct Tally {
    steps: Vec<u32>,
}

#[actor]
impl Tally {
    /// Records step `n` in the state and in the application's `steps` table; in the crash
    /// test's child, notes that it ran, and hangs once enough steps ran before it.
    #[command]
    async fn step(&mut self, turn: &mut Turn<Self>, n: u32) -> Result<usize, TurnError> {
        let actor = turn.actor_id().to_owned();
        sqlx::query("INSERT INTO steps (actor, n) VALUES ($1, $2)")
            .bind(&actor)
            .bind(n)
            .execute(turn.sqlite().await?)
            .await?;
        self.steps.push(n);
        if let Ok(log) = std::env::var(RAN_LOG) {
            let ran = note_ran(Path::new(&log), &actor, n).map_err(Failure::retryable)?;
            let hang_after: usize = std::env::var(HANG_AFTER)
                .ok()
                .and_then(|after| after.parse().ok())
                .unwrap_or(usize::MAX);
            if ran > hang_after {
                std::fs::write(Path::new(&log).with_extension("hung"), "hung")
                    .map_err(Failure::retryable)?;
                std::future::pending::<()>().await;
            }
        }
        Ok(self.steps.len())
    }

    /// Writes an application row and changes the state, then rejects: neither is kept.
    #[command]
    async fn step_then_reject(
        &mut self,
        turn: &mut Turn<Self>,
        n: u32,
    ) -> Result<usize, TurnError> {
        let actor = turn.actor_id().to_owned();
        sqlx::query("INSERT INTO steps (actor, n) VALUES ($1, $2)")
            .bind(&actor)
            .bind(n)
            .execute(turn.sqlite().await?)
            .await?;
        self.steps.push(n);
        Err(reject!(refused, "step {} is refused", n).into())
    }

    #[query]
    fn steps(&self) -> Vec<u32> {
        self.steps.clone()
    }
}

/// Appends `actor n` to the log; returns how many lines it has now.
fn note_ran(log: &Path, actor: &str, n: u32) -> std::io::Result<usize> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    writeln!(file, "{actor} {n}")?;
    drop(file);
    Ok(std::fs::read_to_string(log)?.lines().count())
}

/// A runtime on the harness's file whose groups stay open for `max_wait`.
async fn start(harness: &Harness, grouping: GroupCommit) -> Runtime {
    grouped(harness, grouping)
        .start()
        .await
        .expect("the runtime starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_callers_over_many_actors_share_commits_and_every_step_is_kept_in_order() {
    let harness = Harness::new();
    create_steps(&harness.path(), "").await;
    let grouping = GroupCommit::default().max_wait(Duration::from_millis(200));
    let runtime = start(&harness, grouping).await;
    let before = runtime.stats();
    let done = Arc::new(AtomicBool::new(false));
    let most_waiting = tokio::spawn({
        let (runtime, done) = (runtime.clone(), Arc::clone(&done));
        async move {
            let mut most = 0;
            while !done.load(Ordering::Acquire) {
                most = most.max(runtime.stats().waiting_for_writer);
                tokio::task::yield_now().await;
            }
            most
        }
    });
    let answers = together(16, |caller| {
        let runtime = runtime.clone();
        async move {
            let mut answers = Vec::new();
            for n in 1..=20 {
                let tally = runtime.reference::<Tally>(format!("t-{}", (caller + n as usize) % 40));
                answers.push(tally.step(n).await);
            }
            answers
        }
    })
    .await;
    let after = runtime.stats();
    done.store(true, Ordering::Release);
    assert!(
        most_waiting.await.unwrap() > 0,
        "sixteen callers, and none was seen waiting for the writer"
    );
    assert_eq!(
        after.waiting_for_writer, 0,
        "nobody waits once all answered"
    );
    assert!(answers.iter().flatten().all(Result::is_ok), "{answers:?}");
    let transactions = after.transactions - before.transactions;
    let commits = after.commits - before.commits;
    assert_eq!(transactions, 320, "one transaction per call");
    assert!(
        commits < transactions / 2,
        "{commits} commits for {transactions} transactions: the callers did not share commits"
    );
    let stored = stored_steps(&harness.path()).await;
    for (actor, steps) in &stored {
        let state = runtime
            .reference::<Tally>(actor.as_str())
            .steps()
            .await
            .unwrap();
        assert_eq!(&state, steps, "{actor}: the state and the rows differ");
    }
    assert_eq!(stored.values().map(Vec::len).sum::<usize>(), 320);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_group_commit_off_every_transaction_is_a_commit() {
    let harness = Harness::new();
    create_steps(&harness.path(), "").await;
    let runtime = start(&harness, GroupCommit::off()).await;
    let before = runtime.stats();
    together(8, |caller| {
        let tally = runtime.reference::<Tally>(format!("t-{caller}"));
        async move {
            for n in 1..=10 {
                tally.step(n).await.unwrap();
            }
        }
    })
    .await;
    let after = runtime.stats();
    assert_eq!(after.transactions - before.transactions, 80);
    assert_eq!(after.commits - before.commits, 80);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_that_rejects_inside_a_group_undoes_only_its_own_part() {
    let harness = Harness::new();
    create_steps(&harness.path(), "").await;
    let grouping = GroupCommit::default().max_wait(Duration::from_millis(200));
    let runtime = start(&harness, grouping).await;
    let answers = together(16, |caller| {
        let tally = runtime.reference::<Tally>(format!("t-{}", caller % 4));
        async move {
            let mut answers = Vec::new();
            for n in 1..=10 {
                let answer = if (caller + n as usize) % 3 == 0 {
                    tally.step_then_reject(n).await.map(|_| false)
                } else {
                    tally.step(n).await.map(|_| true)
                };
                answers.push(answer);
            }
            answers
        }
    })
    .await;
    let mut kept = 0;
    for answer in answers.into_iter().flatten() {
        match answer {
            Ok(true) => kept += 1,
            Err(Error::Rejected(rejection)) => assert_eq!(rejection.code(), "refused"),
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let stored = stored_steps(&harness.path()).await;
    assert_eq!(stored.values().map(Vec::len).sum::<usize>(), kept);
    for (actor, steps) in &stored {
        let state = runtime
            .reference::<Tally>(actor.as_str())
            .steps()
            .await
            .unwrap();
        assert_eq!(&state, steps, "{actor}: a rejected step was kept");
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_dropped_inside_groups_keep_all_or_nothing_and_the_writer_stays_usable() {
    let harness = Harness::new();
    create_steps(&harness.path(), "").await;
    let grouping = GroupCommit::default().max_wait(Duration::from_millis(50));
    let runtime = start(&harness, grouping).await;
    together(16, |caller| {
        let tally = runtime.reference::<Tally>(format!("t-{}", caller % 8));
        async move {
            for n in 1..=40u32 {
                // Deadlines from 0 to 3 ms drop calls at every await: waiting for the
                // writer, inside the turn, waiting for the group's commit.
                let cut =
                    Duration::from_micros(u64::from((n * 7919 + caller as u32 * 104_729) % 3000));
                let _ = tokio::time::timeout(cut, tally.step(n)).await;
            }
        }
    })
    .await;
    // Every turn that committed committed whole: its row, its state and its message.
    let stored = stored_steps(&harness.path()).await;
    let completed = completed(&harness.path()).await;
    for (actor, steps) in &stored {
        let state = runtime
            .reference::<Tally>(actor.as_str())
            .steps()
            .await
            .unwrap();
        assert_eq!(&state, steps, "{actor}: state and rows differ");
        assert_eq!(
            completed.get(actor).map(|(count, _)| *count),
            Some(steps.len() as i64),
            "{actor}"
        );
    }
    // The writer serves calls again, and another process can take the file's write lock.
    let tally = runtime.reference::<Tally>("after");
    for n in 1..=100 {
        assert_eq!(tally.step(n).await.unwrap(), n as usize);
    }
    let mut other = SqliteConnectOptions::new()
        .filename(harness.path())
        .busy_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    sqlx::query("INSERT INTO steps (actor, n) VALUES ('other', 1)")
        .execute(&mut other)
        .await
        .unwrap();
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    runtime.close().await;
}

/// A call that stops waiting while its group has not committed yet cannot know whether its
/// turn will be kept: it must not say nothing of it was kept. Every call whose step was kept
/// either returned it, or returned an error that names its message's request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_that_times_out_while_its_group_commits_names_its_message_if_the_turn_is_kept() {
    let harness = Harness::new();
    create_steps(&harness.path(), "").await;
    // Groups stay open longer than any call waits, so callers time out inside them.
    let grouping = GroupCommit::default().max_wait(Duration::from_millis(20));
    let runtime = start(&harness, grouping).await;
    let answers = Arc::new(std::sync::Mutex::new(Vec::new()));
    together(16, |caller| {
        let answers = answers.clone();
        let actor = format!("t-{}", caller % 8);
        let runtime = runtime.clone();
        async move {
            for round in 1..=30u32 {
                let n = round * 100 + caller as u32;
                let timeout = Duration::from_micros(u64::from((n * 7919) % 6000) + 500);
                let tally = runtime.reference::<Tally>(actor.as_str()).timeout(timeout);
                let answer = tally.step(n).await;
                answers.lock().unwrap().push((actor.clone(), n, answer));
            }
        }
    })
    .await;
    // Let every open group end, then read what was kept.
    let tally = runtime.reference::<Tally>("after");
    assert_eq!(tally.step(1).await.unwrap(), 1);
    let stored = stored_steps(&harness.path()).await;
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let mut named = 0;
    for (actor, n, answer) in answers {
        let kept = stored.get(&actor).is_some_and(|steps| steps.contains(&n));
        match answer {
            Ok(_) => assert!(kept, "{actor} step {n} returned Ok but was not kept"),
            Err(error) => match error.queued_request_id() {
                Some(request_id) => {
                    named += 1;
                    let message = runtime.message(request_id).await.unwrap();
                    assert!(
                        message.is_some() || !kept,
                        "{actor} step {n} was kept, but the request id its call's error named \
                         finds no message ({error})"
                    );
                }
                None => assert!(
                    !kept,
                    "{actor} step {n} was kept, but its call's error named no message: {error}"
                ),
            },
        }
    }
    println!("calls whose error named their message: {named}");
    runtime.close().await;
}

/// The crash test's child: workers that drain the parent's messages in groups, noting every
/// handler that ran; one handler hangs once enough ran before it.
#[tokio::test]
async fn group_worker_process() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    let grouping = GroupCommit::default().max_wait(Duration::from_secs(60));
    let runtime = Runtime::builder()
        .sqlite(database)
        .group_commit(grouping)
        .policy(AllowAll)
        .actor::<Tally>()
        .workers(4)
        .start()
        .await
        .expect("the child's runtime starts");
    runtime.run().await.expect("the workers run");
}

/// What one killed group left: the handlers that ran but whose turns were not kept.
struct Killed {
    ran_but_lost: usize,
}

/// Enqueues 8 steps on each of 10 actors, lets a child drain them until one handler hangs
/// after `hang_after` ran, kills the child, checks that nothing is half kept, then drains
/// the rest and checks every step ran once, in order.
async fn kill_during_a_group(hang_after: usize) -> Killed {
    let harness = Harness::new();
    let path = harness.path();
    create_steps(&path, "").await;
    let runtime = start(&harness, GroupCommit::default()).await;
    for n in 1..=8 {
        for actor in 0..10 {
            let tally = runtime.reference::<Tally>(format!("t-{actor}"));
            tally.enqueue().step(n).await.unwrap();
        }
    }
    runtime.close().await;

    let log = path.with_extension("ran");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &support::test_name(module_path!(), "group_worker_process"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DATABASE, &path)
        .env(RAN_LOG, &log)
        .env(HANG_AFTER, hang_after.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the worker process starts");
    let hung = eventually(Duration::from_secs(60), || async {
        log.with_extension("hung").exists()
    })
    .await;
    child.kill().expect("SIGKILL the worker");
    child.wait().expect("the worker is reaped");
    assert!(hung, "no handler reached the hang");

    // Nothing is half kept: every kept turn has its row, its state and its completion.
    let ran = std::fs::read_to_string(&log).unwrap().lines().count();
    let stored = stored_steps(&path).await;
    let done = completed(&path).await;
    let kept: usize = stored.values().map(Vec::len).sum();
    let runtime = start(&harness, GroupCommit::default()).await;
    for (actor, steps) in &stored {
        let state = runtime
            .reference::<Tally>(actor.as_str())
            .snapshot()
            .await
            .unwrap();
        assert_eq!(
            &state.steps, steps,
            "{actor}: state and rows differ after the kill"
        );
        assert_eq!(
            done.get(actor).map(|(count, _)| *count),
            Some(steps.len() as i64),
            "{actor}"
        );
        let expected: Vec<u32> = (1..=steps.len() as u32).collect();
        assert_eq!(steps, &expected, "{actor}: steps kept out of order");
    }
    assert!(kept < ran, "the hung turn cannot have been kept");

    // After the restart every message runs, once.
    let drained = runtime.testing().drain().await.unwrap();
    assert_eq!(drained.turns, 80 - kept, "every message not kept runs once");
    let stored = stored_steps(&path).await;
    for actor in 0..10 {
        let name = format!("t-{actor}");
        assert_eq!(stored[&name], (1..=8).collect::<Vec<u32>>(), "{name}");
        let state = runtime
            .reference::<Tally>(name.as_str())
            .snapshot()
            .await
            .unwrap();
        assert_eq!(state.steps, (1..=8).collect::<Vec<u32>>(), "{name}");
    }
    runtime.close().await;
    Killed {
        ran_but_lost: ran - kept,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_during_a_group_loses_that_group_whole_and_its_messages_run_once() {
    // On the one writer only the hung turn runs when the kill comes; every other handler
    // that ran but was not kept had joined the hung turn's group and waited for its commit.
    // Whether a member joined before the hang depends on the workers' timing: try a few
    // hang points until one shows a group of two or more lost whole.
    let mut largest = 0;
    for hang_after in [20, 33, 47, 61] {
        let killed = kill_during_a_group(hang_after).await;
        eprintln!(
            "killed after {hang_after} handlers ran: {} handlers ran but were not kept",
            killed.ran_but_lost
        );
        largest = largest.max(killed.ran_but_lost);
        if largest >= 2 {
            break;
        }
    }
    assert!(
        largest >= 2,
        "no kill landed in a group with another member (largest loss {largest})"
    );
}
