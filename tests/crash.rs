//! Crashes: a worker process killed with SIGKILL in the middle of a turn loses that turn
//! whole (state, result, application rows), and the message runs again after a restart.
//!
//! The worker is this test binary itself, re-run as a child process that executes only
//! `worker_process` (which does nothing unless the parent set `CRASH_WORKER_DATABASE`).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::MessageStatus;
use support::{count, eventually, execute, Harness};

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
        sqlx::query("INSERT INTO steps (n) VALUES (?1)")
            .bind(n)
            .execute(turn.sqlite().await?)
            .await?;
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
    let runtime = Runtime::builder()
        .sqlite(database)
        .policy(AllowAll)
        .actor::<Stepper>()
        .start()
        .await
        .expect("the child's runtime starts");
    runtime.run().await.expect("the workers run");
}

fn spawn_worker(database: &Path, marker: &Path) -> std::process::Child {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_turn_loses_the_whole_turn_and_the_message_runs_after_restart() {
    let harness = Harness::new();
    execute(&harness, "CREATE TABLE steps (n INTEGER NOT NULL)").await;
    let runtime = harness.start().await;
    let stepper = runtime.reference::<Stepper>("s-1");
    assert_eq!(stepper.step(1).await.unwrap(), 1);
    let second = stepper.enqueue().step(2).await.unwrap();
    runtime.close().await;

    let marker = harness.path().with_extension("hang");
    let mut worker = spawn_worker(&harness.path(), &marker);
    let hung = eventually(Duration::from_secs(30), || async { marker.exists() }).await;
    worker.kill().expect("SIGKILL the worker");
    worker.wait().expect("the worker is reaped");
    assert!(hung, "the worker never reached the middle of the turn");

    let runtime = harness.start().await;
    let stepper = runtime.reference::<Stepper>("s-1");
    assert_eq!(
        count(&harness, "steps").await,
        1,
        "the killed turn's row is gone"
    );
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

    assert_eq!(runtime.testing().drain().await.unwrap(), 1);
    assert_eq!(count(&harness, "steps").await, 2);
    assert_eq!(stepper.snapshot().await.unwrap().steps, [1, 2]);
    assert_eq!(second.typed::<usize>().result().await.unwrap(), Some(2));
    runtime.close().await;
}
