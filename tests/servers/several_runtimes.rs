//! Several runtimes on one server database stand for several processes on several hosts:
//! the cases here are written once and run on each server backend, through the binary's
//! `backend` module (tests/postgres/backend.rs, tests/mysql/backend.rs) — on PostgreSQL a
//! server of its own per test, on MySQL a database of its own on the process's throwaway
//! MariaDB.

use crate::cases::expiring_reservations::{eight_holds_of_one_seat, inventory};

use std::time::Duration;

use crate::support::actors::{Noted, Tally};
use crate::support::gates::gate;
use crate::support::runtimes::{
    builder, completes, noticed_beyond, pool as application_pool, scalar, state_of, stop_workers,
};
use crate::support::workers::{fire_due_reminders, run_workers, run_workers_of};
use crate::support::{eventually, held_and_rejected, rejection_code, together};
use inventory::SeatInventory;
use solid_objects::prelude::*;

/// An actor that records what ran, in order, and writes an application row when asked.
#[actor]
#[derive(Default)]
pub(crate) struct Journal {
    entries: Vec<String>,
}

#[actor]
impl Journal {
    #[command]
    pub(crate) fn record(&mut self, entry: String) -> usize {
        self.entries.push(entry);
        self.entries.len()
    }

    /// Schedules a reminder under `key` an hour from now (replacing one under that key).
    #[command]
    fn follow_up(&mut self, turn: &mut Turn<Self>, key: String) -> usize {
        turn.schedule(turn.now() + TimeDelta::hours(1), key.clone())
            .recall(key);
        self.entries.len()
    }

    #[reminder]
    fn recall(&mut self, key: String) {
        self.entries.push(key);
    }

    #[command]
    async fn note(
        &mut self,
        turn: &mut Turn<Self>,
        entry: String,
        keep: bool,
    ) -> Result<usize, TurnError> {
        if turn.postgres().await.is_ok() {
            sqlx::query("INSERT INTO notes (entry) VALUES ($1)")
                .bind(&entry)
                .execute(turn.postgres().await?)
                .await?;
        } else {
            sqlx::query("INSERT INTO notes (entry) VALUES (?)")
                .bind(&entry)
                .execute(turn.mysql().await?)
                .await?;
        }
        if !keep {
            return Err(reject!(withdrawn, "The note {entry} is withdrawn").into());
        }
        Ok(self.record(entry))
    }
}

/// A fresh database on the binary's server, and a manual clock for the runtimes on it.
pub(crate) struct TestDatabase {
    pub(crate) url: String,
    pub(crate) clock: ManualClock,
    /// What keeps the database alive while the test runs: PostgreSQL's server of its own
    /// (stopped when the test ends); nothing on MariaDB, whose server lives as long as the
    /// process.
    _server: Box<dyn std::any::Any>,
}

impl TestDatabase {
    /// A fresh database on the binary's server backend; `None` (the test skips) on a
    /// machine without that server, outside CI.
    pub(crate) async fn fresh() -> Option<Self> {
        let (server, url) = crate::backend::database().await?;
        Some(Self {
            url,
            clock: ManualClock::starting_now(),
            _server: Box::new(server),
        })
    }

    pub(crate) fn on_postgres(&self) -> bool {
        self.url.starts_with("postgres://")
    }

    /// A builder on the database with `connections` and the database's clock, allowing
    /// every call.
    fn builder(&self, connections: u32) -> solid_objects::Builder {
        builder(&self.url, connections)
            .clock(self.clock.clone())
            .policy(AllowAll)
    }

    /// A runtime on the database, as [`runtime`] starts one.
    async fn runtime(&self) -> Runtime {
        runtime(&self.url, &self.clock).await
    }

    /// One number that `sql` reads from the database.
    async fn scalar(&self, sql: &str) -> i64 {
        scalar(&self.url, sql).await
    }

    /// Another process's transaction, holding what `locking` (a `SELECT .. FOR UPDATE`)
    /// locks; its pool, to be closed once the transaction ended.
    async fn holding(
        &self,
        locking: &str,
    ) -> (sqlx::AnyPool, sqlx::Transaction<'static, sqlx::Any>) {
        let other_process = application_pool(&self.url).await;
        let mut turn_elsewhere = other_process.begin().await.unwrap();
        sqlx::query(locking)
            .fetch_all(&mut *turn_elsewhere)
            .await
            .unwrap();
        (other_process, turn_elsewhere)
    }
}

