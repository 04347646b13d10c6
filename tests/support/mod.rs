//! What every case needs, on whichever backend its test binary runs: a database of its own
//! (a SQLite file in a temp dir, or a fresh database on the binary's one throwaway server), a
//! manual clock, and a runtime on them that can be closed and reopened.
//!
//! Each backend binary (tests/sqlite.rs, tests/postgres.rs, tests/mysql.rs) names its backend
//! in `crate::BACKEND`; [`Harness::new`] reads it, so a case is written once and runs on all
//! three.

#![allow(dead_code)]

pub mod actors;
pub mod browser;
pub mod cancellation;
pub mod charts;
pub mod children;
pub mod commit_cutter;
pub mod counter;
pub mod desk;
pub mod each_backend;
pub mod effect_actors;
pub mod endpoint;
pub mod fixtures;
pub mod galera;
pub mod gates;
pub mod journal;
pub mod mariadb;
pub mod mariadb_replication;
pub mod migrating;
pub mod operator;
pub mod policies;
pub mod postgres;
pub mod postgres_cluster;
pub mod release_dumps;
pub mod runtimes;
pub mod servers;
pub mod service;
pub mod silent_ports;
pub mod state_json;
pub mod steps;
pub mod stored_rows;
pub mod subscription;
pub mod telemetry;
pub mod workers;

pub use postgres::free_port;

use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::{Durability, SqliteFile};
use tokio::sync::Barrier;

/// The database a test binary runs its cases on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the case's temp dir.
    Sqlite,
    /// A database of the case's own on the binary's throwaway PostgreSQL server.
    Postgres,
    /// A database of the case's own on the binary's throwaway MariaDB server (the MySQL store).
    MariaDb,
}

impl Backend {
    /// The versions of this build's schema migrations on the backend, lowest first: the
    /// numbers that start the file names in `migrations/` (`0014_stalls.sql` is 14).
    pub fn migrations(self) -> Vec<i64> {
        let folder = match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MariaDb => "mysql",
        };
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(folder);
        let mut versions: Vec<i64> = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("{} is read: {error}", dir.display()))
            .map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                let (version, _) = name.split_once('_').expect("a migration's name");
                version.parse().expect("a migration's version")
            })
            .collect();
        versions.sort_unstable();
        versions
    }

    /// The statements a sync command on a warm actor runs between its BEGIN and its COMMIT,
    /// as the runtime's statement counter counts them: on SQLite the lock with the
    /// mailbox's head, the message row, the state; on PostgreSQL the lock with the head (one
    /// function call) and the message row with the state (one statement); on MySQL the lock,
    /// the head, the message row, the state.
    pub fn warm_call_statements(self) -> u64 {
        match self {
            Backend::Sqlite => 3,
            Backend::Postgres => 2,
            Backend::MariaDb => 4,
        }
    }

    /// Whether the backend is a server (a case's database is one of many on it).
    pub fn is_server(self) -> bool {
        !matches!(self, Backend::Sqlite)
    }

    /// A builder on `database` (what [`Harness::database`] gave), as another process opens
    /// the same database.
    pub fn store_at(self, database: &str) -> solid_objects::Builder {
        match self {
            Backend::Sqlite => Runtime::builder().sqlite(database),
            Backend::Postgres => Runtime::builder().postgres(database, 8),
            Backend::MariaDb => Runtime::builder().mysql(database, 8),
        }
    }

    /// Leaves this test process, saying why, when the backend's server binaries are not on
    /// the machine outside CI (every case of the binary then skips); under CI (`CI` set) a
    /// missing server fails the case instead.
    fn skip_unless_installed(self) {
        let missing = match self {
            Backend::Sqlite => return,
            Backend::Postgres => postgres::missing(),
            Backend::MariaDb => mariadb::missing(),
        };
        if let Some(missing) = missing {
            assert!(std::env::var_os("CI").is_none(), "{missing}");
            eprintln!("skipped: every case of this binary: {missing}");
            std::process::exit(0);
        }
    }
}

