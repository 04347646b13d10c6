//! Crashes of calls that share one transaction: a process killed with SIGKILL while a group
//! of 8 turns is open keeps all of them or none, and every caller that heard "committed"
//! finds its turn afterwards, by its idempotency key, with the answer it heard.
//!
//! The child is this test binary re-run to execute only `grouped_calls_process` (which does
//! nothing unless the parent set `GROUPED_CRASH_DATABASE`). It calls one actor in rounds of
//! 8 concurrent calls; the round's first turn waits in its handler until the round's other 7
//! calls wait for it, so each round is one group of 8. Each turn writes a row of its own to
//! the application's `entries` table. Every answer a caller hears is appended to a file
//! before the next round starts, with the process's count of grouped turns.
//!
//! Two kills: in one round the 8th turn stops in its handler, with the group's 7 other
//! turns written in the same open transaction, and the parent kills the process there;
//! otherwise the parent kills it at whatever point the rounds have reached after 5 rounds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::support::children::running_only;
use crate::support::each_backend::{own_database, test_on_each_backend};
use crate::support::runtimes::{builder, execute, execute_in_turn_with, pool};
use crate::support::{eventually, Backend};
use solid_objects::prelude::*;
use solid_objects::GroupCommit;

const DATABASE: &str = "GROUPED_CRASH_DATABASE";
const ANSWERS: &str = "GROUPED_CRASH_ANSWERS";
/// The round whose 8th turn stops in its handler, and the file it then writes.
const STOP_ROUND: &str = "GROUPED_CRASH_STOP_ROUND";
const STOP_MARKER: &str = "GROUPED_CRASH_STOP_MARKER";
/// The calls of one round, and so the turns of its group.
const ROUND: u32 = 8;
/// The kills that stop a group in its 8th turn do it in this round.
const STOPPED_ROUND: u32 = 3;

/// How many of the child's calls have begun.
static STARTED: AtomicU32 = AtomicU32::new(0);

/// Keeps the numbers it is given, each also as a row of the application's `entries`.
#[actor]
#[derive(Default)]
struct Ledger {
    entries: Vec<u32>,
}

#[actor]
impl Ledger {
    #[command]
    async fn add(&mut self, turn: &mut Turn<Self>, n: u32) -> Result<usize, TurnError> {
        insert_entry(turn, n).await?;
        let round = n / ROUND;
        let position = self.entries.len() as u32 % ROUND;
        self.entries.push(n);
        // Only the child forms rounds; the parent's checks call it alone.
        let child = std::env::var(DATABASE).is_ok();
        if child && position == 0 {
            // The round's leader: its group takes in the calls that wait when its turn is
            // written, so it waits until all of them do. The child's runtime runs on one
            // thread: a yield lets every other call that can go on reach its wait.
            while STARTED.load(Ordering::Acquire) < (round + 1) * ROUND {
                tokio::task::yield_now().await;
            }
            for _ in 0..ROUND {
                tokio::task::yield_now().await;
            }
        }
        let stop = std::env::var(STOP_ROUND).ok().and_then(|r| r.parse().ok());
        if position == ROUND - 1 && stop == Some(round) {
            let written = round_entries(turn, round).await?;
            let marker = std::env::var(STOP_MARKER).map_err(Failure::retryable)?;
            // Written whole before the parent sees it: renamed into place.
            let partial = format!("{marker}.partial");
            std::fs::write(&partial, written.to_string()).map_err(Failure::retryable)?;
            std::fs::rename(&partial, marker).map_err(Failure::retryable)?;
            std::future::pending::<()>().await;
        }
        Ok(self.entries.len())
    }
}

/// Writes `n` to `entries` in the turn's transaction.
async fn insert_entry(turn: &mut Turn<Ledger>, n: u32) -> Result<(), TurnError> {
    let insert = "INSERT INTO entries (n) VALUES ($1)";
    execute_in_turn_with(turn, insert, &[], &[i64::from(n)]).await
}