/// A runtime on the database `url` (PostgreSQL or MySQL) with eight connections and
/// `clock`, allowing every call.
pub(crate) async fn runtime(url: &str, clock: &ManualClock) -> Runtime {
    crate::support::runtimes::runtime(url, 8, clock).await
}

/// Enqueues `entry` for the journal "j" through `runtime`.
async fn enqueue_in_j(runtime: &Runtime, entry: &str) -> MessageRef<usize> {
    runtime
        .reference::<Journal>("j")
        .enqueue()
        .record(entry)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_holds_through_two_processes_against_five_seats_hold_exactly_five() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let first = db.runtime().await;
    let second = db.runtime().await;
    first
        .reference::<SeatInventory>("show")
        .open_show(5)
        .await
        .unwrap();

    let results = eight_holds_of_one_seat(|buyer| {
        let runtime = if buyer % 2 == 0 { &first } else { &second };
        runtime.reference::<SeatInventory>("show")
    })
    .await;

    let (held, rejected) = held_and_rejected(results);
    assert_eq!(held, 5);
    assert_eq!(rejected, vec!["not_enough_seats"; 3]);
    assert_eq!(
        second
            .reference::<SeatInventory>("show")
            .seats_left()
            .await
            .unwrap(),
        0
    );
    first.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_in_two_processes_share_the_actors_and_keep_each_ones_order() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let caller = db.runtime().await;
    for round in 0..5 {
        for actor in 0..4 {
            caller
                .reference::<Journal>(format!("j-{actor}"))
                .enqueue()
                .record(format!("{actor}-{round}"))
                .await
                .unwrap();
        }
    }
    let workers: Vec<Runtime> = [db.runtime().await, db.runtime().await].into();
    let running: Vec<_> = workers.iter().map(run_workers_of::<Journal>).collect();

    let done = eventually(Duration::from_secs(30), || async {
        db.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'completed'")
            .await
            == 20
    })
    .await;
    for runtime in &workers {
        runtime.shutdown();
    }
    for worker in running {
        worker.await.unwrap().unwrap();
    }

    assert!(done, "the workers did not finish");
    for actor in 0..4 {
        let journal = caller.reference::<Journal>(format!("j-{actor}"));
        let expected: Vec<String> = (0..5).map(|round| format!("{actor}-{round}")).collect();
        assert_eq!(journal.snapshot().await.unwrap().entries, expected);
    }
    caller.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overdue_reminder_fires_once_after_a_restart_even_with_two_processes_racing() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let before = db.runtime().await;
    let show = before.reference::<SeatInventory>("show");
    show.open_show(5).await.unwrap();
    show.hold("h-1", "ana", 2).await.unwrap();
    before.close().await;

    db.clock.advance(Duration::from_secs(16 * 60));
    let first = db.runtime().await;
    let second = db.runtime().await;
    let _ = first.reference::<SeatInventory>("show");
    let _ = second.reference::<SeatInventory>("show");
    let fired = together(2, |process| {
        let runtime = if process == 0 {
            first.clone()
        } else {
            second.clone()
        };
        async move { fire_due_reminders(&runtime).await }
    })
    .await;

    assert_eq!(fired.iter().sum::<usize>(), 1);
    let show = first.reference::<SeatInventory>("show");
    assert_eq!(show.seats_left().await.unwrap(), 5);
    assert!(show.snapshot().await.unwrap().holds.is_empty());
    first.close().await;
    second.close().await;
}