/// A database and a clock that outlive any one runtime, on the test binary's backend.
pub struct Harness {
    dir: tempfile::TempDir,
    /// The clock of every runtime the harness starts.
    pub clock: ManualClock,
    backend: Backend,
    database: tokio::sync::OnceCell<String>,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A harness on the test binary's backend (`crate::BACKEND`).
    pub fn new() -> Self {
        Self::on(crate::BACKEND)
    }

    /// A harness on `backend`, whichever binary this is.
    pub fn on(backend: Backend) -> Self {
        backend.skip_unless_installed();
        Self {
            dir: tempfile::tempdir().expect("a temp dir"),
            clock: ManualClock::starting_now(),
            backend,
            database: tokio::sync::OnceCell::new(),
        }
    }

    /// The backend the harness's database is on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The harness's temp dir, for files a case writes beside its database.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The SQLite file; only a SQLite harness has one.
    pub fn path(&self) -> PathBuf {
        assert_eq!(
            self.backend,
            Backend::Sqlite,
            "only a SQLite harness has a database file: use builder() or url(), or move the \
             case under tests/sqlite/"
        );
        self.dir.path().join("actors.db")
    }

    /// The database's URL, for sqlx's `Any` driver and for `Builder::postgres`/`mysql`; a
    /// server backend creates the case's database on first use.
    pub async fn url(&self) -> String {
        match self.backend {
            Backend::Sqlite => format!("sqlite://{}?mode=rwc", self.path().display()),
            Backend::Postgres => {
                let url = self.database.get_or_init(|| async {
                    let server = postgres::PgServer::shared().expect("PostgreSQL starts");
                    server.database().await
                });
                url.await.clone()
            }
            Backend::MariaDb => {
                let url = self.database.get_or_init(|| async {
                    let server = mariadb::MariaDb::shared().expect("MariaDB starts");
                    server.database().await
                });
                url.await.clone()
            }
        }
    }

    /// What another process opens the harness's database by: the SQLite file's path, or the
    /// server database's URL (see [`Backend::store_at`]).
    pub async fn database(&self) -> String {
        match self.backend {
            Backend::Sqlite => self.path().display().to_string(),
            Backend::Postgres | Backend::MariaDb => self.url().await,
        }
    }

    /// A builder on the harness's database with nothing else set.
    pub async fn store(&self) -> solid_objects::Builder {
        self.backend.store_at(&self.database().await)
    }

    /// A builder on the harness's database with nothing else set but, on SQLite,
    /// [`Durability::Normal`] (no fsync at each commit): for cases that commit thousands of
    /// turns.
    pub async fn store_without_fsync(&self) -> solid_objects::Builder {
        match self.backend {
            Backend::Sqlite => Runtime::builder()
                .sqlite(SqliteFile::new(self.path()).durability(Durability::Normal)),
            Backend::Postgres | Backend::MariaDb => self.store().await,
        }
    }

    /// A builder on the harness's database and clock that allows every call.
    pub async fn builder(&self) -> solid_objects::Builder {
        self.store()
            .await
            .clock(self.clock.clone())
            .policy(AllowAll)
    }

    /// A runtime on the harness's database and clock that allows every call.
    pub async fn start(&self) -> Runtime {
        self.builder()
            .await
            .start()
            .await
            .expect("the runtime starts")
    }

    /// `sql` with its `?` placeholders spelled as the harness's backend wants them, for
    /// [`connect`]'s pool.
    pub fn sql(&self, sql: &str) -> String {
        match self.backend {
            Backend::Postgres => numbered_placeholders(sql),
            Backend::Sqlite | Backend::MariaDb => sql.to_owned(),
        }
    }

    /// Moves the harness's clock `minutes` ahead.
    pub fn advance_minutes(&self, minutes: u64) {
        self.clock.advance(Duration::from_secs(minutes * 60));
    }
}

/// The name libtest knows a test by (`module::path::function`, without the crate), for a
/// case that re-runs this test binary as a child executing that one test (`--exact`).
pub fn test_name(module_path: &str, function: &str) -> String {
    let module = module_path
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    format!("{module}::{function}")
}

