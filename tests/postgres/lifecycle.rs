//! Actors that live for years, on a real PostgreSQL server started for each test: destroy
//! and incarnations, a destroy racing a turn held open in another OS process, and recurring
//! reminders across an outage and a restart.
//!
//! The other process is this test binary itself, re-run as a child that executes only
//! `caller_process` (which does nothing unless the parent set `CALLER_DATABASE`). Time moves
//! only through the runtimes' `ManualClock`.

use std::process::Stdio;
use std::time::Duration;

use crate::support::children::running_only;
use crate::support::eventually;
use crate::support::postgres::PgServer;
use crate::support::runtimes::{builder, scalar_on as scalar};
use crate::support::subscription::{assert_destroyed, Subscription};
use crate::support::workers::fire_due_reminders;
use solid_objects::prelude::*;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::ChildStdout;

/// A throwaway server and the manual clock of the runtimes on it.
struct Server {
    server: PgServer,
    clock: ManualClock,
}

impl Server {
    /// `None` (the test skips) on a machine without PostgreSQL, outside CI.
    fn start() -> Option<Self> {
        Some(Self {
            server: PgServer::start()?,
            clock: ManualClock::starting_now(),
        })
    }

    /// A runtime on `url` with this server's clock, allowing every call.
    async fn runtime(&self, url: &str) -> Runtime {
        builder(url, 4)
            .clock(self.clock.clone())
            .policy(AllowAll)
            .sync_timeout(Duration::from_secs(30))
            .start()
            .await
            .expect("the runtime starts on PostgreSQL")
    }

    /// A new database on the server, and a runtime on it; the database's URL.
    async fn fresh(&self) -> (String, Runtime) {
        let url = self.server.database().await;
        let runtime = self.runtime(&url).await;
        (url, runtime)
    }

