//! The application rows of the group-commit tests: a `steps` table each turn writes into,
//! read back per actor beside the runtime's completed messages.

use std::collections::BTreeMap;
use std::path::Path;

use solid_objects::prelude::*;
use solid_objects::GroupCommit;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};

use super::Harness;

/// A connection of the test's own to the database file.
pub async fn open(path: &Path) -> SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .foreign_keys(true)
        .connect()
        .await
        .unwrap()
}

/// Creates the `steps` table (and any other tables in `more`, SQL run after it).
pub async fn create_steps(path: &Path, more: &str) {
    let mut connection = open(path).await;
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS steps (actor TEXT NOT NULL, n INTEGER NOT NULL)")
        .execute(&mut connection)
        .await
        .unwrap();
    if !more.is_empty() {
        sqlx::raw_sql(more).execute(&mut connection).await.unwrap();
    }
    connection.close().await.unwrap();
}

/// The application rows per actor, in insertion order.
pub async fn stored_steps(path: &Path) -> BTreeMap<String, Vec<u32>> {
    let mut connection = open(path).await;
    let rows: Vec<(String, u32)> = sqlx::query_as("SELECT actor, n FROM steps ORDER BY rowid")
        .fetch_all(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
    let mut steps = BTreeMap::<String, Vec<u32>>::new();
    for (actor, n) in rows {
        steps.entry(actor).or_default().push(n);
    }
    steps
}

/// Completed messages per actor, and each actor's attempts over its completed messages.
pub async fn completed(path: &Path) -> BTreeMap<String, (i64, i64)> {
    let mut connection = open(path).await;
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT actor_id, COUNT(*), SUM(attempts) FROM solid_messages
         WHERE status = 'completed' GROUP BY actor_id",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    connection.close().await.unwrap();
    rows.into_iter()
        .map(|(actor, count, attempts)| (actor, (count, attempts)))
        .collect()
}

/// A builder for a runtime on the harness's file and clock, grouping commits as `grouping`
/// says, that allows every call.
pub fn grouped(harness: &Harness, grouping: GroupCommit) -> solid_objects::Builder {
    Runtime::builder()
        .sqlite(harness.path())
        .clock(harness.clock.clone())
        .group_commit(grouping)
        .policy(AllowAll)
}