/// How many rows of `round` the turn's transaction sees.
async fn round_entries(turn: &mut Turn<Ledger>, round: u32) -> Result<i64, TurnError> {
    let from = i64::from(round * ROUND);
    let count = if turn.postgres().await.is_ok() {
        sqlx::query_scalar("SELECT COUNT(*) FROM entries WHERE n >= $1")
            .bind(from)
            .fetch_one(turn.postgres().await?)
            .await?
    } else if turn.mysql().await.is_ok() {
        sqlx::query_scalar("SELECT COUNT(*) FROM entries WHERE n >= ?")
            .bind(from)
            .fetch_one(turn.mysql().await?)
            .await?
    } else {
        sqlx::query_scalar("SELECT COUNT(*) FROM entries WHERE n >= ?")
            .bind(from)
            .fetch_one(turn.sqlite().await?)
            .await?
    };
    Ok(count)
}

/// The idempotency key of the call that adds `n`.
fn key(n: u32) -> String {
    format!("add-{n}")
}

/// The child: rounds of 8 concurrent calls to one actor, for ever, or until the stopped
/// round's 8th turn. A group takes in turns for as long as the calls may wait.
#[tokio::test(flavor = "current_thread")]
async fn grouped_calls_process() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    let answers = PathBuf::from(std::env::var(ANSWERS).unwrap());
    let runtime = builder(&database, 4)
        .policy(AllowAll)
        .group_commit(GroupCommit::default().max_wait(Duration::from_secs(60)))
        .actor::<Ledger>()
        .start()
        .await
        .expect("the child's runtime starts");
    let ledger = runtime
        .reference::<Ledger>("hot")
        .timeout(Duration::from_secs(60));
    for round in 0.. {
        let calls: Vec<_> = (round * ROUND..(round + 1) * ROUND)
            .map(|n| {
                let ledger = ledger.clone();
                tokio::spawn(async move {
                    let keyed = ledger.idempotency_key(key(n));
                    let call = keyed.add(n);
                    STARTED.fetch_add(1, Ordering::AcqRel);
                    (n, call.await.expect("the call commits"))
                })
            })
            .collect();
        let mut heard = String::new();
        for call in calls {
            let (n, position) = call.await.unwrap();
            heard.push_str(&format!("{n} {position}\n"));
        }
        heard.push_str(&format!("grouped {}\n", runtime.stats().grouped_turns));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&answers)
            .unwrap();
        file.write_all(heard.as_bytes()).unwrap();
    }
}

/// The parent's side: the database and what the children heard.
struct Crashed {
    database: String,
    dir: tempfile::TempDir,
}

impl Crashed {
    fn answers(&self) -> PathBuf {
        self.dir.path().join("answers")
    }

    fn spawn(&self, stop: Option<(u32, &Path)>) -> Child {
        let mut command = running_only("crashed_groups::grouped_calls_process");
        command
            .env(DATABASE, &self.database)
            .env(ANSWERS, self.answers());
        if let Some((round, marker)) = stop {
            command
                .env(STOP_ROUND, round.to_string())
                .env(STOP_MARKER, marker);
        }
        command.spawn().expect("the child starts")
    }

    /// What the callers heard: (n, the position it was told) for every answer, and the
    /// grouped turns the child had counted by its last round.
    fn heard(&self) -> (Vec<(u32, usize)>, u64) {
        let text = std::fs::read_to_string(self.answers()).unwrap_or_default();
        let mut heard = Vec::new();
        let mut grouped = 0;
        for line in text.lines() {
            let (first, second) = line.split_once(' ').unwrap();
            if first == "grouped" {
                grouped = second.parse().unwrap();
            } else {
                heard.push((first.parse().unwrap(), second.parse().unwrap()));
            }
        }
        (heard, grouped)
    }

    /// The numbers in the application's `entries`, in order.
    async fn entries(&self) -> Vec<u32> {
        let pool = pool(&self.database).await;
        let rows: Vec<i64> = sqlx::query_scalar("SELECT n FROM entries ORDER BY n")
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        rows.into_iter().map(|n| n as u32).collect()
    }

