//! A PostgreSQL failover: the primary killed under load and its standby promoted.
//!
//! With a synchronous standby (`synchronous_commit = remote_apply`) the soak of
//! [`chaos`](crate::chaos) (4 worker processes, one SIGKILLed every 2 s, and 8 drivers over
//! 50 actors: sync calls and enqueues, sends, effects, reminders) runs on the multi-host URL
//! of both servers. From half its chaos time the primary is killed (`pg_ctl -m immediate
//! stop`) and the standby promoted; the soak runs a while on the new primary; the old one is
//! rewound (`pg_rewind`) and rejoins as its synchronous standby; then the new primary is
//! killed and the old one promoted again. The soak's checks then hold on the final primary:
//! every acknowledged call there, nothing applied twice, every actor's order exact, every
//! effect run, every reminder fired once. It prints the seconds from each kill to the first
//! turn committed on the promoted server.
//!
//! With an asynchronous standby (`synchronous_commit = local`) the primary is killed while
//! sync calls are acknowledged at full speed, and the test prints the standby's replay lag
//! during the run, how many acknowledged calls the promoted standby lacks, and how many
//! seconds of acknowledgements that is: what the README means by "an asynchronous standby
//! can lose acknowledged turns". It asserts nothing about those numbers.
//!
//! After a failover, idle workers of one process run a message another process enqueued on
//! the promoted server within the first second, before their next poll: their `LISTEN`
//! connection follows the host that accepts writes.
//!
//! The synchronous case takes about 40 s of wall time (20 s of chaos at least, 28 s with
//! the two failovers and the rejoin inside it, then the drain; at most 20 + 120 s of chaos
//! and 60 s of drain), the asynchronous one about 10 s.

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

use solid_objects::prelude::*;
use solid_objects::Workers;

use crate::chaos::{self, Application, Disturbance, Topology};
use crate::support::actors::Tally;
use crate::support::postgres_cluster::{PgCluster, Replication};

/// How long the soak runs on one primary before the next step of the disturbance.
const BETWEEN_STEPS: Duration = Duration::from_secs(4);
/// How long a promoted server may take to commit its first turn after the kill.
const FIRST_COMMIT_WAIT: Duration = Duration::from_secs(60);
/// How often the test looks at the promoted server for a new turn.
const POLL: Duration = Duration::from_millis(20);
/// How long the asynchronous case acknowledges calls before the kill.
const FULL_SPEED: Duration = Duration::from_secs(5);
/// The sync calls' timeout in the asynchronous case.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the asynchronous case waits for its drivers to stop once the primary is gone.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// How long the asynchronous case waits for a call before it drops it.
const ABANDON_AFTER: Duration = Duration::from_secs(5);