#[tokio::test]
async fn application_rows_commit_with_the_turn_or_roll_back_with_a_rejection() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = db.runtime().await;
    let pool = application_pool(&db.url).await;
    sqlx::query("CREATE TABLE notes (entry TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let journal = runtime.reference::<Journal>("j");

    assert_eq!(journal.note("kept", true).await.unwrap(), 1);
    assert_eq!(
        rejection_code(journal.note("dropped", false).await),
        "withdrawn"
    );

    assert_eq!(db.scalar("SELECT COUNT(*) FROM notes").await, 1);
    assert_eq!(journal.snapshot().await.unwrap().entries, ["kept"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_call_waits_for_a_turn_held_elsewhere_only_until_its_timeout() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = db.runtime().await;
    let journal = runtime.reference::<Journal>("j");
    journal.record("first").await.unwrap();
    let (other_process, turn_elsewhere) = db
        .holding("SELECT 1 FROM solid_instances WHERE actor_id = 'j' FOR UPDATE")
        .await;

    let result = journal
        .clone()
        .timeout(Duration::from_millis(300))
        .record("second")
        .await;

    let Err(Error::SyncTimeout {
        message_id: None,
        waiting_on,
        ..
    }) = &result
    else {
        panic!("expected a SyncTimeout before enqueueing, got {result:?}");
    };
    assert!(waiting_on.contains("held"), "{waiting_on}");
    turn_elsewhere.rollback().await.unwrap();
    other_process.close().await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM solid_messages").await, 1);
    assert_eq!(journal.record("third").await.unwrap(), 2);
    runtime.close().await;
}

/// A call whose timeout runs out while its pool opens a connection to a healthy server (every
/// open connection is busy with other calls) ran out of time: it hears `SyncTimeout`, not
/// `DatabaseUnavailable` ("no host accepted writes"), which is not true, and which starts a
/// search for a host that pauses every turn of the runtime meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_runs_out_of_time_while_a_healthy_server_opens_a_connection_hears_a_timeout() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let TestDatabase { url, clock, .. } = db;
    let runtime = builder(&url, 16)
        .clock(clock.clone())
        .policy(AllowAll)
        .workers(0)
        .start()
        .await
        .expect("the runtime starts on the server");
    let journal = runtime.reference::<Journal>("j");
    journal.record("first").await.unwrap();
    let other_process = application_pool(&url).await;
    let mut turn_elsewhere = other_process.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM solid_instances WHERE actor_id = 'j' FOR UPDATE")
        .execute(&mut *turn_elsewhere)
        .await
        .unwrap();
    // Calls that hold every connection the pool opened so far, waiting for the row.
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let journal = journal.clone().timeout(Duration::from_secs(20));
            tokio::spawn(async move { journal.record("waits").await })
        })
        .collect();
    let observer = crate::backend::observer(&url).await;
    let holding = eventually(Duration::from_secs(10), || {
        let observer = observer.clone();
        async move {
            crate::backend::scalar(&observer, crate::backend::SESSIONS_WAITING_FOR_A_LOCK).await > 0
        }
    })
    .await;
    assert!(holding, "the waiting calls never came to wait for the row");

    let mut unavailable = Vec::new();
    for attempt in 0..20 {
        let result = runtime
            .reference::<Journal>(&format!("k{attempt}"))
            .timeout(Duration::from_millis(1))
            .record("hurried")
            .await;
        if let Err(error @ Error::DatabaseUnavailable { .. }) = result {
            unavailable.push(error.to_string());
        }
    }

    turn_elsewhere.rollback().await.unwrap();
    for call in waiting {
        let _ = call.await;
    }
    other_process.close().await;
    assert!(
        unavailable.is_empty(),
        "a healthy server was reported unavailable to a call that ran out of time: {unavailable:?}"
    );
    runtime.close().await;
}

/// A call runs its actor's queued message first; when that turn, after its handler, waits
/// for a row another process holds until the call's timeout, the caller hears the timeout
/// and the queued message's attempt is not counted: the turn's writes are bounded by the
/// caller's deadline, so what ran out is that deadline, not the turn.
#[tokio::test]
async fn a_queued_turn_whose_writes_wait_past_a_callers_timeout_counts_no_attempt() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = db
        .builder(8)
        .workers(0)
        .sync_timeout(Duration::from_millis(700))
        .start()
        .await
        .expect("the runtime starts on the server");
    let journal = runtime.reference::<Journal>("j");
    assert_eq!(journal.follow_up("k".to_owned()).await.unwrap(), 0);
    journal.enqueue().follow_up("k".to_owned()).await.unwrap();
    let (other_process, turn_elsewhere) = db
        .holding("SELECT 1 FROM solid_reminders WHERE actor_id = 'j' FOR UPDATE")
        .await;

    let result = journal.record("after".to_owned()).await;

    // The call queued its own message behind the one it ran first.
    let Err(Error::SyncTimeout {
        message_id: Some(_),
        ..
    }) = &result
    else {
        panic!("expected a SyncTimeout naming the call's queued message, got {result:?}");
    };
    turn_elsewhere.rollback().await.unwrap();
    other_process.close().await;
    let counted = "SELECT COUNT(*) FROM solid_messages WHERE attempts > 0 AND status = 'ready'";
    assert_eq!(db.scalar(counted).await, 0);
    assert_eq!(journal.record("again".to_owned()).await.unwrap(), 2);
    let first_time =
        "SELECT COUNT(*) FROM solid_messages WHERE status = 'completed' AND attempts = 1";
    assert_eq!(db.scalar(first_time).await, 4);
    runtime.close().await;
}

