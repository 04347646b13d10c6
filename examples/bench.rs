//! Throughput of synchronous commands beside the raw SQL read-modify-write they replace, on
//! the same SQLite file, in the same run; then how fast idle workers wake up for work
//! committed elsewhere, and what idle workers cost.
//!
//! `cargo run --release --example bench [-- OPERATIONS [POSTGRES_URL]]` (default 2000 per
//! row; with a URL, PostgreSQL rows too). Each row prints operations per second for the
//! framework and for hand-written SQL doing the same durable read-modify-write (one
//! transaction per operation: read the row, locked, and write it back). Then:
//!
//! - wake-up latency: runtime A runs 4 idle workers; runtime B, on a pool of its own and
//!   running no workers, enqueues a message; the time from B's enqueue returning (its
//!   commit done) to A's handler starting, p50 and p95 over `BENCH_WAKE_SAMPLES` (default
//!   20) messages sent at random moments. A and B share this OS process but nothing in
//!   memory: A learns of the message only through the database (PostgreSQL's
//!   `LISTEN`/`NOTIFY`, or its workers' poll). On SQLite, and on PostgreSQL with
//!   `Builder::listen(false)`, that is polling alone.
//! - idle cost: the CPU time (user + system, from /proc/self/stat) this process uses over
//!   `BENCH_IDLE_SECONDS` (default 20) while a runtime's 4 workers run with no work, as a
//!   percentage of one core (the database server's own CPU is not counted).
//!
//! And the process's peak resident memory at the end.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use solid_objects::Durability;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::Barrier;

/// The actor under test: one counter.
#[actor]
#[derive(Default)]
pub struct Counter {
    value: u64,
}

#[actor]
impl Counter {
    /// Adds one; returns the new value.
    #[command]
    pub fn increment(&mut self) -> u64 {
        self.value += 1;
        self.value
    }
}

/// Records when its handler starts, for the wake-up latency.
#[actor]
#[derive(Default)]
pub struct Stamp {}

#[actor]
impl Stamp {
    /// Tells the bench that a handler started, and when.
    #[command]
    pub fn stamp(&mut self) {
        let started = STARTED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(started) = &*started {
            let _ = started.send(Instant::now());
        }
    }
}

/// Where `Stamp::stamp` reports the moments its handler starts.
static STARTED: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Instant>>> = Mutex::new(None);

type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type Failed = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Outcome {
    let operations: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(2000);
    println!("{operations} operations per row; ops/s, higher is better\n");
    println!(
        "{:<44} {:>12} {:>12} {:>7}",
        "workload", "framework", "raw SQL", "ratio"
    );
    for durability in [Durability::Full, Durability::Normal] {
        for callers in [1, 8] {
            row(operations, durability, callers).await?;
        }
    }
    if let Some(url) = std::env::args().nth(2) {
        for callers in [1, 8] {
            postgres_row(operations, &url, callers).await?;
        }
    }
    let postgres = std::env::args().nth(2);
    wake_up_rows(postgres.as_deref()).await?;
    idle_rows(postgres.as_deref()).await?;
    println!("\npeak resident memory: {}", peak_memory());
    Ok(())
}

/// A runtime's database, for the wake-up and idle rows.
#[derive(Clone, Copy)]
enum Backend<'a> {
    Sqlite(&'a std::path::Path),
    Postgres { url: &'a str, listen: bool },
}

impl Backend<'_> {
    fn builder(self) -> solid_objects::Builder {
        let builder = match self {
            Self::Sqlite(path) => Runtime::builder().sqlite(path),
            Self::Postgres { url, listen } => Runtime::builder().postgres(url, 8).listen(listen),
        };
        builder.policy(AllowAll)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Sqlite(_) => "SQLite (polling)",
            Self::Postgres { listen: true, .. } => "PostgreSQL, LISTEN/NOTIFY",
            Self::Postgres { listen: false, .. } => "PostgreSQL, polling only (listen(false))",
        }
    }
}

/// A setting from the environment, or its default.
fn setting(name: &str, default: u64) -> Result<u64, Failed> {
    match std::env::var(name) {
        Ok(value) => Ok(value.parse()?),
        Err(_) => Ok(default),
    }
}

