//! Crashes: a worker process killed with SIGKILL in the middle of a turn loses that turn
//! whole (state, result, application rows), and the message runs again after a restart.
//!
//! The worker is this test binary itself, re-run as a child process that executes only
//! `worker_process` (which does nothing unless the parent set `CRASH_WORKER_DATABASE`, a
//! SQLite path, a PostgreSQL URL or a MySQL URL). Every backend is tested.
//!
//! A worker killed in the middle of an effect leaves the effect to run again once its
//! lease runs out, and a reclaimed lease counts as an attempt: an effect whose runner is
//! killed on every attempt ends dead and sends its failure reply. The child for those is
//! `effect_worker_process`, on the parent's clock (`CRASH_WORKER_NOW`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::children::running_only;
use crate::support::each_backend::{own_database, test_on_each_backend};
use crate::support::operator::dead_effects;
use crate::support::runtimes::{builder, execute, execute_in_turn_with, runtime, scalar, state_of};
use crate::support::{eventually, Backend};
use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{Builder, Effect, EffectContext, MessageStatus, RetryPolicy};

const DATABASE: &str = "CRASH_WORKER_DATABASE";
const HANG_MARKER: &str = "CRASH_WORKER_HANG_MARKER";
const EFFECT_DATABASE: &str = "CRASH_EFFECT_WORKER_DATABASE";
const NOW: &str = "CRASH_WORKER_NOW";
const EFFECT_LEASE: &str = "CRASH_WORKER_EFFECT_LEASE_MS";

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
        let insert = "INSERT INTO steps (n) VALUES ($1)";
        execute_in_turn_with(turn, insert, &[], &[i64::from(n)]).await?;
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
    let runtime = builder(&database, 4)
        .policy(AllowAll)
        .actor::<Stepper>()
        .start()
        .await
        .expect("the child's runtime starts");
    runtime.run().await.expect("the workers run");
}

/// An effect that never finishes in a child worker: its handler writes which attempt it is
/// to the marker file and waits for the process to be killed. In the parent it succeeds.
#[derive(Serialize, Deserialize)]
struct Poison {
    dose: u32,
}

impl Effect for Poison {
    const NAME: &'static str = "poison";
    type Output = ();
}

/// The runs of the poison effect's handler in the parent process, by patient.
static PARENT_POISON_RUNS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How often the parent ran the poison effect of `patient`.
fn parent_runs(patient: &str) -> usize {
    let runs = PARENT_POISON_RUNS.lock().unwrap();
    runs.iter().filter(|id| *id == patient).count()
}

/// Takes poison, and keeps the failures that come back.
#[actor]
#[derive(Default)]
struct Patient {
    failures: Vec<String>,
}

#[actor]
impl Patient {
    #[command]
    fn take(&mut self, turn: &mut Turn<Self>, dose: u32) {
        turn.emit(Poison { dose }).on_failure().sickened();
    }

    #[reply]
    fn sickened(&mut self, failure: solid_objects::EffectFailure<Poison>) {
        self.failures.push(format!(
            "{} {} after {}",
            failure.name, failure.effect.dose, failure.attempts
        ));
    }
}

/// Every effect gets two attempts, in the children and the parent alike.
fn two_attempts(builder: Builder) -> Builder {
    builder
        .retry(RetryPolicy::new().max_attempts(2))
        .actor::<Patient>()
        .effect(|_: Poison, context: EffectContext| async move {
            match std::env::var(HANG_MARKER) {
                Ok(marker) => {
                    std::fs::write(marker, context.attempt().to_string())
                        .map_err(Failure::retryable)?;
                    std::future::pending::<()>().await;
                }
                Err(_) => {
                    let patient = context.actor_id().to_owned();
                    PARENT_POISON_RUNS.lock().unwrap().push(patient);
                }
            }
            Ok(())
        })
}