/// A caller that waited for its actor's lock reads the mailbox as it is once the lock is
/// its own: the turn it waited for (in another process) enqueued a message before committing,
/// and that message runs first. A head read with a snapshot taken before the lock was granted
/// would see an empty mailbox, and the caller's message would run ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_that_waited_for_the_lock_sees_what_the_turn_it_waited_for_enqueued() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = db.runtime().await;
    let journal = runtime.reference::<Journal>("j");
    journal.record("warm").await.unwrap();
    let (other_process, mut turn_elsewhere) = db
        .holding("SELECT 1 FROM solid_instances WHERE actor_id = 'j' FOR UPDATE")
        .await;
    sqlx::query(
        "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
                                     status, attempts, available_at, created_at)
         SELECT actor_type, actor_id, operation, REPLACE(arguments, 'warm', 'first'),
                CONCAT(request_id, '-elsewhere'), 'ready', 0, 0, created_at
         FROM solid_messages WHERE actor_id = 'j'",
    )
    .execute(&mut *turn_elsewhere)
    .await
    .unwrap();

    let caller = tokio::spawn({
        let journal = journal.clone();
        async move { journal.record("second").await }
    });
    let observer = crate::backend::observer(&db.url).await;
    let waiting = eventually(Duration::from_secs(10), || {
        let observer = observer.clone();
        async move {
            crate::backend::scalar(&observer, crate::backend::SESSIONS_WAITING_FOR_A_LOCK).await > 0
        }
    })
    .await;
    assert!(
        waiting,
        "the caller never came to wait for the actor's lock"
    );
    turn_elsewhere.commit().await.unwrap();

    assert_eq!(caller.await.unwrap().unwrap(), 3);
    assert_eq!(
        journal.snapshot().await.unwrap().entries,
        ["warm", "first", "second"]
    );
    other_process.close().await;
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_with_one_idempotency_key_run_once_across_processes() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let first = db.runtime().await;
    let second = db.runtime().await;

    let results = together(6, |call| {
        let runtime = if call % 2 == 0 { &first } else { &second };
        let journal = runtime.reference::<Journal>("j").idempotency_key("once");
        async move { journal.record("only once").await.unwrap() }
    })
    .await;

    assert_eq!(results, vec![1; 6]);
    assert_eq!(
        state_of::<Journal>(&first, "j").await.entries,
        ["only once"]
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM solid_messages").await, 1);
    first.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_effect_claimed_by_two_processes_at_once_runs_once() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut processes = Vec::new();
    for _ in 0..2 {
        let runs = std::sync::Arc::clone(&runs);
        let runtime = db
            .builder(4)
            .effect(move |noted: Noted, context: solid_objects::EffectContext| {
                let runs = std::sync::Arc::clone(&runs);
                async move {
                    runs.lock()
                        .unwrap()
                        .push((noted.name, context.id().to_owned()));
                    Ok::<(), Failure>(())
                }
            })
            .start()
            .await
            .unwrap();
        processes.push(runtime);
    }
    processes[0]
        .reference::<Tally>("h")
        .note("first")
        .await
        .unwrap();

    let ran = together(2, |process| {
        let runtime = processes[process].clone();
        async move { runtime.testing().run_effects().await.unwrap() }
    })
    .await;

    assert_eq!(ran.iter().sum::<usize>(), 1);
    assert_eq!(runs.lock().unwrap().len(), 1);
    assert_eq!(runs.lock().unwrap()[0].0, "first");
    for runtime in processes {
        runtime.close().await;
    }
}