/// Runs the application's `sql` in the turn's transaction on whichever backend the runtime
/// is on, its `?` placeholders bound to `args` in order; returns the rows it affected.
pub async fn execute_in_turn<A: solid_objects::Actor>(
    turn: &mut Turn<A>,
    sql: &str,
    args: &[&str],
) -> Result<u64, TurnError> {
    if turn.sqlite().await.is_ok() {
        let mut query = sqlx::query(sql);
        for arg in args {
            query = query.bind(*arg);
        }
        return Ok(query.execute(turn.sqlite().await?).await?.rows_affected());
    }
    if turn.postgres().await.is_ok() {
        let numbered = numbered_placeholders(sql);
        let mut query = sqlx::query(&numbered);
        for arg in args {
            query = query.bind(*arg);
        }
        return Ok(query.execute(turn.postgres().await?).await?.rows_affected());
    }
    let mut query = sqlx::query(sql);
    for arg in args {
        query = query.bind(*arg);
    }
    Ok(query.execute(turn.mysql().await?).await?.rows_affected())
}

/// `sql` with each `?` placeholder numbered (`$1`, `$2`, ...), as PostgreSQL spells them.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut numbered = String::with_capacity(sql.len());
    let mut next = 0;
    for character in sql.chars() {
        if character == '?' {
            next += 1;
            numbered.push_str(&format!("${next}"));
        } else {
            numbered.push(character);
        }
    }
    numbered
}

/// Whether a case about what only `backend` does runs here: true on that backend; on the
/// others it prints why it skips and is false (the case then returns).
pub fn only_on(harness: &Harness, backend: Backend, why: &str) -> bool {
    if harness.backend() == backend {
        return true;
    }
    eprintln!("skipped on {:?}: {why}", harness.backend());
    false
}

/// The message with `request_id`, which an error named as queued, its result read as `T`.
pub async fn queued_message<T>(runtime: &Runtime, request_id: &str) -> MessageRef<T> {
    runtime
        .message(request_id)
        .await
        .unwrap()
        .expect("the error names a message that exists")
        .typed::<T>()
}

/// The code of the rejection a call ended with; panics on anything else.
pub fn rejection_code<T: Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Rejected(rejection)) => rejection.code().to_owned(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// How many of `results` succeeded, and the codes of the rejections the others ended with,
/// in order; panics on any other error.
pub fn held_and_rejected<T: Debug>(results: Vec<Result<T, Error>>) -> (usize, Vec<String>) {
    let held = results.iter().filter(|result| result.is_ok()).count();
    let rejected = results
        .into_iter()
        .filter(|result| result.is_err())
        .map(rejection_code)
        .collect();
    (held, rejected)
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

/// The values of the one column `sql` (with `?` placeholders) selects from the harness's
/// database, with `arguments` bound in order, in the order the rows come.
pub async fn column<T>(harness: &Harness, sql: &str, arguments: &[&str]) -> Vec<T>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + Unpin,
{
    let pool = connect(harness).await;
    let sql = harness.sql(sql);
    let mut query = sqlx::query_scalar(&sql);
    for argument in arguments {
        query = query.bind(*argument);
    }
    let values = query.fetch_all(&pool).await.expect("the query runs");
    pool.close().await;
    values
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

/// The process's one Prometheus recorder, installed by the first case that reads metrics.
///
/// A process has one global recorder, so every case that reads metrics shares it; each reads
/// only the counters of its own actor types.
pub fn prometheus() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the one recorder of this process installs")
    })
}

/// What a database written by the previous build holds: the first two migrations, and one
/// message enqueued with `delay(1 h)` for Counter "c" (as that build's `enqueue` stored it:
/// `available_at` = the requested time, the instance's `next_sequence` and `unfinished`
/// counted).
pub fn previous_build_rows(now: i64, later: i64) -> String {
    format!(
        "INSERT INTO solid_instances (actor_type, actor_id, state, revision, next_sequence,
             unfinished, updated_at)
         VALUES ('Counter', 'c', NULL, 0, 2, 1, {now});
         INSERT INTO solid_messages (actor_type, actor_id, sequence, operation, arguments,
             request_id, idempotency_key, status, attempts, available_at, result, last_error,
             created_at, finished_at)
         VALUES ('Counter', 'c', 1, 'bump', '{{}}', 'delayed-request', NULL, 'ready', 0, {later},
             NULL, NULL, {now}, NULL);"
    )
}
