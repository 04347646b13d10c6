//! A migrating process killed in the middle of an index build, and the schema a migration
//! leaves (its columns and indexes, to compare with a fresh database's): what the migration cases of tests/servers/migrations.rs and tests/upgrades.rs
//! share, on PostgreSQL or MariaDB (a database URL's scheme says which).
//!
//! [`kill_mid_index_build`] starts a child process (this test binary, running only the case
//! that calls [`migrate_if_asked`]) whose runtime migrates a database of an earlier release,
//! while this process holds a transaction open on `solid_messages`: the child's first index
//! build on that table waits for it. Once it waits, the child is killed with SIGKILL and its
//! session on the server is ended too (a server ends a dead client's session only when it
//! next writes to it; an operator, or a pooler, ends it sooner), so what the build left stays:
//! on PostgreSQL an invalid index, on MySQL a step recorded as begun and not finished.

use std::process::Child;
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use sqlx::{AnyConnection, Connection};

use super::children::running_only;
use super::runtimes::builder;

/// The variable that names the database a child migrates.
pub const MIGRATING_DATABASE: &str = "MIGRATING_DATABASE";

/// What the migration cases run on a server, in its own SQL.
struct ServerSql {
    /// Opens the transaction on `solid_messages` that the child's first index build waits
    /// for.
    hold: &'static str,
    /// The sessions of this database whose index build waits.
    build_waiting: &'static str,
    /// Ends the session `{}`.
    end_session: fn(i64) -> String,
    /// Runs once the child and its session are gone and the holding transaction rolled back.
    after_kill: Option<&'static str>,
    /// Every column of the database, one line each.
    columns: &'static str,
    /// Every index of the database, one line each.
    indexes: &'static str,
}

/// On PostgreSQL, a `CREATE INDEX CONCURRENTLY` waits for every transaction that writes to
/// its table, and has committed its (invalid) index by then.
const POSTGRES: ServerSql = ServerSql {
    hold: "BEGIN; LOCK TABLE solid_messages IN ROW EXCLUSIVE MODE",
    // The sessions that build an index concurrently and wait for a lock.
    build_waiting: "SELECT pid::BIGINT FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock'
       AND query LIKE 'CREATE INDEX CONCURRENTLY %'",
    end_session: |session| format!("SELECT pg_terminate_backend({session})"),
    after_kill: None,
    columns: POSTGRES_COLUMNS,
    indexes: POSTGRES_INDEXES,
};

/// On MariaDB, an `ALTER TABLE` waits for the metadata lock every open transaction that read
/// its table holds. The killed process's migration lock row is deleted, as an operator does
/// after a crash (its lease would free it in 30 s).
const MARIADB: ServerSql = ServerSql {
    hold: "START TRANSACTION; SELECT COUNT(*) FROM solid_messages",
    // The sessions that wait for a table's metadata lock.
    build_waiting: "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST
     WHERE DB = DATABASE() AND STATE = 'Waiting for table metadata lock'",
    end_session: |session| format!("KILL {session}"),
    after_kill: Some("DELETE FROM solid_migration_lock"),
    columns: MARIADB_COLUMNS,
    indexes: MARIADB_INDEXES,
};

/// The SQL of the server of `url`: PostgreSQL's or MariaDB's.
fn server_sql(url: &str) -> &'static ServerSql {
    match url.starts_with("postgres://") {
        true => &POSTGRES,
        false => &MARIADB,
    }
}

/// A connection of the test's own to the database of `url`.
pub async fn connect(url: &str) -> AnyConnection {
    sqlx::any::install_default_drivers();
    AnyConnection::connect(url).await.unwrap()
}

/// The indexes of PostgreSQL's current schema: each one's name, definition and validity.
const POSTGRES_INDEXES: &str = "SELECT c.relname || ': ' || pg_get_indexdef(i.indexrelid)
            || CASE WHEN i.indisvalid THEN '' ELSE ' (INVALID)' END
     FROM pg_index i
     JOIN pg_class c ON c.oid = i.indexrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema()
     ORDER BY 1";

/// The columns of PostgreSQL's current schema: each one's table, name, type, nullability and
/// default.
const POSTGRES_COLUMNS: &str = "SELECT (table_name || '.' || column_name || ' ' || data_type
            || CASE WHEN is_nullable = 'NO' THEN ' NOT NULL' ELSE '' END
            || COALESCE(' DEFAULT ' || column_default, ''))::TEXT
     FROM information_schema.columns
     WHERE table_schema = current_schema()
     ORDER BY 1";

