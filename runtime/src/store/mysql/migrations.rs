//! Applying MySQL's migrations step by step, each step recorded, so that a process that dies
//! part of the way resumes at the next start and never fails on what it had done.
//!
//! MySQL commits each DDL statement by itself, so a migration's steps ([`steps`]) run one at
//! a time on a connection of their own, under the migration lock ([`migration_lock`]), and
//! each is recorded in `solid_migration_steps` before it runs (begun) and after (finished);
//! the migration's last step records the migration in `solid_schema_migrations` instead and
//! forgets its steps. A step found begun but not finished was cut short by a crash, and may
//! have been applied: running it again, its "already done" errors (a duplicate column, key
//! or table; a column or key to drop that is gone) mean it was, and it is recorded finished.
//! A step whose statement would fail that way on a second run therefore holds that one
//! statement alone (a second one after it would be taken as done too); a step that checks
//! the schema first can hold several.
//!
//! Turns go on meanwhile: an index step is one `ALTER TABLE` with `ALGORITHM = INPLACE,
//! LOCK = NONE` (the server refuses it rather than block writes), and every step waits at
//! most a second for the metadata lock an `ALTER` takes at its start and end (turns queue
//! behind that wait), giving way and trying again while a long transaction holds the table
//! ([`migration_waits`](crate::store::migration_waits)).
//!
//! [`migration_lock`]: super::migration_lock

use std::collections::HashMap;

use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::Connection;

use super::errors::is_already_done;
use super::migration_lock::MigrationLock;
use super::{MYSQL_NO_PAD_BINARY, NO_PAD_BINARY};
use crate::error::Result;
use crate::store::migration_steps::steps;
use crate::store::migration_waits::Tries;

/// The schema, applied in order at start; each entry runs once per database.
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "schema",
        include_str!("../../../migrations/mysql/0001_schema.sql"),
    ),
    (
        11,
        "activity",
        include_str!("../../../migrations/mysql/0011_activity.sql"),
    ),
    (
        13,
        "wake_ups",
        include_str!("../../../migrations/mysql/0013_wake_ups.sql"),
    ),
    (
        14,
        "stalls",
        include_str!("../../../migrations/mysql/0014_stalls.sql"),
    ),
    (
        15,
        "activity tally",
        include_str!("../../../migrations/mysql/0015_activity_tally.sql"),
    ),
    (
        16,
        "trace context",
        include_str!("../../../migrations/mysql/0016_trace_context.sql"),
    ),
];

/// The migration session's settings: each statement commits by itself (an application's
/// pool may have turned `autocommit` off), and a metadata lock is waited for a second at
/// most (the least MySQL takes), so turns never queue longer behind a waiting `ALTER`.
const MIGRATION_SESSION: &str = "SET SESSION autocommit = 1, SESSION lock_wait_timeout = 1";

/// Whether the table of applied migrations exists.
const HAS_MIGRATIONS_TABLE: &str = "SELECT COUNT(*) FROM information_schema.tables
     WHERE table_schema = DATABASE() AND table_name = 'solid_schema_migrations'";

/// The versions of the applied migrations.
const APPLIED_VERSIONS: &str = "SELECT version FROM solid_schema_migrations";

/// The tables of applied migrations, and of the steps of migrations under way.
const CREATE_MIGRATION_TABLES: &str = "CREATE TABLE IF NOT EXISTS solid_schema_migrations (
         version BIGINT PRIMARY KEY, description VARCHAR(255) NOT NULL,
         applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6));
     CREATE TABLE IF NOT EXISTS solid_migration_steps (
         version BIGINT NOT NULL, step INT NOT NULL, finished BOOLEAN NOT NULL,
         PRIMARY KEY (version, step)) ENGINE = InnoDB";

/// Whether the server has the collation `$1`.
const HAS_COLLATION: &str = "SELECT 1 FROM information_schema.COLLATIONS WHERE COLLATION_NAME = ?";

/// The steps of migrations under way, and whether each finished.
const RECORDED_STEPS: &str = "SELECT version, step, finished FROM solid_migration_steps";

/// Records step `$2` of migration `$1` as begun.
const BEGIN_STEP: &str =
    "INSERT INTO solid_migration_steps (version, step, finished) VALUES (?, ?, FALSE)";

/// Records step `$2` of migration `$1` as finished.
const FINISH_STEP: &str =
    "UPDATE solid_migration_steps SET finished = TRUE WHERE version = ? AND step = ?";

/// Records migration `$1`, described as `$2`, as applied.
const RECORD_MIGRATION: &str =
    "INSERT INTO solid_schema_migrations (version, description) VALUES (?, ?)";

/// Forgets the steps of migration `$1`, once it is recorded.
const FORGET_STEPS: &str = "DELETE FROM solid_migration_steps WHERE version = ?";

/// The migrations this database has applied; `None` if it has no solid-objects schema.
pub(super) async fn applied(pool: &MySqlPool) -> Result<Option<Vec<i64>>> {
    let tables: i64 = sqlx::query_scalar(HAS_MIGRATIONS_TABLE)
        .fetch_one(pool)
        .await?;
    if tables == 0 {
        return Ok(None);
    }
    let versions = sqlx::query_scalar(APPLIED_VERSIONS).fetch_all(pool).await?;
    Ok(Some(versions))
}

