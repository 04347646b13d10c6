//! Crashes: a worker process killed with SIGKILL in the middle of a turn loses that turn
//! whole (state, result, application rows), and the message runs again after a restart.
//!
//! The worker is this test binary itself, re-run as a child process that executes only
//! `worker_process` (which does nothing unless the parent set `CRASH_WORKER_DATABASE`, a
//! SQLite path, a PostgreSQL URL or a MySQL URL). Every backend is tested.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::MessageStatus;
use support::mariadb::MariaDb;
use support::postgres::PgServer;
use support::{eventually, Harness};

const DATABASE: &str = "CRASH_WORKER_DATABASE";
const HANG_MARKER: &str = "CRASH_WORKER_HANG_MARKER";

/// Records steps, writing each to the application's `steps` table in the turn.
#[actor]
#[derive(Default)]
struct Stepper {
    steps: Vec<u32>,
}

#[actor]
impl Stepper {
    /// In the child, after writing its row and changing the state, the handler tells the
    /// parent where it is and never returns: the turn's transaction stays open until the
    /// process is killed.
    #[command]
    async fn step(&mut self, turn: &mut Turn<Self>, n: u32) -> Result<usize, TurnError> {
        const INSERT: &str = "INSERT INTO steps (n) VALUES ($1)";
        if turn.sqlite().await.is_ok() {
            sqlx::query(INSERT)
                .bind(n)
                .execute(turn.sqlite().await?)
                .await?;
        } else if turn.postgres().await.is_ok() {
            let n = i64::from(n);
            sqlx::query(INSERT)
                .bind(n)
                .execute(turn.postgres().await?)
                .await?;
        } else {
            sqlx::query("INSERT INTO steps (n) VALUES (?)")
                .bind(n)
                .execute(turn.mysql().await?)
                .await?;
        }
        self.steps.push(n);
        if let Ok(marker) = std::env::var(HANG_MARKER) {
            std::fs::write(marker, n.to_string()).map_err(Failure::retryable)?;
            std::future::pending::<()>().await;
        }
        Ok(self.steps.len())
    }
}

/// The child's entry point: a worker process on the parent's database.
#[tokio::test]
async fn worker_process() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    let runtime = builder_for(&database)
        .policy(AllowAll)
        .actor::<Stepper>()
        .start()
        .await
        .expect("the child's runtime starts");
    runtime.run().await.expect("the workers run");
}

/// A builder on a SQLite path, a PostgreSQL URL or a MySQL URL.
fn builder_for(database: &str) -> solid_objects::Builder {
    if database.starts_with("postgres://") {
        Runtime::builder().postgres(database, 4)
    } else if database.starts_with("mysql://") {
        Runtime::builder().mysql(database, 4)
    } else {
        Runtime::builder().sqlite(database)
    }
}

fn spawn_worker(database: &str, marker: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DATABASE, database)
        .env(HANG_MARKER, marker)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the worker process starts")
}

/// Where the parent keeps the actors: the runtimes it opens, and a connection for checks.
struct Backend {
    database: String,
    clock: ManualClock,
}

impl Backend {
    async fn runtime(&self) -> Runtime {
        builder_for(&self.database)
            .clock(self.clock.clone())
            .policy(AllowAll)
            .start()
            .await
            .expect("the runtime starts")
    }

    async fn steps(&self) -> i64 {
        let pool = sqlx::AnyPool::connect(&self.any_url()).await.unwrap();
        let count = sqlx::query_scalar("SELECT COUNT(*) FROM steps")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        count
    }

    async fn create_steps(&self) {
        let pool = sqlx::AnyPool::connect(&self.any_url()).await.unwrap();
        sqlx::query("CREATE TABLE steps (n BIGINT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }

    fn any_url(&self) -> String {
        if self.database.contains("://") {
            self.database.clone()
        } else {
            format!("sqlite://{}?mode=rwc", self.database)
        }
    }
}

/// Kills a worker in the middle of the turn of `step(2)`, then checks what survived.
async fn killed_mid_turn(backend: Backend, marker: &Path) {
    sqlx::any::install_default_drivers();
    backend.create_steps().await;
    let runtime = backend.runtime().await;
    let stepper = runtime.reference::<Stepper>("s-1");
    assert_eq!(stepper.step(1).await.unwrap(), 1);
    let second = stepper.enqueue().step(2).await.unwrap();
    runtime.close().await;

    let mut worker = spawn_worker(&backend.database, marker);
    let hung = eventually(Duration::from_secs(30), || async { marker.exists() }).await;
    worker.kill().expect("SIGKILL the worker");
    worker.wait().expect("the worker is reaped");
    assert!(hung, "the worker never reached the middle of the turn");

    let runtime = backend.runtime().await;
    let stepper = runtime.reference::<Stepper>("s-1");
    assert_eq!(backend.steps().await, 1, "the killed turn's row is gone");
    assert_eq!(stepper.snapshot().await.unwrap().steps, [1]);
    let second = runtime
        .message(second.request_id())
        .await
        .unwrap()
        .expect("the message is kept");
    assert!(matches!(
        second.status().await.unwrap(),
        MessageStatus::Ready { attempts: 0, .. }
    ));

    // The server releases the dead worker's row lock once it notices the closed connection.
    let ran = std::sync::atomic::AtomicUsize::new(0);
    let drained = eventually(Duration::from_secs(10), || async {
        let turns = runtime.testing().drain().await.unwrap().turns;
        ran.fetch_add(turns, std::sync::atomic::Ordering::Relaxed) + turns > 0
    })
    .await;
    assert!(drained, "the message never ran after the restart");
    assert_eq!(ran.into_inner(), 1);
    assert_eq!(backend.steps().await, 2);
    assert_eq!(stepper.snapshot().await.unwrap().steps, [1, 2]);
    assert_eq!(second.typed::<usize>().result().await.unwrap(), Some(2));
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart() {
    let harness = Harness::new();
    let backend = Backend {
        database: harness.path().display().to_string(),
        clock: harness.clock.clone(),
    };
    killed_mid_turn(backend, &harness.path().with_extension("hang")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let marker_dir = tempfile::tempdir().unwrap();
    let backend = Backend {
        database: server.database().await,
        clock: ManualClock::starting_now(),
    };
    killed_mid_turn(backend, &marker_dir.path().join("hang")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mariadb_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart() {
    let Some(server) = MariaDb::start() else {
        return;
    };
    let marker_dir = tempfile::tempdir().unwrap();
    let backend = Backend {
        database: server.database().await,
        clock: ManualClock::starting_now(),
    };
    killed_mid_turn(backend, &marker_dir.path().join("hang")).await;
}