/// The columns of MariaDB's current database: each one's table, name, type, nullability,
/// default and collation.
const MARIADB_COLUMNS: &str = "SELECT CAST(CONCAT(table_name, '.', column_name, ' ', column_type,
            IF(is_nullable = 'NO', ' NOT NULL', ''),
            IFNULL(CONCAT(' DEFAULT ', column_default), ''),
            IFNULL(CONCAT(' COLLATE ', collation_name), '')) AS CHAR)
     FROM information_schema.columns
     WHERE table_schema = DATABASE()
     ORDER BY 1";

/// The indexes of MariaDB's current database: each one's table, name, uniqueness and columns
/// (with prefix lengths) in order.
const MARIADB_INDEXES: &str = "SELECT CAST(CONCAT(table_name, '.', index_name,
            IF(non_unique = 0, ' UNIQUE', ''), ' (',
            GROUP_CONCAT(CONCAT(column_name, IFNULL(CONCAT('(', sub_part, ')'), ''))
                         ORDER BY seq_in_index SEPARATOR ', '),
            ')') AS CHAR)
     FROM information_schema.statistics
     WHERE table_schema = DATABASE()
     GROUP BY table_name, index_name, non_unique
     ORDER BY 1";

/// The child's part: a runtime on the database the parent named, which migrates it; nothing
/// when the parent named none (a normal run of the test binary).
pub async fn migrate_if_asked() {
    let Ok(url) = std::env::var(MIGRATING_DATABASE) else {
        return;
    };
    let runtime = builder(&url, 4)
        .policy(AllowAll)
        .start()
        .await
        .expect("the child migrates");
    runtime.close().await;
}

/// Starts a child migrating the database of `url` (running `test`, this binary's case that
/// calls [`migrate_if_asked`]), kills it with SIGKILL once its first index build on
/// `solid_messages` waits for this process's open transaction, and ends its session.
pub async fn kill_mid_index_build(url: &str, test: &str) {
    let sql = server_sql(url);
    let mut holder = connect(url).await;
    sqlx::raw_sql(sql.hold).execute(&mut holder).await.unwrap();
    let mut observer = connect(url).await;
    let mut child = spawn(url, test);
    let deadline = Instant::now() + Duration::from_secs(60);
    let session: i64 = loop {
        let waiting = sqlx::query_scalar(sql.build_waiting)
            .fetch_optional(&mut observer)
            .await
            .unwrap();
        if let Some(session) = waiting {
            break session;
        }
        pause_while_it_runs(&mut child, deadline).await;
    };
    child.kill().expect("SIGKILL the migrating process");
    child.wait().expect("the migrating process is reaped");
    let end = (sql.end_session)(session);
    sqlx::raw_sql(&end).execute(&mut observer).await.unwrap();
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    if let Some(after) = sql.after_kill {
        sqlx::raw_sql(after).execute(&mut observer).await.unwrap();
    }
}

/// Starts this binary as a child running only `test`, on the database of `url`.
fn spawn(url: &str, test: &str) -> Child {
    running_only(test)
        .env(MIGRATING_DATABASE, url)
        .spawn()
        .expect("the migrating process starts")
}

/// Pauses before the next look for the child's waiting index build; panics if the child
/// ended, or `deadline` passed.
async fn pause_while_it_runs(child: &mut Child, deadline: Instant) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the migrating process ended ({status}) before its index build waited");
    }
    assert!(
        Instant::now() < deadline,
        "the migrating process never waited in an index build"
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// The schema of the database of `url`, one line each, ordered: every column (its table, type,
/// nullability and default), then every index as [`indexes`] shows it.
pub async fn schema(url: &str) -> Vec<String> {
    let sql = server_sql(url);
    let mut schema = lines(url, sql.columns).await;
    schema.extend(lines(url, sql.indexes).await);
    schema
}

/// The indexes of the database of `url`, one line each, ordered: name, definition and (on
/// PostgreSQL) whether it is invalid.
pub async fn indexes(url: &str) -> Vec<String> {
    lines(url, server_sql(url).indexes).await
}

/// The one text column of the rows of `query` on the database of `url`.
async fn lines(url: &str, query: &str) -> Vec<String> {
    // Typed connections: MariaDB's information schema reads as BLOB through sqlx's `Any`.
    if url.starts_with("postgres://") {
        let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(query)
            .fetch_all(&mut connection)
            .await
            .unwrap()
    } else {
        let mut connection = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::query_scalar(query)
            .fetch_all(&mut connection)
            .await
            .unwrap()
    }
}

/// The schema a database this build created has, `fresh` (an empty database on the same
/// server): this build migrates it, and [`schema`] reads it.
pub async fn fresh_schema(fresh: &str) -> Vec<String> {
    let runtime = builder(fresh, 4)
        .policy(AllowAll)
        .start()
        .await
        .expect("this build creates a database");
    runtime.close().await;
    schema(fresh).await
}