/// The soaks' turn (held while the guard lives), a primary and its standby replicating as
/// `replication`, and a fresh database's name on them; `None` (the test skips) on a machine
/// without PostgreSQL, outside CI.
async fn soak_turn_on(
    replication: Replication,
) -> Option<(tokio::sync::MutexGuard<'static, ()>, PgCluster, String)> {
    let turn = chaos::SOAKS.lock().await;
    let cluster = PgCluster::start(replication).await?;
    let database = cluster.database().await;
    Some((turn, cluster, database))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soak_loses_no_acknowledged_turn_through_a_failover_to_the_synchronous_standby_and_back(
) {
    let Some((_turn, cluster, database)) = soak_turn_on(Replication::Synchronous).await else {
        return;
    };
    let url = cluster.url(&database);
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
    let dir = tempfile::tempdir().expect("a temp dir");
    let disturbance: Disturbance = Box::pin(fail_over_and_back(Arc::clone(&cluster), database));
    chaos::soak(
        "postgres failover",
        &Topology::single(&url),
        4,
        dir.path(),
        Some(disturbance),
    )
    .await;
}

/// Fails over to the standby, rejoins the old primary as the new one's synchronous standby
/// and fails back to it; returns the figures of each step.
async fn fail_over_and_back(
    cluster: Arc<tokio::sync::Mutex<PgCluster>>,
    database: String,
) -> String {
    let mut cluster = cluster.lock().await;
    let over = fail_over(&mut cluster, &database).await;
    tokio::time::sleep(BETWEEN_STEPS).await;
    let rejoining = Instant::now();
    cluster.rejoin_old_primary_as_standby().await;
    let rejoined = rejoining.elapsed();
    tokio::time::sleep(BETWEEN_STEPS).await;
    let back = fail_over(&mut cluster, &database).await;
    format!(
        "failover: {over}; the old primary rewound and streaming as the synchronous standby \
         in {:.1} s; failover back: {back}",
        rejoined.as_secs_f64()
    )
}

/// Kills the primary, promotes the standby and waits for the first turn committed on it;
/// returns the seconds each took from the kill.
async fn fail_over(cluster: &mut PgCluster, database: &str) -> String {
    let mut standby = PgConnection::connect(&cluster.standby_url(database))
        .await
        .expect("the standby accepts connections");
    let killed = Instant::now();
    cluster.kill_primary();
    let replicated = last_applied_once_replayed(&mut standby).await;
    cluster.promote_standby().await;
    let promoted = killed.elapsed();
    loop {
        if last_applied(&mut standby).await > replicated {
            break;
        }
        assert!(
            killed.elapsed() < FIRST_COMMIT_WAIT,
            "no turn committed on the promoted server within {FIRST_COMMIT_WAIT:?} of the kill"
        );
        tokio::time::sleep(POLL).await;
    }
    format!(
        "kill to promoted {:.2} s, kill to first new commit on the promoted server {:.2} s",
        promoted.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    )
}

/// The last `applied` row on a standby whose primary is gone, once it has replayed all it
/// received: any later row was committed on it after its promotion.
async fn last_applied_once_replayed(standby: &mut PgConnection) -> i64 {
    let deadline = Instant::now() + FIRST_COMMIT_WAIT;
    loop {
        let replayed: bool =
            sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()")
                .fetch_one(&mut *standby)
                .await
                .expect("the standby's replay position reads");
        if replayed {
            return last_applied(standby).await;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not replay what it received within {FIRST_COMMIT_WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The id of the last row of `applied` (0 if none).
async fn last_applied(connection: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM applied")
        .fetch_one(connection)
        .await
        .expect("applied reads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_loses_the_turns_acknowledged_just_before_a_failover() {
    let Some((_turn, mut cluster, database)) = soak_turn_on(Replication::Asynchronous).await else {
        return;
    };
    let primary = cluster.primary_url(&database);
    let application = Application::new(&primary);
    let pool = application
        .pool_by(Instant::now() + FIRST_COMMIT_WAIT)
        .await;
    chaos::create_tables(&pool).await;
    pool.close().await;
    let runtime = chaos::builder(&primary, 2 * chaos::DRIVERS as u32)
        .start()
        .await
        .expect("the runtime starts");

    let killing = Arc::new(AtomicBool::new(false));
    let drivers: Vec<_> = (0..chaos::DRIVERS)
        .map(|driver| {
            let runtime = runtime.clone();
            let killing = Arc::clone(&killing);
            tokio::spawn(acknowledge_until_the_primary_is_gone(
                runtime, driver, killing,
            ))
        })
        .collect();
    let started = Instant::now();
    let lag =
        ReplayLag::sampled_until(&cluster.primary_url("postgres"), started + FULL_SPEED).await;
    killing.store(true, Ordering::Release);
    let killed = Instant::now();
    cluster.kill_primary();
    let mut acknowledged = Vec::new();
    let mut refusals = Vec::new();
    for driver in drivers {
        let (calls, refusal) = tokio::time::timeout(STOP_WAIT, driver)
            .await
            .expect("the drivers stop once the primary is gone")
            .expect("a driver panicked");
        acknowledged.extend(calls);
        refusals.push(refusal);
    }
    let slowest = refusals
        .iter()
        .max_by_key(|refusal| refusal.after)
        .expect("eight drivers");
    let _ = tokio::time::timeout(STOP_WAIT, runtime.close()).await;

    cluster.promote_standby().await;
    let mut promoted = PgConnection::connect(&cluster.primary_url(&database))
        .await
        .expect("the promoted standby accepts connections");
    let applied: HashSet<(String, i64)> = sqlx::query_as("SELECT actor, seq FROM applied")
        .fetch_all(&mut promoted)
        .await
        .expect("applied reads")
        .into_iter()
        .collect();
    let missing: Vec<&Acknowledged> = acknowledged
        .iter()
        .filter(|call| !applied.contains(&(call.actor.clone(), call.seq)))
        .collect();
    let earliest_missing = missing.iter().map(|call| call.at).min();
    let lost_seconds = earliest_missing.map_or(0.0, |at| (killed - at).as_secs_f64());
    let _ = writeln!(
        std::io::stderr().lock(),
        "asynchronous standby (synchronous_commit = local): {} calls acknowledged in {:.1} s \
         ({:.0} per s), {lag}; \
         {} acknowledged calls missing on the promoted standby, the last \
         {lost_seconds:.3} s of acknowledgements before the kill; the slowest call refused \
         after the kill waited {:.2} s for: {}",
        acknowledged.len(),
        (killed - started).as_secs_f64(),
        acknowledged.len() as f64 / (killed - started).as_secs_f64(),
        missing.len(),
        slowest.after.as_secs_f64(),
        slowest.error,
    );
}

/// How far the standby's replay was behind the primary, as the primary reported it
/// (`pg_stat_replication`): the largest and the last of its samples.
struct ReplayLag {
    /// The most bytes of WAL the standby had not replayed yet.
    most_bytes: f64,
    /// The longest `replay_lag`, in milliseconds, if the primary measured one.
    longest_milliseconds: Option<f64>,
    /// The last sample's bytes and milliseconds, taken just before the kill.
    last: (f64, Option<f64>),
}

impl ReplayLag {
    /// Samples the standby's replay lag on the primary at `url` every `POLL` until `until`.
    async fn sampled_until(url: &str, until: Instant) -> Self {
        let mut primary = PgConnection::connect(url)
            .await
            .expect("the primary accepts connections");
        let mut lag = Self {
            most_bytes: 0.0,
            longest_milliseconds: None,
            last: (0.0, None),
        };
        while Instant::now() < until {
            let (bytes, milliseconds): (Option<f64>, Option<f64>) = sqlx::query_as(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8, \
                 EXTRACT(EPOCH FROM replay_lag)::float8 * 1000 FROM pg_stat_replication",
            )
            .fetch_optional(&mut primary)
            .await
            .expect("pg_stat_replication reads")
            .unwrap_or_default();
            let bytes = bytes.unwrap_or_default();
            lag.most_bytes = lag.most_bytes.max(bytes);
            lag.longest_milliseconds = match (lag.longest_milliseconds, milliseconds) {
                (Some(longest), Some(this)) => Some(longest.max(this)),
                (longest, this) => longest.or(this),
            };
            lag.last = (bytes, milliseconds);
            tokio::time::sleep(POLL).await;
        }
        lag
    }
}

impl std::fmt::Display for ReplayLag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let milliseconds = |lag: Option<f64>| {
            lag.map_or_else(|| "unmeasured".to_owned(), |lag| format!("{lag:.1} ms"))
        };
        write!(
            f,
            "the standby's replay lag at most {:.0} bytes of WAL and {}, just before the kill \
             {:.0} bytes and {}",
            self.most_bytes,
            milliseconds(self.longest_milliseconds),
            self.last.0,
            milliseconds(self.last.1),
        )
    }
}

/// A call acknowledged by the runtime: the message `seq` of `actor`, and when `Ok` came back.
struct Acknowledged {
    actor: String,
    seq: i64,
    at: Instant,
}

/// How a driver's last call failed once the primary was going.
struct Refusal {
    /// How long the call waited before it returned (or was abandoned).
    after: Duration,
    /// What it returned.
    error: String,
}

/// Driver `driver`'s sync calls, one after another over its share of the actors, until the
/// first that fails once `killing` is set (the primary is about to go); returns the calls
/// that were acknowledged, and how the last one failed. A call still waiting after
/// `ABANDON_AFTER` is abandoned (its future dropped).
async fn acknowledge_until_the_primary_is_gone(
    runtime: solid_objects::Runtime,
    driver: usize,
    killing: Arc<AtomicBool>,
) -> (Vec<Acknowledged>, Refusal) {
    let actors: Vec<String> = (driver..chaos::ACTORS)
        .step_by(chaos::DRIVERS)
        .map(chaos::actor_name)
        .collect();
    let mut acknowledged = Vec::new();
    let mut seq = 0;
    loop {
        seq += 1;
        for actor in &actors {
            let reference = runtime
                .reference::<chaos::Counter>(actor.clone())
                .timeout(CALL_TIMEOUT);
            let started = Instant::now();
            let error = match tokio::time::timeout(ABANDON_AFTER, reference.apply(seq)).await {
                Ok(Ok(_)) => {
                    acknowledged.push(Acknowledged {
                        actor: actor.clone(),
                        seq,
                        at: Instant::now(),
                    });
                    continue;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {ABANDON_AFTER:?} (abandoned)"),
            };
            assert!(
                killing.load(Ordering::Acquire),
                "a call failed before the primary was killed: {error}"
            );
            let after = started.elapsed();
            return (acknowledged, Refusal { after, error });
        }
    }
}

/// A runtime on the cluster's multi-host URL that knows [`Tally`], with `workers`.
async fn tally_runtime(url: &str, workers: Workers) -> Runtime {
    Runtime::builder()
        .postgres(url, 4)
        .policy(AllowAll)
        .actor::<Tally>()
        .workers(workers)
        .start()
        .await
        .expect("the runtime starts")
}

/// Whether the message ran within `within`.
async fn completed_within(message: &MessageRef<i64>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if matches!(message.status().await, Ok(MessageStatus::Completed)) {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_sent_just_after_a_promotion_reaches_idle_workers_without_a_poll() {
    let Some((_turn, mut cluster, database)) = soak_turn_on(Replication::Synchronous).await else {
        return;
    };
    let url = cluster.url(&database);
    // Idle workers that would next look for work in an hour: only a wake-up runs it sooner.
    let workers = tally_runtime(&url, Workers::new(1).idle_poll(Duration::from_secs(3600))).await;
    let running = tokio::spawn({
        let workers = workers.clone();
        async move { workers.run().await }
    });
    let caller = tally_runtime(&url, Workers::new(1)).await;
    let tally = caller.reference::<Tally>("b");
    let before = tally.enqueue().add().await.unwrap();
    assert!(
        completed_within(&before, Duration::from_secs(10)).await,
        "the workers hear the caller's commits before the failover"
    );
    // Idle, the workers poll 0.1 s after their last work, then 0.2 s later, doubling up to
    // the hour: 7 s on, their next poll is 12.7 s after their last work.
    let idle_since = Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;

    cluster.kill_primary();
    cluster.promote_standby().await;
    let promoted = Instant::now();
    let after = loop {
        // The caller's own connections were to the killed primary: it finds the promoted
        // one within its call's deadline.
        match tally.enqueue().add().await {
            Ok(after) => break after,
            Err(error) => assert!(
                promoted.elapsed() < Duration::from_secs(30),
                "the caller enqueues on the promoted server: {error}"
            ),
        }
    };
    let enqueued_after = promoted.elapsed();

    let next_poll = idle_since + Duration::from_secs(12);
    let ran = completed_within(&after, next_poll.saturating_duration_since(Instant::now())).await;
    workers.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    caller.close().await;
    workers.close().await;
    assert!(
        ran,
        "a message enqueued {:.2} s after the promotion ran before the workers' next poll",
        enqueued_after.as_secs_f64()
    );
    assert!(
        enqueued_after < Duration::from_secs(1),
        "the wake-up was sent in the first second after the promotion ({enqueued_after:?})"
    );
}