    /// What is left after a kill: the rows and the state agree, both are whole rounds'
    /// turns or whole groups of them, every answer heard is there with its message, and
    /// the actor serves the next call. Returns the turns kept.
    async fn check(&self) -> Vec<u32> {
        let runtime = builder(&self.database, 4)
            .policy(AllowAll)
            .actor::<Ledger>()
            .start()
            .await
            .unwrap();
        let ledger = runtime.reference::<Ledger>("hot");
        let state = ledger.snapshot().await.unwrap().entries;
        let rows = self.entries().await;
        assert_eq!(
            state.len(),
            rows.len(),
            "the state and the application's rows were committed apart"
        );
        let mut in_state = state.clone();
        in_state.sort_unstable();
        assert_eq!(in_state, rows, "a turn's row and its state were kept apart");
        let (heard, grouped) = self.heard();
        for (n, position) in &heard {
            assert_eq!(
                state.get(position - 1),
                Some(n),
                "the caller of {n} heard it committed at {position}"
            );
            let message = ledger
                .message_with_key(&key(*n))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("the message of {n}, heard committed, is gone"));
            assert_eq!(
                message.typed::<usize>().result().await.unwrap(),
                Some(*position)
            );
        }
        let rounds = heard.len() as u64 / u64::from(ROUND);
        assert!(
            grouped >= rounds * u64::from(ROUND - 1),
            "{rounds} rounds ran {grouped} turns in another's transaction: they were not \
             groups of {ROUND}"
        );
        // No message is left orphaned or locked: the next call runs after the dead
        // process's connections are gone.
        let next = eventually(Duration::from_secs(30), || async {
            ledger
                .clone()
                .timeout(Duration::from_secs(2))
                .add(state.len() as u32)
                .await
                .is_ok()
        })
        .await;
        assert!(next, "the actor never served a call after the kill");
        let after = ledger.snapshot().await.unwrap().entries;
        assert_eq!(after.len(), state.len() + 1);
        runtime.close().await;
        state
    }
}

/// Kills the child while the stopped round's group of 8 is open in its 8th turn: none of
/// the round is kept, and the rounds before it are, each as its callers heard it.
async fn killed_in_an_open_group(database: String) {
    let crashed = Crashed {
        database,
        dir: tempfile::tempdir().unwrap(),
    };
    execute(&crashed.database, CREATE_ENTRIES).await;
    let marker = crashed.dir.path().join("stopped");
    let mut child = crashed.spawn(Some((STOPPED_ROUND, &marker)));
    let stopped = wait_for(&mut child, || marker.exists());
    kill(child);
    assert!(stopped, "the child never reached its group's 8th turn");
    let written = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(
        written, "8",
        "the 8th turn's transaction did not hold its group's 8 rows"
    );
    let kept = crashed.check().await;
    let before: Vec<u32> = (0..STOPPED_ROUND * ROUND).collect();
    let mut sorted = kept.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, before, "the open group kept some of its turns");
}

/// Kills the child at whatever point it reached after 5 rounds: whatever it was doing,
/// the turns kept are whole groups, and every answer heard is kept.
async fn killed_between_or_in_groups(database: String) {
    let crashed = Crashed {
        database,
        dir: tempfile::tempdir().unwrap(),
    };
    execute(&crashed.database, CREATE_ENTRIES).await;
    let mut child = crashed.spawn(None);
    let ran = wait_for(&mut child, || crashed.heard().0.len() >= 5 * ROUND as usize);
    kill(child);
    assert!(ran, "the child never ran 5 rounds");
    let kept = crashed.check().await;
    assert_eq!(
        kept.len() % ROUND as usize,
        0,
        "the kill kept part of a group: {kept:?}"
    );
}

/// The application's table of the numbers its turns add.
const CREATE_ENTRIES: &str = "CREATE TABLE entries (n BIGINT NOT NULL)";

/// Waits up to a minute for `reached`, failing early if the child exits.
fn wait_for(child: &mut Child, mut reached: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if reached() {
            return true;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited by itself: {status}");
        }
        std::thread::yield_now();
    }
    false
}

fn kill(mut child: Child) {
    child.kill().expect("SIGKILL the child");
    child.wait().expect("the child is reaped");
}

test_on_each_backend! {
    on_sqlite_a_process_killed_in_a_group_of_eight_keeps_all_or_none => killed_in_groups_on(Sqlite),
    on_postgres_a_process_killed_in_a_group_of_eight_keeps_all_or_none =>
        killed_in_groups_on(Postgres),
    on_mariadb_a_process_killed_in_a_group_of_eight_keeps_all_or_none =>
        killed_in_groups_on(MariaDb),
}

/// Both kills, each on a database of its own on `backend` (skipped where its server is not
/// installed).
async fn killed_in_groups_on(backend: Backend) {
    let (open, anywhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let Some((open, _open_server)) = own_database(backend, open.path()).await else {
        return;
    };
    killed_in_an_open_group(open).await;
    let Some((anywhere, _server)) = own_database(backend, anywhere.path()).await else {
        return;
    };
    killed_between_or_in_groups(anywhere).await;
}