/// An application that already has a pool hands it over; the runtime's tables sit beside
/// the application's own, and a turn writes both in one transaction.
#[tokio::test]
async fn a_runtime_on_the_applications_own_pool() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let pool = application_pool(&db.url).await;
    sqlx::query("CREATE TABLE notes (entry TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    // The application's pool, of the backend's own type.
    let builder = if db.on_postgres() {
        Runtime::builder().postgres_pool(sqlx::PgPool::connect(&db.url).await.unwrap())
    } else {
        Runtime::builder().mysql_pool(sqlx::MySqlPool::connect(&db.url).await.unwrap())
    };
    let runtime = builder
        .clock(db.clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .unwrap();

    let journal = runtime.reference::<Journal>("j");
    assert_eq!(journal.note("kept", true).await.unwrap(), 1);
    runtime.close().await;

    let notes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM notes")
        .fetch_one(&pool)
        .await
        .expect("closing the runtime leaves the application's pool open");
    assert_eq!(notes, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'completed'")
            .await,
        1
    );
}

/// PostgreSQL's `NOTIFY`, or MySQL's wake-up bell.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_in_one_process_wakes_the_idle_workers_of_another() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let caller = db.runtime().await;
    let (workers, running) = running_workers(&db, true).await;
    if db.on_postgres() {
        let listening = eventually(Duration::from_secs(10), || async {
            listeners(&db.url).await.len() == 1
        })
        .await;
        assert!(listening, "the workers' runtime listens for work");
    }
    let before = workers.stats().work_notices;

    let queued = enqueue_in_j(&caller, "from another process").await;

    let noticed = noticed_beyond(&workers, before, Duration::from_secs(10)).await;
    assert!(
        noticed,
        "the enqueue's commit reached the other runtime as a notice"
    );
    // Only the other runtime's worker runs it (the caller runs no workers).
    let ran = completes(&queued, Duration::from_secs(10)).await;
    assert!(ran);
    assert_eq!(
        caller.stats().work_notices,
        0,
        "a runtime that does not run hears nothing"
    );
    workers.shutdown();
    running.await.unwrap().unwrap();
    workers.close().await;
    caller.close().await;
}

/// The connections that carry wake-ups killed by the server (a restart, a failover, an idle
/// connection reaper), a commit in another process still reaches idle workers as a notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wake_ups_come_back_after_the_server_kills_their_connections() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let caller = db.runtime().await;
    let (workers, running) = running_workers(&db, true).await;
    let first = enqueue_in_j(&caller, "before").await;
    assert!(completes(&first, Duration::from_secs(10)).await);
    let killed = if db.on_postgres() {
        listeners(&db.url).await
    } else {
        Vec::new()
    };
    kill_other_connections(&db.url).await;
    if db.on_postgres() {
        // A notice sent before the workers listen again is heard by nobody (their pass at
        // the reconnection finds its work instead): this commit waits until they listen.
        let listening = eventually(Duration::from_secs(15), || async {
            let now = listeners(&db.url).await;
            now.len() == 1 && !killed.contains(&now[0])
        })
        .await;
        assert!(listening, "the workers listen again after the kill");
    }
    let before = workers.stats().work_notices;
    let queued = enqueue_in_j(&caller, "after the kill").await;
    let noticed = noticed_beyond(&workers, before, Duration::from_secs(15)).await;
    let ran = completes(&queued, Duration::from_secs(10)).await;
    stop_workers(&workers, running).await;
    caller.close().await;
    assert!(noticed && ran, "noticed {noticed}, ran {ran}");
}