/// The child's entry point for effects: a worker process on the parent's database, on a
/// clock stopped at the parent's time.
#[tokio::test]
async fn effect_worker_process() {
    let Ok(database) = std::env::var(EFFECT_DATABASE) else {
        return;
    };
    let now: i64 = std::env::var(NOW).unwrap().parse().unwrap();
    let clock = ManualClock::new(chrono::DateTime::from_timestamp_micros(now).unwrap());
    let mut builder = two_attempts(builder(&database, 4)).clock(clock);
    if let Ok(lease) = std::env::var(EFFECT_LEASE) {
        let lease = Duration::from_millis(lease.parse().unwrap());
        builder = builder.workers(Workers::default().effect_lease(lease));
    }
    let runtime = builder
        .policy(AllowAll)
        .start()
        .await
        .expect("the child's runtime starts");
    runtime.run().await.expect("the workers run");
}

/// Starts an effect worker on `backend`, waits until its handler runs, and kills it;
/// returns which attempt the killed run was.
fn kill_mid_effect(backend: &Parent, marker: &Path, lease: Option<Duration>) -> u32 {
    let _ = std::fs::remove_file(marker);
    let mut command = running_only("crash::effect_worker_process");
    command
        .env(EFFECT_DATABASE, &backend.database)
        .env(HANG_MARKER, marker)
        .env(NOW, backend.clock.now().timestamp_micros().to_string());
    if let Some(lease) = lease {
        command.env(EFFECT_LEASE, lease.as_millis().to_string());
    }
    let mut worker = command.spawn().expect("the worker process starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let attempt = loop {
        if let Some(attempt) = std::fs::read_to_string(marker)
            .ok()
            .and_then(|text| text.parse().ok())
        {
            break attempt;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never began the effect"
        );
        std::thread::yield_now();
    };
    worker.kill().expect("SIGKILL the worker");
    worker.wait().expect("the worker is reaped");
    attempt
}

/// A runtime of the parent's that runs the poison effect (and counts its runs).
async fn poison_runtime(backend: &Parent, lease: Option<Duration>) -> Runtime {
    let mut builder = two_attempts(builder(&backend.database, 4))
        .clock(backend.clock.clone())
        .policy(AllowAll);
    if let Some(lease) = lease {
        builder = builder.workers(Workers::default().effect_lease(lease));
    }
    builder.start().await.expect("the runtime starts")
}

/// A patient named `prefix` and the clock's time that took a dose of poison, its effect not
/// run yet; its name.
async fn poisoned(backend: &Parent, prefix: &str, lease: Option<Duration>) -> String {
    let patient = format!("{prefix}-{}", backend.clock.now().timestamp_micros());
    let runtime = poison_runtime(backend, lease).await;
    runtime
        .reference::<Patient>(&patient)
        .take(1)
        .await
        .unwrap();
    runtime.close().await;
    patient
}

/// Kills the effect's worker once; the effect runs again (in the parent) once the lease
/// has run out: on SQLite the default lease, by the runtime's clock (30 s and a little
/// more, not five minutes), on a server `lease` by the server's clock.
async fn killed_mid_effect(backend: Parent, marker: &Path, lease: Option<Duration>) {
    let patient = poisoned(&backend, "killed-once", lease).await;
    assert_eq!(kill_mid_effect(&backend, marker, lease), 1);

    let runtime = poison_runtime(&backend, lease).await;
    if lease.is_none() {
        backend.clock.advance(Duration::from_secs(20));
        assert_eq!(
            runtime.testing().run_effects().await.unwrap(),
            0,
            "the killed worker's lease holds for a while"
        );
        backend.clock.advance(Duration::from_secs(15));
    }
    let ran = eventually(Duration::from_secs(20), || async {
        runtime.testing().run_effects().await.unwrap() > 0
    })
    .await;
    assert!(
        ran,
        "the killed worker's effect did not run again within a lease"
    );
    assert_eq!(parent_runs(&patient), 1);
    let status: Vec<String> = dead_effects(&runtime)
        .await
        .into_iter()
        .map(|dead| dead.last_error.unwrap_or_default())
        .collect();
    assert!(status.is_empty(), "{status:?}");
    runtime.close().await;
}