    fn advance_minutes(&self, minutes: u64) {
        self.clock.advance(Duration::from_secs(minutes * 60));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_destroyed_actor_starts_incarnation_two_that_sees_nothing_of_the_first() {
    let Some(server) = Server::start() else {
        return;
    };
    let (url, runtime) = server.fresh().await;
    // Another process, which does not run subscriptions: it only waits on a message.
    let observer = server.runtime(&url).await;
    let pool = PgPool::connect(&url).await.unwrap();
    let subscription = runtime.reference::<Subscription>("s-1");
    assert_eq!(subscription.start("gold").await.unwrap(), 1);
    let queued = subscription.enqueue().start("late").await.unwrap();
    let waited_on = observer
        .message(queued.request_id())
        .await
        .unwrap()
        .expect("the queued message is stored");
    let waiter = tokio::spawn(async move { waited_on.wait(Duration::from_secs(30)).await });
    assert_eq!(
        scalar(&pool, "SELECT COUNT(*) FROM solid_reminders").await,
        1,
        "the first incarnation's nudge is pending"
    );

    subscription.destroy().await.unwrap();
    server.advance_minutes(10);
    let fired = fire_due_reminders(&runtime).await;

    assert_eq!(fired, 0, "the first incarnation's nudge never fires");
    assert_destroyed(&queued).await;
    let waited = waiter.await.unwrap();
    assert!(
        matches!(&waited, Err(Error::Destroyed { actor_id, .. }) if actor_id == "s-1"),
        "the caller waiting in another process hears that the actor was destroyed: {waited:?}"
    );
    assert_eq!(
        scalar(
            &pool,
            "SELECT COUNT(*) FROM solid_instances WHERE state IS NULL AND incarnation = 2"
        )
        .await,
        1,
        "the state is gone and the next incarnation is 2"
    );
    let state = subscription.snapshot().await.unwrap();
    assert_eq!((state.plan.as_str(), state.reminders_seen), ("", 0));

    assert_eq!(
        subscription.start("silver").await.unwrap(),
        2,
        "the handler sees incarnation 2"
    );
    assert_eq!(subscription.plan().await.unwrap(), ("silver".to_owned(), 2));
    let state = subscription.snapshot().await.unwrap();
    assert_eq!((state.plan.as_str(), state.reminders_seen), ("silver", 0));
    server.advance_minutes(5);
    assert_eq!(
        fire_due_reminders(&runtime).await,
        1,
        "the second incarnation's own nudge fires"
    );
    assert_eq!(subscription.snapshot().await.unwrap().reminders_seen, 1);
    assert_eq!(
        scalar(
            &pool,
            "SELECT COUNT(*) FROM solid_messages WHERE status = 'destroyed'"
        )
        .await,
        1,
        "only the old incarnation's queued message ended as destroyed"
    );
    pool.close().await;
    observer.close().await;
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_turn_that_destroys_its_actor_ends_its_pending_messages_and_reminders() {
    let Some(server) = Server::start() else {
        return;
    };
    let (url, runtime) = server.fresh().await;
    let pool = PgPool::connect(&url).await.unwrap();
    let subscription = runtime.reference::<Subscription>("s-1");
    subscription.start("gold").await.unwrap();
    subscription.renew_hourly(false).await.unwrap();
    server.advance_minutes(60);
    assert_eq!(fire_due_reminders(&runtime).await, 2);
    assert_eq!(subscription.snapshot().await.unwrap().renewals.len(), 1);
    let cancel = subscription.enqueue().cancel().await.unwrap();
    let after = subscription.enqueue().start("queued after").await.unwrap();

    let turns = runtime.testing().drain().await.unwrap().turns;
    server.advance_minutes(120);
    let fired = fire_due_reminders(&runtime).await;

    assert_eq!(turns, 1, "only the destroying turn ran");
    assert_eq!(
        cancel.result().await.unwrap(),
        Some(1),
        "the destroying turn answers with what it saw of its incarnation"
    );
    assert!(
        matches!(after.status().await.unwrap(), MessageStatus::Destroyed),
        "a message queued behind the destroying turn is destroyed with the actor"
    );
    assert!(matches!(after.result().await, Err(Error::Destroyed { .. })));
    assert_eq!(fired, 0, "the old incarnation's recurring reminder is gone");
    assert_eq!(
        scalar(&pool, "SELECT COUNT(*) FROM solid_reminders").await,
        0
    );
    let state = subscription.snapshot().await.unwrap();
    assert_eq!(
        (
            state.plan.as_str(),
            state.reminders_seen,
            state.renewals.len()
        ),
        ("", 0, 0)
    );
    assert_eq!(subscription.start("silver").await.unwrap(), 2);
    assert_eq!(subscription.plan().await.unwrap(), ("silver".to_owned(), 2));
    pool.close().await;
    runtime.close().await;
}

/// The hours (from scheduling) of the renewals an hourly reminder made after a ten-hour
/// outage, then after one more hour; every runtime is closed and a new one started on the
/// same database across the outage.
async fn renewals_after_an_outage(server: &Server, all: bool) -> (Vec<i64>, Vec<i64>) {
    let (url, runtime) = server.fresh().await;
    let subscription = runtime.reference::<Subscription>("s-1");
    subscription.renew_hourly(all).await.unwrap();
    let start = server.clock.now().timestamp();
    runtime.close().await;

    server.advance_minutes(10 * 60);
    let runtime = server.runtime(&url).await;
    let subscription = runtime.reference::<Subscription>("s-1");
    assert_eq!(
        fire_due_reminders(&runtime).await,
        if all { 10 } else { 1 },
        "one occurrence fired, or each of the ten missed ones"
    );
    let after_outage = subscription.snapshot().await.unwrap().renewals;
    server.advance_minutes(60);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    let an_hour_later = subscription.snapshot().await.unwrap().renewals;
    runtime.close().await;
    let hours = |renewals: Vec<i64>| {
        renewals
            .into_iter()
            .map(|at| (at - start) / 3600)
            .collect::<Vec<_>>()
    };
    (hours(after_outage), hours(an_hour_later))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_hourly_reminder_after_a_ten_hour_outage_fires_once_or_ten_times_in_order() {
    let Some(server) = Server::start() else {
        return;
    };

    let latest = renewals_after_an_outage(&server, false).await;
    let all = renewals_after_an_outage(&server, true).await;

    assert_eq!(latest, (vec![10], vec![10, 11]));
    assert_eq!(
        all,
        ((1..=10).collect::<Vec<_>>(), (1..=11).collect::<Vec<_>>())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_recurring_reminder_survives_a_restart_and_goes_on_until_it_is_cancelled() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.server.database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    let runtime = server.runtime(&url).await;
    let subscription = runtime.reference::<Subscription>("s-1");
    subscription.renew_hourly(false).await.unwrap();
    let start = server.clock.now().timestamp();
    let mut fired = Vec::new();
    for _ in 0..2 {
        server.advance_minutes(60);
        fired.push(fire_due_reminders(&runtime).await);
    }
    runtime.close().await;

    let runtime = server.runtime(&url).await;
    let subscription = runtime.reference::<Subscription>("s-1");
    server.advance_minutes(30);
    fired.push(fire_due_reminders(&runtime).await);
    server.advance_minutes(30);
    fired.push(fire_due_reminders(&runtime).await);
    subscription.stop_renewing().await.unwrap();
    server.advance_minutes(180);
    let after_cancel = fire_due_reminders(&runtime).await;

    assert_eq!(
        fired,
        [1, 1, 0, 1],
        "hourly, and after the restart on the same schedule"
    );
    let hours: Vec<i64> = subscription
        .snapshot()
        .await
        .unwrap()
        .renewals
        .into_iter()
        .map(|at| (at - start) / 3600)
        .collect();
    assert_eq!(hours, [1, 2, 3]);
    assert_eq!(after_cancel, 0, "a cancelled reminder never fires again");
    assert_eq!(
        scalar(&pool, "SELECT COUNT(*) FROM solid_reminders").await,
        0
    );
    pool.close().await;
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// A destroy racing a turn in another process.

/// The parent tells the child its database through this variable.
const CALLER_DATABASE: &str = "CALLER_DATABASE";
/// The one ledger of the race.
const LEDGER: &str = "ledger";
/// Rounds of the race.
const ROUNDS: i64 = 20;
/// What `prepare` notes for a round: state of the incarnation about to be destroyed.
const PREPARED: i64 = 1000;
/// The advisory lock key of the first round's gate (each later round adds its number).
const GATE: i64 = 7_000;

/// An actor whose turns write an application row, its state and a reminder together.
#[actor]
#[derive(Default)]
struct Ledger {
    /// The rounds this incarnation's turns noted (`PREPARED + round` by `prepare`).
    rounds: Vec<i64>,
}

#[actor]
impl Ledger {
    /// Gives the incarnation a state and a reminder for a destroy to take away.
    #[command]
    fn prepare(&mut self, turn: &mut Turn<Self>, round: i64) {
        self.rounds.push(PREPARED + round);
        turn.schedule(turn.now() + TimeDelta::days(1), "prepared")
            .forget(round);
    }

    /// Writes the application row `(round, incarnation)`, the state and a reminder. On the
    /// incarnation `before` (the destroy has not happened yet) it holds the turn, with its row
    /// written and the actor's lock taken, until another transaction waits on it: the destroy
    /// is then provably in the middle of this turn.
    #[command]
    async fn note(
        &mut self,
        turn: &mut Turn<Self>,
        round: i64,
        before: u64,
    ) -> Result<u64, TurnError> {
        let incarnation = turn.incarnation();
        let connection = turn.postgres().await?;
        sqlx::query("INSERT INTO notes (round, incarnation) VALUES ($1, $2)")
            .bind(round)
            .bind(i64::try_from(incarnation).map_err(Failure::permanent)?)
            .execute(&mut *connection)
            .await?;
        if incarnation == before {
            hold_until_another_transaction_waits(connection).await?;
        }
        self.rounds.push(round);
        turn.schedule(turn.now() + TimeDelta::days(1), round.to_string())
            .forget(round);
        Ok(incarnation)
    }

    #[query]
    fn incarnation(&self, turn: &Turn<Self>) -> u64 {
        turn.incarnation()
    }

    #[reminder]
    fn forget(&mut self, round: i64) {
        self.rounds.retain(|noted| *noted != round);
    }
}

/// Polls the lock manager (live, unlike `pg_stat_activity`'s per-transaction snapshot)
/// until a lock request of another backend waits on this one.
async fn hold_until_another_transaction_waits(
    connection: &mut PgConnection,
) -> Result<(), TurnError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let waited_on: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks
                            WHERE NOT granted AND pg_backend_pid() = ANY (pg_blocking_pids(pid)))",
        )
        .fetch_one(&mut *connection)
        .await?;
        if waited_on {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::permanent("no transaction waited on the held turn").into());
        }
        // A poll interval, not a timing assumption: the loop ends on the condition.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits at round `round`'s gate (an advisory lock the parent holds exclusively) on a
/// connection of its own, and passes it as soon as the parent opens it.
async fn pass_gate(connection: &mut PgConnection, round: i64) {
    sqlx::query("SELECT pg_advisory_lock_shared($1)")
        .bind(GATE + round)
        .execute(&mut *connection)
        .await
        .expect("the gate opens");
    sqlx::query("SELECT pg_advisory_unlock_shared($1)")
        .bind(GATE + round)
        .execute(&mut *connection)
        .await
        .expect("the gate is left open");
}

/// The child's entry point: another process that, for each line `call|drain ROUND BEFORE`
/// on its stdin, passes the round's gate and then calls `note(ROUND, BEFORE)` synchronously
/// or drains the ledger's mailbox, answering `ROUND <round> <what happened>` on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_process() {
    let Ok(url) = std::env::var(CALLER_DATABASE) else {
        return;
    };
    let runtime = Runtime::builder()
        .postgres(&url, 4)
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(30))
        .actor::<Ledger>()
        .start()
        .await
        .expect("the child's runtime starts");
    let ledger = runtime.reference::<Ledger>(LEDGER);
    let mut gate = PgConnection::connect(&url)
        .await
        .expect("the gate connects");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    println!("READY");
    while let Some(line) = lines.next_line().await.expect("stdin reads") {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [mode, round, before] = words[..] else {
            panic!("a round line: {line:?}");
        };
        let round: i64 = round.parse().unwrap();
        let before: u64 = before.parse().unwrap();
        pass_gate(&mut gate, round).await;
        let reply = match mode {
            "call" => match ledger.note(round, before).await {
                Ok(incarnation) => format!("called {incarnation}"),
                Err(error) => format!("failed {error}"),
            },
            "drain" => match runtime.testing().drain().await {
                Ok(ran) => format!("drained {}", ran.turns),
                Err(error) => format!("failed {error}"),
            },
            other => panic!("an unknown mode {other:?}"),
        };
        println!("ROUND {round} {reply}");
    }
    gate.close().await.unwrap();
    runtime.close().await;
}

/// What one round of the race came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Won {
    /// The turn committed on the old incarnation, and the destroy waited for it.
    Turn,
    /// The destroy went first; the turn then ran whole on the new incarnation (a call) or
    /// never ran (a queued message, destroyed with the actor).
    Destroy,
}