/// The wake-up latency rows: SQLite, and with a URL PostgreSQL with and without `LISTEN`.
async fn wake_up_rows(postgres: Option<&str>) -> Outcome {
    let samples = usize::try_from(setting("BENCH_WAKE_SAMPLES", 20)?)?.max(1);
    println!(
        "\nwake-up latency, {samples} messages: runtime B (own pool, no workers) enqueues; \
         runtime A (4 idle workers, idle_poll 1 s) learns of it only through the database; \
         from B's commit to A's handler starting (one OS process, two runtimes)"
    );
    println!("{:<44} {:>12} {:>12}", "backend", "p50", "p95");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("wake.db");
    let mut backends = vec![Backend::Sqlite(&path)];
    if let Some(url) = postgres {
        backends.push(Backend::Postgres { url, listen: true });
        backends.push(Backend::Postgres { url, listen: false });
    }
    for backend in backends {
        let mut latencies = wake_up(backend, samples).await?;
        latencies.sort();
        println!(
            "{:<44} {:>12} {:>12}",
            backend.name(),
            format!("{:.1} ms", millis(percentile(&latencies, 50))),
            format!("{:.1} ms", millis(percentile(&latencies, 95))),
        );
    }
    Ok(())
}

/// Sends `samples` messages (after one to warm up) from B to A at random moments; returns
/// each one's time from B's commit to A's handler starting.
async fn wake_up(backend: Backend<'_>, samples: usize) -> Result<Vec<Duration>, Failed> {
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    *STARTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
    let workers = backend
        .builder()
        .actor::<Stamp>()
        .workers(4)
        .start()
        .await?;
    let running = tokio::spawn({
        let workers = workers.clone();
        async move { workers.run().await }
    });
    let sender = backend.builder().start().await?;
    let stamp = sender.reference::<Stamp>("wake-up");
    let mut gaps = Gaps(0x9e37_79b9_7f4a_7c15);
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..=samples {
        // A random moment in A's idle cycle: its poll backs off from 100 ms to 1 s.
        tokio::time::sleep(gaps.next()).await;
        stamp.enqueue().stamp().await?;
        let committed = Instant::now();
        let handled = starts.recv().await.ok_or("the handler's channel closed")?;
        if sample > 0 {
            latencies.push(handled.saturating_duration_since(committed));
        }
    }
    workers.shutdown_with_deadline(Duration::from_secs(5)).await;
    running.await??;
    workers.close().await;
    sender.close().await;
    Ok(latencies)
}

/// Pseudo-random pauses between 0 and 1.5 s (xorshift), the same in every run.
struct Gaps(u64);

impl Gaps {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(self.0 % 1500)
    }
}

