//! Throughput of synchronous commands beside the raw SQL read-modify-write they replace, on
//! the same SQLite file, in the same run.
//!
//! `cargo run --release --example bench [-- OPERATIONS [POSTGRES_URL]]` (default 2000 per
//! row; with a URL, PostgreSQL rows too). Each row prints operations per second for the
//! framework and for hand-written SQL doing the same durable read-modify-write (one
//! transaction per operation: read the row, locked, and write it back), and the process's
//! peak resident memory at the end.

use std::sync::Arc;
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

type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;

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
    println!("\npeak resident memory: {}", peak_memory());
    Ok(())
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