/// Kills the effect's worker on each of its two attempts: the effect is dead with two
/// attempts, it never runs a third time, and its failure reply reaches the actor.
async fn killed_on_every_attempt(backend: Parent, marker: &Path, lease: Option<Duration>) {
    let patient = poisoned(&backend, "killed-twice", lease).await;
    for attempt in 1..=2 {
        assert_eq!(kill_mid_effect(&backend, marker, lease), attempt);
        // On a server the next worker claims it once the lease ran out by the server's
        // clock; on SQLite by the runtime's.
        backend.clock.advance(Duration::from_secs(600));
    }

    let runtime = poison_runtime(&backend, lease).await;
    let dead = eventually(Duration::from_secs(20), || async {
        runtime.testing().run_effects().await.unwrap();
        !dead_effects(&runtime).await.is_empty()
    })
    .await;
    let runs = parent_runs(&patient);
    assert!(
        dead && runs == 0,
        "the effect is not dead after its runner was killed on both of its attempts; \
         it ran a third time {runs} times"
    );
    let dead = dead_effects(&runtime).await;
    assert_eq!(dead[0].attempts, 2);
    runtime.testing().drain().await.unwrap();
    let state = state_of::<Patient>(&runtime, &patient).await;
    assert_eq!(state.failures, ["poison 1 after 2"]);
    runtime.close().await;
}

/// Where the parent keeps the actors: the runtimes it opens, and a connection for checks.
struct Parent {
    database: String,
    clock: ManualClock,
}

impl Parent {
    async fn runtime(&self) -> Runtime {
        runtime(&self.database, 4, &self.clock).await
    }

    /// The rows of the application's `steps`.
    async fn steps(&self) -> i64 {
        scalar(&self.database, "SELECT COUNT(*) FROM steps").await
    }
}

/// Kills a worker in the middle of the turn of `step(2)`, then checks what survived.
async fn killed_mid_turn(backend: Parent, marker: &Path) {
    execute(&backend.database, "CREATE TABLE steps (n BIGINT NOT NULL)").await;
    let runtime = backend.runtime().await;
    let stepper = runtime.reference::<Stepper>("s-1");
    assert_eq!(stepper.step(1).await.unwrap(), 1);
    let second = stepper.enqueue().step(2).await.unwrap();
    runtime.close().await;

    let mut worker = running_only("crash::worker_process")
        .env(DATABASE, &backend.database)
        .env(HANG_MARKER, marker)
        .spawn()
        .expect("the worker process starts");
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

test_on_each_backend! {
    on_sqlite_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart =>
        killed_mid_turn_on(Sqlite),
    on_postgres_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart =>
        killed_mid_turn_on(Postgres),
    on_mariadb_a_worker_killed_mid_turn_loses_the_turn_and_the_message_runs_after_restart =>
        killed_mid_turn_on(MariaDb),
}

/// [`killed_mid_turn`] on a database of its own on `backend` (skipped where its server is
/// not installed).
async fn killed_mid_turn_on(backend: Backend) {
    on_own_database(backend, |parent, marker, _| async move {
        killed_mid_turn(parent, &marker).await;
    })
    .await;
}

/// The effect crash `test` (given where the parent keeps the actors, the marker file and
/// the lease) on a database of its own on each backend whose server is installed. On a
/// server, leases run on its clock: the tests use a short one.
async fn on_every_backend<F, Fut>(test: F)
where
    F: Fn(Parent, PathBuf, Option<Duration>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for backend in [Backend::Sqlite, Backend::Postgres, Backend::MariaDb] {
        on_own_database(backend, &test).await;
    }
}

/// The crash `test` (given where the parent keeps the actors, the marker file and the lease)
/// on a database of its own on `backend`, unless its server is not installed.
async fn on_own_database<F, Fut>(backend: Backend, test: F)
where
    F: Fn(Parent, PathBuf, Option<Duration>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let Some((database, _server)) = own_database(backend, dir.path()).await else {
        return;
    };
    let parent = Parent {
        database,
        clock: ManualClock::starting_now(),
    };
    let lease = backend.is_server().then_some(Duration::from_secs(1));
    test(parent, dir.path().join("hang"), lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_effect_leaves_it_to_run_again_within_one_lease() {
    on_every_backend(|parent, marker, lease| async move {
        killed_mid_effect(parent, &marker, lease).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_whose_worker_is_killed_on_every_attempt_is_dead_and_replies() {
    on_every_backend(|parent, marker, lease| async move {
        killed_on_every_attempt(parent, &marker, lease).await;
    })
    .await;
}