/// Applies the migrations this database has not seen yet, under the migration lock (a row,
/// which a Galera cluster's nodes share), on a connection of its own.
pub(super) async fn migrate(pool: &MySqlPool) -> Result<()> {
    if let Some(applied) = applied(pool).await? {
        if MIGRATIONS
            .iter()
            .all(|(version, ..)| applied.contains(version))
        {
            return Ok(());
        }
    }
    let lock = MigrationLock::take(pool).await?;
    // Out of the pool: its session's settings never reach a turn.
    let migrated = match pool.acquire().await {
        Ok(connection) => {
            let mut connection = connection.detach();
            let migrated = migrate_on(&mut connection).await;
            // A close that fails has ended the session too.
            let _ = connection.close().await;
            migrated
        }
        Err(error) => Err(error.into()),
    };
    let released = lock.release().await;
    migrated?;
    released
}

/// Applies what is missing on `connection`, under the migration lock.
async fn migrate_on(connection: &mut MySqlConnection) -> Result<()> {
    sqlx::raw_sql(MIGRATION_SESSION)
        .execute(&mut *connection)
        .await?;
    sqlx::raw_sql(CREATE_MIGRATION_TABLES)
        .execute(&mut *connection)
        .await?;
    let has_no_pad_binary: Option<i64> = sqlx::query_scalar(HAS_COLLATION)
        .bind(NO_PAD_BINARY)
        .fetch_optional(&mut *connection)
        .await?;
    let applied: Vec<i64> = sqlx::query_scalar(APPLIED_VERSIONS)
        .fetch_all(&mut *connection)
        .await?;
    let recorded: HashMap<(i64, i32), bool> = sqlx::query_as(RECORDED_STEPS)
        .fetch_all(&mut *connection)
        .await?
        .into_iter()
        .map(|(version, step, finished)| ((version, step), finished))
        .collect();
    for (version, description, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let sql = match has_no_pad_binary {
            Some(_) => (*sql).to_owned(),
            None => sql.replace(NO_PAD_BINARY, MYSQL_NO_PAD_BINARY),
        };
        let steps = steps(&sql);
        for (number, step) in (0..).zip(&steps) {
            let begun = match recorded.get(&(*version, number)) {
                Some(true) => continue,
                Some(false) => true,
                None => false,
            };
            tracing::info!(version, step = number, "applying a migration step");
            if !begun {
                sqlx::query(BEGIN_STEP)
                    .bind(version)
                    .bind(number)
                    .execute(&mut *connection)
                    .await?;
            }
            run(connection, *version, step.sql(), begun).await?;
            if usize::try_from(number).is_ok_and(|number| number + 1 == steps.len()) {
                record_migration(connection, *version, description).await?;
            } else {
                sqlx::query(FINISH_STEP)
                    .bind(version)
                    .bind(number)
                    .execute(&mut *connection)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Runs the step `sql` of migration `version`, trying again while other sessions' locks are
/// in the way; for a step `begun` by a run that died, an "already done" error means its
/// change is in place.
async fn run(connection: &mut MySqlConnection, version: i64, sql: &str, begun: bool) -> Result<()> {
    let mut tries = Tries::new(version);
    loop {
        match sqlx::raw_sql(sql).execute(&mut *connection).await {
            Ok(_) => return Ok(()),
            Err(error) if begun && is_already_done(&error) => {
                tracing::info!(version, %error, "a migration step cut short by a crash had been applied");
                return Ok(());
            }
            Err(error) => tries.again(error.into()).await?,
        }
    }
}

/// Records migration `version`, described as `description`, and forgets its steps, in one
/// transaction.
async fn record_migration(
    connection: &mut MySqlConnection,
    version: i64,
    description: &str,
) -> Result<()> {
    let mut tx = connection.begin().await?;
    sqlx::query(RECORD_MIGRATION)
        .bind(version)
        .bind(description)
        .execute(&mut *tx)
        .await?;
    sqlx::query(FORGET_STEPS)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::store::migration_steps::{steps, Step};

    /// From migration 11 on, a statements step adds no index to a table (an index in a
    /// `CREATE TABLE` is on an empty table): a later migration that forgets the
    /// `-- step: index` line fails here rather than block turns.
    #[test]
    fn from_migration_11_on_every_index_added_to_a_table_is_an_index_step() {
        for (version, _, sql) in super::MIGRATIONS {
            if *version < 11 {
                continue;
            }
            for step in steps(sql) {
                let Step::Statements(sql) = step else {
                    continue;
                };
                let spelled: String = sql
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("--"))
                    .flat_map(str::split_whitespace)
                    .collect::<String>()
                    .to_ascii_uppercase();
                for adding in [
                    "ADDKEY",
                    "ADDINDEX",
                    "ADDUNIQUE",
                    "CREATEINDEX",
                    "CREATEUNIQUE",
                ] {
                    assert!(
                        !spelled.contains(adding),
                        "migration {version} adds an index outside a `-- step: index`"
                    );
                }
            }
        }
    }

    /// Every index step of this build's migrations is one that never blocks writes: the
    /// server builds it in place, and refuses it rather than lock the table.
    #[test]
    fn every_index_step_is_built_in_place_without_locking_the_table() {
        for (version, _, sql) in super::MIGRATIONS {
            for step in steps(sql) {
                let Step::Index(sql) = step else {
                    continue;
                };
                let spelled: String = sql
                    .split_whitespace()
                    .collect::<String>()
                    .to_ascii_uppercase();
                assert!(
                    spelled.contains("ALGORITHM=INPLACE,LOCK=NONE"),
                    "migration {version}: {sql}"
                );
            }
        }
    }
}