/// A short-lived process (a CLI command, a request handler's own runtime) that enqueues and
/// closes at once still wakes the workers of another: the wake-up its commit asked for is
/// sent before the close returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_that_enqueues_and_closes_at_once_still_wakes_another_process() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let (workers, running) = running_workers(&db, true).await;
    // A first enqueue from a runtime that stays open, heard: the workers listen.
    let first = db.runtime().await;
    enqueue_in_j(&first, "first").await;
    let listening = noticed_beyond(&workers, 0, Duration::from_secs(10)).await;
    assert!(listening, "the workers' runtime hears another's enqueue");
    first.close().await;
    let journal = workers.reference::<Journal>("j");
    let first_ran = eventually(Duration::from_secs(10), || async {
        journal.snapshot().await.is_ok_and(|j| j.entries.len() == 1)
    })
    .await;
    assert!(first_ran, "the workers ran the first message");

    let before = workers.stats().work_notices;
    let caller = db.runtime().await;
    enqueue_in_j(&caller, "and gone").await;
    caller.close().await;
    let noticed = noticed_beyond(&workers, before, Duration::from_secs(10)).await;
    let ran = eventually(Duration::from_secs(10), || async {
        journal.snapshot().await.is_ok_and(|j| j.entries.len() == 2)
    })
    .await;
    stop_workers(&workers, running).await;
    workers.close().await;
    assert!(
        noticed,
        "the enqueue of a runtime closed at once reached the other process as a notice"
    );
    assert!(ran, "the other process ran the message");
}

