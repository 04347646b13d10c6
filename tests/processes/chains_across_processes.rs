//! Wake-ups across processes: 60 three-hop chains of messages, half sent by each of two OS
//! processes, every chain through one hub actor that both processes' workers take turns
//! to run, finish on the servers' wake-ups (PostgreSQL's `NOTIFY`, MySQL's bell) with both
//! processes polling once an hour.
//!
//! A hop committed in one process while the other holds the hub is for the other to run
//! once it lets go: the committing process's workers found the hub locked, and only a
//! wake-up tells the holder, which may have looked at the hub's mailbox before the commit.
//!
//! The child is this test binary re-run to execute only `chains_process` (which does
//! nothing unless the parent set `CHAIN_DATABASE`). It starts its runtime, says so in a
//! marker file, and sends its half once the parent's marker says go. The parent first runs
//! all 60 chains alone, and prints both times (the bench's chain row compares them).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::children::running_only;
use crate::support::each_backend::{own_database, test_on_each_backend};
use crate::support::runtimes::builder;
use crate::support::workers::run_workers;
use crate::support::Backend;
use solid_objects::prelude::*;
use solid_objects::Workers;

const DATABASE: &str = "CHAIN_DATABASE";
const MARKERS: &str = "CHAIN_MARKERS";

/// The chains of a run.
const CHAINS: u32 = 60;

/// The most a run may take: far less than a poll's hour.
const DEADLINE: Duration = Duration::from_secs(60);

/// The chain's first hop.
#[actor]
#[derive(Default)]
struct Entry {
    started: u32,
}

#[actor]
impl Entry {
    #[command]
    fn start(&mut self, turn: &mut Turn<Self>) {
        self.started += 1;
        let chain = turn.actor_id().to_owned();
        turn.send::<Hub>("hub").pass(chain);
    }
}

/// The hop every chain goes through.
#[actor]
#[derive(Default)]
struct Hub {
    passed: u32,
}

#[actor]
impl Hub {
    #[command]
    fn pass(&mut self, turn: &mut Turn<Self>, chain: String) {
        self.passed += 1;
        turn.send::<Finish>(chain).finish();
    }
}

/// The chain's last hop.
#[actor]
#[derive(Default)]
struct Finish {
    finished: u32,
}

#[actor]
impl Finish {
    #[command]
    fn finish(&mut self) {
        self.finished += 1;
    }
}

/// A runtime on a PostgreSQL or MySQL URL whose workers poll once an hour.
async fn start(database: &str) -> Runtime {
    builder(database, 8)
        .policy(AllowAll)
        .workers(Workers::new(2).idle_poll(Duration::from_secs(3600)))
        .actor::<Entry>()
        .actor::<Hub>()
        .actor::<Finish>()
        .start()
        .await
        .expect("the runtime starts")
}

/// Shuts `runtime` down, waits for the task `running` its workers, and closes it.
async fn stop_and_close(runtime: Runtime, running: tokio::task::JoinHandle<Result<(), Error>>) {
    runtime.shutdown();
    running.await.unwrap().unwrap();
    runtime.close().await;
}

/// Sends the chains `first..last` of `run`.
async fn send(runtime: &Runtime, run: &str, chains: std::ops::Range<u32>) {
    for chain in chains {
        runtime
            .reference::<Entry>(format!("{run}-{chain}"))
            .enqueue()
            .start()
            .await
            .expect("the chain's first message commits");
    }
}

/// The child: half of the split run's chains, then its workers until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chains_process() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    let markers = PathBuf::from(std::env::var(MARKERS).unwrap());
    let runtime = start(&database).await;
    let running = run_workers(&runtime);
    std::fs::write(markers.join("ready"), "").unwrap();
    let waiting = Instant::now();
    while !markers.join("go").exists() {
        assert!(waiting.elapsed() < DEADLINE, "the parent said go");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    send(&runtime, "split", CHAINS / 2..CHAINS).await;
    running.await.unwrap().unwrap();
}

/// Waits until the `run`'s chains have all finished; how long since `started`, or `None`
/// past the deadline.
async fn finished(database: &str, run: &str, started: Instant) -> Option<Duration> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(database).await.unwrap();
    let count = "SELECT COUNT(*) FROM solid_messages \
         WHERE actor_type = 'Finish' AND status = 'completed' AND actor_id LIKE $1";
    let count = if database.starts_with("mysql://") {
        count.replace("$1", "?")
    } else {
        count.to_owned()
    };
    let done = loop {
        let finished: i64 = sqlx::query_scalar(&count)
            .bind(format!("{run}-%"))
            .fetch_one(&pool)
            .await
            .unwrap();
        if finished == i64::from(CHAINS) {
            break Some(started.elapsed());
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    pool.close().await;
    done
}

/// The chains alone, then split between two processes, on a database of their own on
/// `backend` (skipped where its server is not installed).
async fn chains_finish_on_wake_ups(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let Some((database, _server)) = own_database(backend, dir.path()).await else {
        return;
    };
    let alone = start(&database).await;
    let running = run_workers(&alone);
    let started = Instant::now();
    send(&alone, "alone", 0..CHAINS).await;
    let one_process = finished(&database, "alone", started).await;
    stop_and_close(alone, running).await;
    let one_process = one_process.expect("one process runs the chains");

    let markers = tempfile::tempdir().unwrap();
    let mut child = running_only("chains_across_processes::chains_process")
        .env(DATABASE, &database)
        .env(MARKERS, markers.path())
        .spawn()
        .expect("the child starts");
    let parent = start(&database).await;
    let running = run_workers(&parent);
    let waiting = Instant::now();
    while !markers.path().join("ready").exists() {
        assert!(waiting.elapsed() < DEADLINE, "the child's runtime started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    std::fs::write(markers.path().join("go"), "").unwrap();
    let started = Instant::now();
    send(&parent, "split", 0..CHAINS / 2).await;
    let two_processes = finished(&database, "split", started).await;
    let notices = parent.stats().work_notices;
    child.kill().expect("SIGKILL the child");
    child.wait().expect("the child is reaped");
    stop_and_close(parent, running).await;
    println!(
        "{CHAINS} three-hop chains through one hub: one process {one_process:?}, two \
         processes {two_processes:?} ({notices} wake-ups heard by the parent)"
    );
    assert!(
        two_processes.is_some(),
        "every chain finished within {DEADLINE:?} while both processes polled once an hour"
    );
    assert!(
        notices > 0,
        "the parent heard the child's commits as wake-ups"
    );
}

test_on_each_backend! {
    on_postgres_chains_sent_by_two_processes_finish_on_notices =>
        chains_finish_on_wake_ups(Postgres),
    on_mariadb_chains_sent_by_two_processes_finish_on_the_bell =>
        chains_finish_on_wake_ups(MariaDb),
}
