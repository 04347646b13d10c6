//! The setups most cases begin with, each in one call.

use std::time::Duration;

use solid_objects::policy::Policy;
use solid_objects::prelude::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::SqlitePool;

use super::{Backend, Harness};

/// A fresh harness on the binary's backend, and a runtime on it that allows every call.
pub async fn started() -> (Harness, Runtime) {
    let harness = Harness::new();
    let runtime = harness.start().await;
    (harness, runtime)
}

/// A runtime on the harness's database under `policy`, on the system's clock.
pub async fn start_with_policy(harness: &Harness, policy: impl Policy) -> Runtime {
    let builder = harness.store().await.policy(policy);
    builder.start().await.expect("the runtime starts")
}

/// [`started`], and a reference to the actor `id` of type `A` on its runtime.
pub async fn started_on<A: solid_objects::Addressable>(
    id: &str,
) -> (Harness, Runtime, A::Reference) {
    started_on_with::<A>(id, |builder| builder).await
}

/// [`started_with`], and a reference to the actor `id` of type `A` on its runtime.
pub async fn started_on_with<A: solid_objects::Addressable>(
    id: &str,
    configure: impl FnOnce(solid_objects::Builder) -> solid_objects::Builder,
) -> (Harness, Runtime, A::Reference) {
    let (harness, runtime) = started_with(configure).await;
    let actor = runtime.reference::<A>(id);
    (harness, runtime, actor)
}

/// A runtime of `A`s under `policy` on a SQLite file in `dir`, on the system's clock.
pub async fn on_a_file_in<A: solid_objects::Actor>(
    dir: &tempfile::TempDir,
    policy: impl Policy,
) -> Runtime {
    Runtime::builder()
        .sqlite(dir.path().join("actors.db"))
        .policy(policy)
        .actor::<A>()
        .start()
        .await
        .unwrap()
}

/// A pool of the application's own on the harness's SQLite file (created if missing, in WAL
/// mode) of `connections` connections, each with `busy_timeout` if the application sets one.
pub async fn application_pool(
    harness: &Harness,
    connections: u32,
    busy_timeout: Option<Duration>,
) -> SqlitePool {
    let mut options = SqliteConnectOptions::new()
        .filename(harness.path())
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    if let Some(timeout) = busy_timeout {
        options = options.busy_timeout(timeout);
    }
    SqlitePoolOptions::new()
        .max_connections(connections)
        .connect_with(options)
        .await
        .expect("the application's pool opens")
}

/// A builder on the application's `pool`, on the harness's clock, that allows every call.
pub fn on_application_pool(harness: &Harness, pool: SqlitePool) -> solid_objects::Builder {
    Runtime::builder()
        .sqlite_pool(pool)
        .clock(harness.clock.clone())
        .policy(AllowAll)
}

/// A fresh harness when the binary's backend is SQLite; on the others, `None` after saying
/// why the case skips (`why`, see [`only_on`](super::only_on)), and the case returns.
pub fn sqlite_harness(why: &str) -> Option<Harness> {
    let harness = Harness::new();
    super::only_on(&harness, Backend::Sqlite, why).then_some(harness)
}

/// A fresh harness, and a runtime on it that allows every call, built as `configure` says.
pub async fn started_with(
    configure: impl FnOnce(solid_objects::Builder) -> solid_objects::Builder,
) -> (Harness, Runtime) {
    let harness = Harness::new();
    let builder = configure(harness.builder().await);
    (harness, builder.start().await.expect("the runtime starts"))
}

/// [`started_with`] on the system's clock: for cases whose leases and waits pass in real
/// time.
pub async fn started_on_system_time(
    configure: impl FnOnce(solid_objects::Builder) -> solid_objects::Builder,
) -> (Harness, Runtime) {
    let harness = Harness::new();
    let builder = configure(harness.store().await.policy(AllowAll));
    (harness, builder.start().await.expect("the runtime starts"))
}

/// [`started_with`] without an fsync at each commit on SQLite (see
/// [`Harness::store_without_fsync`]): for cases that commit thousands of turns.
pub async fn started_without_fsync(
    configure: impl FnOnce(solid_objects::Builder) -> solid_objects::Builder,
) -> (Harness, Runtime) {
    let harness = Harness::new();
    let store = harness.store_without_fsync().await;
    let builder = configure(store.clock(harness.clock.clone()).policy(AllowAll));
    (harness, builder.start().await.expect("the runtime starts"))
}

/// Another process's hold on the harness's SQLite file: a connection of its own that took
/// the write lock (`BEGIN IMMEDIATE`) and keeps it until [`FileHolder::release`].
pub struct FileHolder {
    pool: SqlitePool,
    holding: sqlx::Transaction<'static, sqlx::Sqlite>,
}

impl FileHolder {
    /// Takes the write lock of the harness's SQLite file.
    pub async fn take(harness: &Harness) -> Self {
        let options = SqliteConnectOptions::new().filename(harness.path());
        let pool = SqlitePool::connect_with(options)
            .await
            .expect("the file opens");
        let holding = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("the write lock is taken");
        Self { pool, holding }
    }

    /// Lets the write lock go, and closes the connection.
    pub async fn release(self) {
        self.holding.rollback().await.expect("the hold rolls back");
        self.pool.close().await;
    }
}