/// The child's next answer, past the test harness's own output (which may share its line).
async fn reply(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    loop {
        let line = lines.next_line().await.unwrap().expect("the child answers");
        if let Some(at) = line.find("READY").or_else(|| line.find("ROUND ")) {
            return line[at..].to_owned();
        }
    }
}

/// The application row of `round`, if its turn committed: the incarnation it ran on.
async fn note_of(pool: &PgPool, round: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT incarnation FROM notes WHERE round = $1")
        .bind(round)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// The ledger's reminders: (key, incarnation).
async fn reminders_of_ledger(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT key, incarnation FROM solid_reminders WHERE actor_id = $1 ORDER BY key")
        .bind(LEDGER)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The ledger's row: (state is NULL, incarnation).
async fn instance_of_ledger(pool: &PgPool) -> (bool, i64) {
    sqlx::query_as("SELECT state IS NULL, incarnation FROM solid_instances WHERE actor_id = $1")
        .bind(LEDGER)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Each round: the ledger gets a state and a reminder on incarnation `k`; the child (another
/// OS process with its own runtime and pool) and this process wait at one gate, opened once
/// both wait on it; then the child runs `note` (a synchronous call on even rounds, a drain of
/// a queued `note` on odd ones) while this process destroys the ledger. A `note` that starts
/// first holds its turn until the destroy waits on it.
///
/// Exactly one of these holds, every round: the turn committed on incarnation `k` (its row
/// says `k`) and the destroy after it left no state, no reminder, and incarnation `k + 1`; or
/// the destroy went first, and the turn ran whole on `k + 1` from the default state (its row,
/// a state of its round alone, its reminder alone) or, queued, never ran (no row, its message
/// destroyed). Nothing of `k`'s state or reminders ever survives, and no row exists whose
/// turn's state is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_destroy_racing_a_turn_in_another_process_waits_for_it_or_loses_it_whole() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.server.database().await;
    let pool = PgPool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE notes (round BIGINT PRIMARY KEY, incarnation BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let runtime = server.runtime(&url).await;
    let ledger = runtime.reference::<Ledger>(LEDGER);
    let mut caller = running_only("lifecycle::caller_process");
    caller
        .arg("--quiet")
        .env(CALLER_DATABASE, &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = tokio::process::Command::from(caller)
        .kill_on_drop(true)
        .spawn()
        .expect("the child process starts");
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(reply(&mut from_child).await, "READY");
    let mut gatekeeper = PgConnection::connect(&url).await.unwrap();

    let mut tally = Vec::new();
    for round in 0..ROUNDS {
        let queued_mode = round % 2 == 1;
        ledger.prepare(round).await.unwrap();
        let before = ledger.incarnation().await.unwrap();
        let queued = if queued_mode {
            Some(ledger.enqueue().note(round, before).await.unwrap())
        } else {
            None
        };
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(GATE + round)
            .execute(&mut gatekeeper)
            .await
            .unwrap();
        let mode = if queued_mode { "drain" } else { "call" };
        to_child
            .write_all(format!("{mode} {round} {before}\n").as_bytes())
            .await
            .unwrap();
        to_child.flush().await.unwrap();
        let destroyer = {
            let ledger = ledger.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let mut gate = PgConnection::connect(&url).await.unwrap();
                pass_gate(&mut gate, round).await;
                let destroyed = ledger.destroy().await;
                gate.close().await.unwrap();
                destroyed
            })
        };
        let both_wait = eventually(Duration::from_secs(30), || {
            let pool = pool.clone();
            async move {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pg_locks
                     WHERE locktype = 'advisory' AND objid::bigint = $1 AND NOT granted",
                )
                .bind(GATE + round)
                .fetch_one(&pool)
                .await
                .unwrap();
                waiting == 2
            }
        })
        .await;
        assert!(
            both_wait,
            "round {round}: the two sides never met at the gate"
        );
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(GATE + round)
            .execute(&mut gatekeeper)
            .await
            .unwrap();
        destroyer.await.unwrap().unwrap();
        let answer = reply(&mut from_child).await;

        let k = i64::try_from(before).unwrap();
        let note = note_of(&pool, round).await;
        let (state_is_null, incarnation) = instance_of_ledger(&pool).await;
        let reminders = reminders_of_ledger(&pool).await;
        let rounds = ledger.snapshot().await.unwrap().rounds;
        let what = format!(
            "round {round} ({mode}, incarnation {k}): child {answer:?}, row {note:?}, \
             incarnation now {incarnation}, state {rounds:?} (NULL: {state_is_null}), \
             reminders {reminders:?}"
        );
        assert_eq!(incarnation, k + 1, "exactly one destroy: {what}");
        let won = match &queued {
            None if answer == format!("ROUND {round} called {k}") => {
                assert_eq!(note, Some(k), "{what}");
                assert!(state_is_null && rounds.is_empty(), "{what}");
                assert!(reminders.is_empty(), "{what}");
                Won::Turn
            }
            None => {
                assert_eq!(answer, format!("ROUND {round} called {}", k + 1), "{what}");
                assert_eq!(note, Some(k + 1), "{what}");
                assert!(!state_is_null && rounds == [round], "{what}");
                assert_eq!(reminders, [(round.to_string(), k + 1)], "{what}");
                Won::Destroy
            }
            Some(queued) if answer == format!("ROUND {round} drained 1") => {
                assert_eq!(note, Some(k), "{what}");
                assert_eq!(queued.result().await.unwrap(), Some(before), "{what}");
                assert!(state_is_null && rounds.is_empty(), "{what}");
                assert!(reminders.is_empty(), "{what}");
                Won::Turn
            }
            Some(queued) => {
                assert_eq!(answer, format!("ROUND {round} drained 0"), "{what}");
                assert_eq!(note, None, "{what}");
                assert!(
                    matches!(queued.status().await.unwrap(), MessageStatus::Destroyed),
                    "{what}"
                );
                assert!(state_is_null && rounds.is_empty(), "{what}");
                assert!(reminders.is_empty(), "{what}");
                Won::Destroy
            }
        };
        tally.push(won);
    }

    drop(to_child);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "the child process ended with {status}");
    let committed: Vec<i64> = tally
        .iter()
        .enumerate()
        .filter(|(round, won)| **won == Won::Turn || round % 2 == 0)
        .map(|(round, _)| i64::try_from(round).unwrap())
        .collect();
    let rows: Vec<i64> = sqlx::query_scalar("SELECT round FROM notes ORDER BY round")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows, committed, "one row per committed turn, and no other");
    let turn_first = |parity: usize| {
        tally
            .iter()
            .enumerate()
            .filter(|(round, won)| round % 2 == parity && **won == Won::Turn)
            .count()
    };
    eprintln!(
        "the turn committed first and the destroy waited for it in {} of {} calls and {} of {} \
         queued messages; the destroy went first in the others",
        turn_first(0),
        ROUNDS / 2,
        turn_first(1),
        ROUNDS / 2
    );
    gatekeeper.close().await.unwrap();
    pool.close().await;
    runtime.close().await;
}
