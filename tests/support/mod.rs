//! What every integration test needs: a SQLite file in a temp dir, a manual clock, and a
//! runtime on them that can be closed and reopened.

#![allow(dead_code)]

pub mod browser;
pub mod mariadb;
pub mod postgres;
pub mod steps;

pub use postgres::free_port;

use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use tokio::sync::Barrier;

/// A database and a clock that outlive any one runtime: a SQLite file in a temp dir, or,
/// with `SOLID_TEST_DATABASE=mariadb`, a database of its own on the process's throwaway
/// MariaDB server (how CI runs the guides' suites on MySQL).
pub struct Harness {
    dir: tempfile::TempDir,
    pub clock: ManualClock,
    on_mariadb: bool,
    mariadb: tokio::sync::OnceCell<String>,
}

impl Harness {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temp dir"),
            clock: ManualClock::starting_now(),
            on_mariadb: std::env::var("SOLID_TEST_DATABASE").is_ok_and(|name| name == "mariadb"),
            mariadb: tokio::sync::OnceCell::new(),
        }
    }

    /// The SQLite file (on SQLite).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("actors.db")
    }

    /// Whether the harness's database is MariaDB.
    pub fn on_mariadb(&self) -> bool {
        self.on_mariadb
    }

    /// The database's URL, for sqlx's `Any` driver.
    pub async fn url(&self) -> String {
        if self.on_mariadb {
            let url = self.mariadb.get_or_init(|| async {
                let server = mariadb::MariaDb::shared()
                    .expect("SOLID_TEST_DATABASE=mariadb needs MariaDB (mariadb-server)");
                server.database().await
            });
            url.await.clone()
        } else {
            format!("sqlite://{}?mode=rwc", self.path().display())
        }
    }

    /// A builder on the harness's database and clock that allows every call.
    pub async fn builder(&self) -> solid_objects::Builder {
        let builder = if self.on_mariadb {
            Runtime::builder().mysql(self.url().await, 8)
        } else {
            Runtime::builder().sqlite(self.path())
        };
        builder.clock(self.clock.clone()).policy(AllowAll)
    }

    /// A runtime on the harness's database and clock that allows every call.
    pub async fn start(&self) -> Runtime {
        self.builder()
            .await
            .start()
            .await
            .expect("the runtime starts")
    }

    pub fn advance_minutes(&self, minutes: u64) {
        self.clock.advance(Duration::from_secs(minutes * 60));
    }
}

/// The code of the rejection a call ended with; panics on anything else.
pub fn rejection_code<T: Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Rejected(rejection)) => rejection.code().to_owned(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Runs `tasks` futures on the runtime's worker threads, released together by a barrier;
/// returns their outputs in task order.
pub async fn together<F, Fut, T>(tasks: usize, make: F) -> Vec<T>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let barrier = Arc::clone(&barrier);
            let work = make(task);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut outputs = Vec::with_capacity(tasks);
    for handle in handles {
        outputs.push(handle.await.expect("a task panicked"));
    }
    outputs
}

/// Polls `condition` every few milliseconds until it holds, for at most `timeout`; for
/// waiting on workers that run in other tasks or runtimes.
pub async fn eventually<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polling = async {
        let mut every = tokio::time::interval(Duration::from_millis(5));
        loop {
            every.tick().await;
            if condition().await {
                return;
            }
        }
    };
    tokio::time::timeout(timeout, polling).await.is_ok()
}

/// Counts the rows of a table (or `table WHERE ...`) in the harness's database.
pub async fn count(harness: &Harness, table: &str) -> i64 {
    let pool = connect(harness).await;
    let count = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&pool)
        .await
        .expect("the count query runs");
    pool.close().await;
    count
}

/// Runs SQL directly on the harness's database, as an operator or another program would.
pub async fn execute(harness: &Harness, sql: &str) {
    let pool = connect(harness).await;
    sqlx::raw_sql(sql)
        .execute(&pool)
        .await
        .expect("the statement runs");
    pool.close().await;
}

/// A pool on the harness's database, whichever it is.
pub async fn connect(harness: &Harness) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::AnyPool::connect(&harness.url().await)
        .await
        .expect("the database opens")
}