/// The `percent`th percentile of sorted `values` (nearest rank).
fn percentile(values: &[Duration], percent: usize) -> Duration {
    let rank = (values.len() * percent).div_ceil(100).max(1);
    values[rank - 1]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The idle cost rows: a runtime with 4 workers and no work, on SQLite and (with a URL) on
/// PostgreSQL.
async fn idle_rows(postgres: Option<&str>) -> Outcome {
    let seconds = setting("BENCH_IDLE_SECONDS", 20)?.max(1);
    println!(
        "\nidle cost: this process's CPU time while a runtime's 4 workers run with no work, \
         over {seconds} s (after 2 s to settle), % of one core"
    );
    println!("{:<44} {:>12}", "backend", "CPU");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("idle.db");
    let mut backends = vec![Backend::Sqlite(&path)];
    if let Some(url) = postgres {
        backends.push(Backend::Postgres { url, listen: true });
    }
    for backend in backends {
        let runtime = backend
            .builder()
            .actor::<Counter>()
            .workers(4)
            .start()
            .await?;
        let running = tokio::spawn({
            let runtime = runtime.clone();
            async move { runtime.run().await }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cpu_before, before) = (cpu_time()?, Instant::now());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let used = cpu_time()?.saturating_sub(cpu_before);
        let share = used.as_secs_f64() / before.elapsed().as_secs_f64() * 100.0;
        runtime.shutdown_with_deadline(Duration::from_secs(5)).await;
        running.await??;
        runtime.close().await;
        let name = match backend {
            Backend::Sqlite(_) => "SQLite",
            Backend::Postgres { .. } => "PostgreSQL (listening)",
        };
        println!("{name:<44} {:>11.3}%", share);
    }
    Ok(())
}

/// The CPU time (user and system) this process has used, from /proc/self/stat (Linux), in
/// clock ticks of 10 ms.
fn cpu_time() -> Result<Duration, Failed> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name, which is in parentheses: the state is field 3,
    // utime field 14 and stime field 15.
    let after_name = stat
        .rsplit_once(')')
        .ok_or("an unexpected /proc/self/stat")?
        .1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .ok_or("an unexpected /proc/self/stat")?
        .iter()
        .map(|field| field.parse::<u64>())
        .sum::<Result<u64, _>>()?;
    // Linux reports these in USER_HZ, 100 per second.
    Ok(Duration::from_millis(ticks * 10))
}

/// One workload: `callers` tasks, each on its own actor (and its own raw row).
async fn row(operations: usize, durability: Durability, callers: usize) -> Outcome {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.db");
    let runtime = Runtime::builder()
        .sqlite(&path)
        .durability(durability)
        .policy(AllowAll)
        .start()
        .await?;
    let framework = timed(callers, operations, |caller| {
        let counter = runtime.reference::<Counter>(format!("counter-{caller}"));
        async move {
            counter.increment().await?;
            Ok(())
        }
    })
    .await?;
    runtime.close().await;

    let synchronous = match durability {
        Durability::Normal => SqliteSynchronous::Normal,
        _ => SqliteSynchronous::Full,
    };
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5));
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    sqlx::query("CREATE TABLE raw_counters (id TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        .execute(&pool)
        .await?;
    let raw = timed(callers, operations, |caller| {
        let pool = pool.clone();
        async move {
            let id = format!("counter-{caller}");
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            let value: Option<i64> =
                sqlx::query_scalar("SELECT value FROM raw_counters WHERE id = ?1")
                    .bind(&id)
                    .fetch_optional(&mut *tx)
                    .await?;
            sqlx::query(
                "INSERT INTO raw_counters (id, value) VALUES (?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET value = excluded.value",
            )
            .bind(&id)
            .bind(value.unwrap_or(0) + 1)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await?;
    pool.close().await;

    let workload = format!(
        "sync command, {callers} caller(s), synchronous={}",
        match durability {
            Durability::Normal => "NORMAL",
            _ => "FULL",
        }
    );
    println!(
        "{workload:<44} {framework:>12.0} {raw:>12.0} {:>6.2}x",
        framework / raw
    );
    Ok(())
}

/// One PostgreSQL workload: `callers` tasks, each on its own actor, over 16 connections.
async fn postgres_row(operations: usize, url: &str, callers: usize) -> Outcome {
    let runtime = Runtime::builder()
        .postgres(url, 16)
        .policy(AllowAll)
        .start()
        .await?;
    let framework = timed(callers, operations, |caller| {
        let counter = runtime.reference::<Counter>(format!("pg-{callers}-{caller}"));
        async move {
            counter.increment().await?;
            Ok(())
        }
    })
    .await?;
    runtime.close().await;

    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(url)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS raw_counters (id TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let raw = timed(callers, operations, |caller| {
        let pool = pool.clone();
        async move {
            let id = format!("pg-{callers}-{caller}");
            let mut tx = pool.begin().await?;
            let value: Option<i64> =
                sqlx::query_scalar("SELECT value FROM raw_counters WHERE id = $1 FOR UPDATE")
                    .bind(&id)
                    .fetch_optional(&mut *tx)
                    .await?;
            sqlx::query(
                "INSERT INTO raw_counters (id, value) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET value = excluded.value",
            )
            .bind(&id)
            .bind(value.unwrap_or(0) + 1)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await?;
    pool.close().await;
    let workload = format!("sync command, {callers} caller(s), PostgreSQL");
    println!(
        "{workload:<44} {framework:>12.0} {raw:>12.0} {:>6.2}x",
        framework / raw
    );
    Ok(())
}

/// Runs `operations` calls spread over `callers` tasks released together; returns ops/s.
async fn timed<F, Fut>(
    callers: usize,
    operations: usize,
    make: F,
) -> Result<f64, Box<dyn std::error::Error + Send + Sync>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(callers + 1));
    let per_caller = operations / callers;
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let calls: Vec<Fut> = (0..per_caller).map(|_| make(caller)).collect();
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            for call in calls {
                call.await?;
            }
            Outcome::Ok(())
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    for task in tasks {
        task.await??;
    }
    Ok((per_caller * callers) as f64 / start.elapsed().as_secs_f64())
}

/// The process's peak resident memory, from /proc (Linux), or "unknown".
fn peak_memory() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .map(|line| line.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
