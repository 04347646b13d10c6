//! Runtimes on a database named as a child process or another runtime is told it (a
//! PostgreSQL or MySQL URL, or a SQLite file's path: the backend is the name's), their
//! workers run in a task of their own, and what a test reads beside them: pools, numbers,
//! whether a row is locked.

use std::time::Duration;

use solid_objects::prelude::*;
use sqlx::{AnyConnection, AnyPool, Connection};

use super::eventually;

/// A builder on `database`, with `connections` on a server (a SQLite file has a pool of its
/// own size).
pub fn builder(database: &str, connections: u32) -> solid_objects::Builder {
    if database.starts_with("postgres://") {
        Runtime::builder().postgres(database, connections)
    } else if database.starts_with("mysql://") {
        Runtime::builder().mysql(database, connections)
    } else {
        Runtime::builder().sqlite(database)
    }
}

/// A runtime on `database` with `connections` and `clock` that allows every call.
pub async fn runtime(database: &str, connections: u32, clock: &ManualClock) -> Runtime {
    builder(database, connections)
        .clock(clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .expect("the runtime starts on the server")
}

/// Starts a runtime on each of `databases` at once, with `connections` and `clock`,
/// allowing every call, each start given `within`; what each start came to, in order.
pub async fn start_at_once(
    databases: &[String],
    connections: u32,
    clock: &ManualClock,
    within: std::time::Duration,
) -> Vec<Result<Result<Runtime, Error>, tokio::time::error::Elapsed>> {
    let starts = databases.iter().map(|database| {
        let started = builder(database, connections)
            .clock(clock.clone())
            .policy(AllowAll)
            .start();
        tokio::time::timeout(within, started)
    });
    futures_util::future::join_all(starts).await
}

/// Closes each of `runtimes`, one after the other.
pub async fn close_all(runtimes: impl IntoIterator<Item = Runtime>) {
    for runtime in runtimes {
        runtime.close().await;
    }
}

/// Shuts `workers` down and waits, ten seconds at most, for the task that ran them.
pub async fn stop_workers(workers: &Runtime, running: tokio::task::JoinHandle<Result<(), Error>>) {
    workers.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
}

/// Whether `workers` hear more than `before` notices of work within `within`.
pub async fn noticed_beyond(workers: &Runtime, before: u64, within: Duration) -> bool {
    eventually(within, || async { workers.stats().work_notices > before }).await
}

/// Whether `message` completes within `within`.
pub async fn completes<T>(message: &MessageRef<T>, within: Duration) -> bool {
    eventually(within, || async {
        matches!(message.status().await, Ok(MessageStatus::Completed))
    })
    .await
}

/// The committed state of the actor `id` of type `A`, read through `runtime`.
pub async fn state_of<A: solid_objects::Actor>(runtime: &Runtime, id: &str) -> A {
    let reference = solid_objects::Reference::<A>::new(id);
    runtime.scope(reference.snapshot()).await.unwrap()
}

/// The application's own pool (sqlx's `Any` driver) on `database`, a server's URL or a
/// SQLite file's path.
pub async fn pool(database: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = match database.contains("://") {
        true => database.to_owned(),
        false => format!("sqlite://{database}?mode=rwc"),
    };
    AnyPool::connect(&url).await.unwrap()
}

/// Runs the statements `sql` on `database` (as [`pool`] opens it), on a pool of its own.
pub async fn execute(database: &str, sql: &str) {
    let pool = pool(database).await;
    sqlx::raw_sql(sql)
        .execute(&pool)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    pool.close().await;
}

/// Runs `sql` (its placeholders `$1`, `$2`, .., each once and in order), bound to `texts`
/// and then `numbers`, in the turn's transaction, whichever backend the runtime is on.
pub async fn execute_in_turn_with<A: solid_objects::Actor>(
    turn: &mut Turn<A>,
    sql: &str,
    texts: &[&str],
    numbers: &[i64],
) -> Result<(), TurnError> {
    if turn.sqlite().await.is_ok() {
        let query = texts.iter().fold(sqlx::query(sql), |q, text| q.bind(*text));
        let query = numbers.iter().fold(query, |q, number| q.bind(*number));
        query.execute(turn.sqlite().await?).await?;
    } else if turn.postgres().await.is_ok() {
        let query = texts.iter().fold(sqlx::query(sql), |q, text| q.bind(*text));
        let query = numbers.iter().fold(query, |q, number| q.bind(*number));
        query.execute(turn.postgres().await?).await?;
    } else {
        // MySQL's placeholders are `?`.
        let sql = (1..=9).fold(sql.to_owned(), |sql, n| sql.replace(&format!("${n}"), "?"));
        let query = texts
            .iter()
            .fold(sqlx::query(&sql), |q, text| q.bind(*text));
        let query = numbers.iter().fold(query, |q, number| q.bind(*number));
        query.execute(turn.mysql().await?).await?;
    }
    Ok(())
}

/// One number that `sql` reads from `database` (as [`pool`] opens it), on a pool of its
/// own.
pub async fn scalar(database: &str, sql: &str) -> i64 {
    let pool = pool(database).await;
    let value = scalar_on(&pool, sql).await;
    pool.close().await;
    value
}

/// One number that `sql` reads through `pool`, whichever database it is on.
pub async fn scalar_on<DB>(pool: &sqlx::Pool<DB>, sql: &str) -> i64
where
    DB: sqlx::Database,
    i64: sqlx::Type<DB> + for<'row> sqlx::Decode<'row, DB>,
    for<'connection> &'connection mut DB::Connection: sqlx::Executor<'connection, Database = DB>,
    for<'query> DB::Arguments<'query>: sqlx::IntoArguments<'query, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

/// Whether another session can lock the actor's row on the server database `url` at once
/// (within two seconds), asked from an OS thread of its own while this thread blocks: a
/// test on a current-thread runtime then sees exactly what the runtime left behind when its
/// call returned, with no task of it running meanwhile.
pub fn row_is_free_while_this_thread_blocks(url: &str, actor_id: &str) -> bool {
    let on_postgres = url.starts_with("postgres://");
    let (bounded, locked) = if on_postgres {
        (
            "SET LOCAL lock_timeout = '2s'",
            "SELECT 1 FROM solid_instances WHERE actor_id = $1 FOR UPDATE",
        )
    } else {
        (
            "SET SESSION innodb_lock_wait_timeout = 2",
            "SELECT 1 FROM solid_instances WHERE actor_id = ? FOR UPDATE",
        )
    };
    let url = url.to_owned();
    let actor_id = actor_id.to_owned();
    on_a_thread_of_its_own(async move {
        sqlx::any::install_default_drivers();
        let mut connection = AnyConnection::connect(&url).await.unwrap();
        let mut tx = connection.begin().await.unwrap();
        sqlx::query(bounded).execute(&mut *tx).await.unwrap();
        sqlx::query(locked)
            .bind(&actor_id)
            .execute(&mut *tx)
            .await
            .is_ok()
    })
}

/// Runs `work` to its end on a current-thread Tokio runtime of its own, on an OS thread of
/// its own, while this thread blocks; its output.
pub fn on_a_thread_of_its_own<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join()
    .unwrap()
}