/// Kills every connection to the test's database but the one asking.
async fn kill_other_connections(url: &str) {
    let pool = application_pool(url).await;
    let ids: Vec<i64> = if url.starts_with("postgres://") {
        sqlx::query_scalar(
            "SELECT pid::BIGINT FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    } else {
        sqlx::query_scalar(
            "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
             WHERE db = DATABASE() AND id <> CONNECTION_ID()",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert!(!ids.is_empty(), "the runtimes hold connections");
    for id in ids {
        let kill = if url.starts_with("postgres://") {
            format!("SELECT 1 FROM (SELECT pg_terminate_backend({id})) AS t")
        } else {
            format!("KILL CONNECTION {id}")
        };
        let _ = sqlx::Executor::execute(&pool, kill.as_str()).await;
    }
    pool.close().await;
}

/// A runtime of its own on the database with one worker running, listening for other
/// processes' work or not.
pub(crate) async fn running_workers(
    db: &TestDatabase,
    listen: bool,
) -> (Runtime, tokio::task::JoinHandle<Result<(), Error>>) {
    let workers = db
        .builder(4)
        .actor::<Journal>()
        .workers(1)
        .listen(listen)
        .start()
        .await
        .unwrap();
    let running = run_workers(&workers);
    (workers, running)
}

/// The server's process ids of the connections that `LISTEN` for work on this database.
pub(crate) async fn listeners(url: &str) -> Vec<i64> {
    let pool = application_pool(url).await;
    let pids = sqlx::query_scalar(
        "SELECT pid::BIGINT FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN %solid_objects_work%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_told_not_to_listen_find_work_from_another_process_by_polling() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let caller = db.runtime().await;
    let (workers, running) = running_workers(&db, false).await;
    let queued = enqueue_in_j(&caller, "from another process").await;

    let ran = completes(&queued, Duration::from_secs(10)).await;
    assert!(ran, "an idle worker's poll finds the message");
    assert_eq!(workers.stats().work_notices, 0);
    if db.on_postgres() {
        assert!(listeners(&db.url).await.is_empty(), "no connection listens");
    }
    workers.shutdown();
    running.await.unwrap().unwrap();
    workers.close().await;
    caller.close().await;
}

/// An operator's pause and resume say whether they changed anything (on MySQL, an upsert
/// that finds its row unchanged still counts it as affected: sqlx asks for found rows).
#[tokio::test]
async fn pausing_or_resuming_twice_changes_nothing_the_second_time() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = db.runtime().await;
    runtime
        .reference::<Journal>("j")
        .record("one")
        .await
        .unwrap();
    let admin = runtime.admin();

    assert!(admin.pause("Journal", "j").await.unwrap());
    assert!(!admin.pause("Journal", "j").await.unwrap());
    assert!(admin.pause("Journal", "never-called").await.unwrap());
    assert!(!admin.pause("Journal", "never-called").await.unwrap());
    assert!(admin.resume("Journal", "j").await.unwrap());
    assert!(!admin.resume("Journal", "j").await.unwrap());
    runtime.close().await;
}

/// A runtime told not to apply migrations (as the command-line tool starts) writes
/// nothing to a database without the schema, and refuses one whose schema lacks
/// migrations or has a newer build's; on this build's schema it starts.
#[tokio::test]
async fn a_runtime_that_may_not_migrate_starts_only_on_this_builds_schema() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let tables = match db.on_postgres() {
        true => {
            "SELECT COUNT(*) FROM information_schema.tables
                     WHERE table_schema = current_schema() AND table_name LIKE 'solid%'"
        }
        false => {
            "SELECT COUNT(*) FROM information_schema.tables
                      WHERE table_schema = DATABASE() AND table_name LIKE 'solid%'"
        }
    };
    let operator = || builder(&db.url, 2).policy(AllowAll).apply_migrations(false);
    let refused = operator().start().await;
    assert!(matches!(refused, Err(Error::NoSchema)), "{refused:?}");
    assert_eq!(db.scalar(tables).await, 0, "no table was created");

    db.runtime().await.close().await;
    operator()
        .start()
        .await
        .expect("this build's schema")
        .close()
        .await;

    let pool = application_pool(&db.url).await;
    sqlx::query("INSERT INTO solid_schema_migrations (version, description) VALUES (999, 'newer')")
        .execute(&pool)
        .await
        .unwrap();
    let newer = operator().start().await;
    assert!(
        matches!(newer, Err(Error::SchemaFromNewerBuild { applied: 999, .. })),
        "{newer:?}"
    );
    sqlx::query("DELETE FROM solid_schema_migrations")
        .execute(&pool)
        .await
        .unwrap();
    let older = operator().start().await;
    assert!(
        matches!(older, Err(Error::SchemaOutOfDate { applied: 0, .. })),
        "{older:?}"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_database_of_its_own_holds_only_its_tests_reminders_and_is_dropped() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let first = solid_objects::TestDatabase::create(&db.url).await.unwrap();
    let second = solid_objects::TestDatabase::create(&db.url).await.unwrap();
    assert_ne!(first.url(), second.url());
    let start = |database: &solid_objects::TestDatabase| {
        database
            .builder(4)
            .clock(db.clock.clone())
            .policy(AllowAll)
            .start()
    };
    let (one, two) = (start(&first).await.unwrap(), start(&second).await.unwrap());
    for runtime in [&one, &two] {
        let show = runtime.reference::<SeatInventory>("show");
        show.open_show(5).await.unwrap();
        show.hold("h-1", "ana", 2).await.unwrap();
    }
    db.clock.advance(Duration::from_secs(16 * 60));

    let ran = one.testing().run_due_reminders().await.unwrap();
    assert_eq!(
        (ran.occurrences_fired, ran.completed),
        (1, 1),
        "only this test's own reminder fires"
    );
    let (own, other) = (
        one.reference::<SeatInventory>("show"),
        two.reference::<SeatInventory>("show"),
    );
    assert_eq!(own.reminders().await.unwrap(), []);
    assert_eq!(
        other.reminders().await.unwrap().len(),
        1,
        "the other test's reminder is its own to fire"
    );
    assert_eq!(
        two.testing()
            .run_due_reminders()
            .await
            .unwrap()
            .occurrences_fired,
        1
    );

    one.close().await;
    two.close().await;
    let (first_name, second_name) = (first.name().to_owned(), second.name().to_owned());
    first.drop_database().await.unwrap();
    drop(second);
    for name in [first_name, second_name] {
        assert!(!database_exists(&db.url, &name).await, "{name} was dropped");
    }
}

/// Whether the server of `url` has a database called `name`.
async fn database_exists(url: &str, name: &str) -> bool {
    if url.starts_with("postgres://") {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_optional(&pool)
            .await
            .unwrap();
        pool.close().await;
        found.is_some()
    } else {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        let found: Option<String> = sqlx::query_scalar(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        )
        .bind(name)
        .fetch_optional(&pool)
        .await
        .unwrap();
        pool.close().await;
        found.is_some()
    }
}

/// TestDatabase::drop_database says it ends any connection still open on the database:
/// with an application's transaction still open on it (a runtime's turn in flight, a
/// pool a test forgot to close), the drop finishes, and the database is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_database_is_dropped_while_a_transaction_is_still_open_on_it() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let database = solid_objects::TestDatabase::create(&db.url).await.unwrap();
    let runtime = database
        .builder(2)
        .clock(db.clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .unwrap();
    runtime
        .reference::<SeatInventory>("show")
        .open_show(5)
        .await
        .unwrap();
    let pool = application_pool(database.url()).await;
    let mut open = pool.begin().await.unwrap();
    sqlx::query("SELECT COUNT(*) FROM solid_messages")
        .fetch_one(&mut *open)
        .await
        .unwrap();
    let name = database.name().to_owned();

    let started = std::time::Instant::now();
    let dropped = database.drop_database().await;
    let took = started.elapsed();

    let exists = database_exists(&db.url, &name).await;
    drop(open);
    runtime.close().await;
    assert!(
        dropped.is_ok() && !exists && took < Duration::from_secs(10),
        "drop_database with a transaction open on it: {dropped:?} after {took:?}; database \
             still there: {exists}"
    );
}

/// Secrets stay secret: a TestDatabase's Debug (what `dbg!`, `{:?}` in an assertion
/// message or a test's panic prints) holds no password of the server URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_database_prints_no_password() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    // Both throwaway servers accept any password (trust; skip-grant-tables).
    let with_password = db.url.replacen("@", ":hunter2@", 1);
    let database = solid_objects::TestDatabase::create(&with_password)
        .await
        .unwrap();
    let printed = format!("{database:?}");
    database.drop_database().await.unwrap();
    assert!(!printed.contains("hunter2"), "{printed}");
}

/// A rejected turn of an actor that never held state deletes the row its lock held; a call
/// in another process that was waiting for that lock still gets the actor to itself: a third
/// call waits for it, and neither increment is lost. (The never-lived row here is one an
/// operator's pause and resume left; a rejected call of an earlier build left the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_waiting_behind_a_never_lived_actors_rejected_turn_keeps_the_actor_to_itself() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let refusing = db.runtime().await;
    let waiting = db.runtime().await;
    let third = db.runtime().await;
    let tally_id = "tally";
    assert!(refusing.admin().pause("Tally", tally_id).await.unwrap());
    assert!(refusing.admin().resume("Tally", tally_id).await.unwrap());
    let (refuse_gate, add_gate) = ("never-lived-refuse", "never-lived-add");
    let observer = crate::backend::observer(&db.url).await;
    let sessions_waiting = || {
        let observer = observer.clone();
        async move {
            crate::backend::scalar(&observer, crate::backend::SESSIONS_WAITING_FOR_A_LOCK).await > 0
        }
    };

    // One process's turn holds the lock and will be rejected.
    let refused = tokio::spawn({
        let tally = refusing.reference::<Tally>(tally_id);
        async move { tally.refuse_at(refuse_gate.to_owned()).await }
    });
    gate(refuse_gate).reached(1).await;
    // Another process's call waits for that lock.
    let first_add = tokio::spawn({
        let tally = waiting.reference::<Tally>(tally_id);
        async move { tally.add_at(add_gate.to_owned()).await }
    });
    assert!(
        eventually(Duration::from_secs(10), sessions_waiting).await,
        "the second call never came to wait for the actor's lock"
    );
    gate(refuse_gate).open();
    assert_eq!(rejection_code(refused.await.unwrap()), "refused");
    // The waiting call's turn runs, and holds the actor at its gate.
    gate(add_gate).reached(1).await;

    // A third call must wait for it.
    let second_add = tokio::spawn({
        let tally = third.reference::<Tally>(tally_id);
        async move { tally.add().await }
    });
    let settled = eventually(Duration::from_secs(10), || async {
        second_add.is_finished() || sessions_waiting().await
    })
    .await;
    assert!(settled, "the third call neither waited nor finished");
    gate(add_gate).open();

    let mut answers = vec![
        first_add.await.unwrap().unwrap(),
        second_add.await.unwrap().unwrap(),
    ];
    answers.sort_unstable();
    assert_eq!(
        answers,
        [1, 2],
        "the two increments ran one after the other"
    );
    assert_eq!(
        state_of::<Tally>(&third, tally_id).await.count,
        2,
        "no increment was lost"
    );
    for runtime in [refusing, waiting, third] {
        runtime.close().await;
    }
}
