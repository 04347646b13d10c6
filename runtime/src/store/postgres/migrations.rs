//! Applying PostgreSQL's migrations without blocking turns: one action at a time, each
//! recorded once done, on a connection of its own that holds the migration lock.
//!
//! A migration's steps ([`steps`]) become actions ([`index_steps`](super::index_steps)): a
//! statements step runs in a transaction with its record, and an index step builds its index
//! `CONCURRENTLY`, which PostgreSQL refuses inside a transaction, so each action commits by
//! itself and is recorded in `solid_migration_steps`; the migration's last one records the
//! migration in `solid_schema_migrations` instead and forgets its steps. A process that dies
//! part of the way resumes at the next start with the first action not recorded, and every
//! action can run again after a crash cut it short (an index left invalid is dropped and
//! built again).
//!
//! Turns go on meanwhile: an index build, a concurrent drop and a rename take no lock that
//! writes wait for, and a transaction, whose statements may take a strong lock (`ALTER
//! TABLE`), waits at most [`SHORT_LOCK_WAIT`] for it each time it tries
//! ([`migration_waits`](crate::store::migration_waits)). Processes that start together
//! migrate once: the migrator holds a session's advisory lock (a transaction's would end
//! with the first commit) and the others poll for it with `pg_try_advisory_lock`, since a
//! session waiting inside `pg_advisory_lock` holds a snapshot that a concurrent index build
//! would wait for in turn. Closing the connection ends the session and with it the lock,
//! also when the future migrating is dropped.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

use super::index_steps::{actions, drop_index, rename_index, Action};
use crate::error::{Error, Result};
use crate::store::errors::is_busy;
use crate::store::migration_steps::steps;
use crate::store::migration_waits::{blocked, Tries, PATIENCE};

/// The schema, applied in order at start; each entry runs once per database.
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "actors",
        include_str!("../../../migrations/postgres/0001_actors.sql"),
    ),
    (
        2,
        "effects",
        include_str!("../../../migrations/postgres/0002_effects.sql"),
    ),
    (
        3,
        "lock-free mailboxes",
        include_str!("../../../migrations/postgres/0003_lock_free_mailboxes.sql"),
    ),
    (
        4,
        "effect claims",
        include_str!("../../../migrations/postgres/0004_effect_claims.sql"),
    ),
    (
        5,
        "lifecycle",
        include_str!("../../../migrations/postgres/0005_lifecycle.sql"),
    ),
    (
        6,
        "wake-up",
        include_str!("../../../migrations/postgres/0006_wake_up.sql"),
    ),
    (
        7,
        "administration",
        include_str!("../../../migrations/postgres/0007_administration.sql"),
    ),
    (
        8,
        "state compression",
        include_str!("../../../migrations/postgres/0008_state_compression.sql"),
    ),
    (
        9,
        "state notices",
        include_str!("../../../migrations/postgres/0009_state_notices.sql"),
    ),
    (
        10,
        "lock in one statement",
        include_str!("../../../migrations/postgres/0010_lock_in_one_statement.sql"),
    ),
    (
        11,
        "activity",
        include_str!("../../../migrations/postgres/0011_activity.sql"),
    ),
    (
        12,
        "lock without creating",
        include_str!("../../../migrations/postgres/0012_lock_without_creating.sql"),
    ),
    (
        14,
        "stalls",
        include_str!("../../../migrations/postgres/0014_stalls.sql"),
    ),
    (
        15,
        "activity tally",
        include_str!("../../../migrations/postgres/0015_activity_tally.sql"),
    ),
    (
        16,
        "trace context",
        include_str!("../../../migrations/postgres/0016_trace_context.sql"),
    ),
];

/// The advisory lock that serialises migrators (several processes starting at once), as
/// earlier builds took it in their migration's transaction.
const MIGRATION_LOCK: i64 = 0x736f_6c69_645f_6f62;

/// How long a migrator waits for another process's migration before it gives up.
const LOCK_WAIT_AT_MOST: Duration = Duration::from_secs(3600);

/// How long a migration's transaction waits for a lock each time it tries: turns that queue
/// behind its wait wait no longer.
const SHORT_LOCK_WAIT: &str = "SET LOCAL lock_timeout = '100ms'";

/// The migration session's bounds: no limit on a statement's time (an index on a large table
/// takes what it takes), and a lock wait, for the index builds' waits on the transactions
/// using their table, of [`PATIENCE`].
fn session_bounds() -> String {
    format!(
        "SET statement_timeout = 0; SET lock_timeout = '{}ms'",
        PATIENCE.as_millis()
    )
}

/// Whether the table of applied migrations exists.
const HAS_MIGRATIONS_TABLE: &str = "SELECT to_regclass('solid_schema_migrations') IS NOT NULL";

/// The versions of the applied migrations.
const APPLIED_VERSIONS: &str = "SELECT version FROM solid_schema_migrations";

/// The tables of applied migrations, and of the finished actions of migrations under way.
const CREATE_MIGRATION_TABLES: &str = "CREATE TABLE IF NOT EXISTS solid_schema_migrations (
         version BIGINT PRIMARY KEY, description TEXT NOT NULL,
         applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
     CREATE TABLE IF NOT EXISTS solid_migration_steps (
         version BIGINT NOT NULL, step INTEGER NOT NULL, PRIMARY KEY (version, step))";

/// Takes the migration lock `$1` for this session if no other session holds it.
const TRY_LOCK: &str = "SELECT pg_try_advisory_lock($1)";

/// The finished actions of migrations under way.
const FINISHED_STEPS: &str = "SELECT version, step FROM solid_migration_steps";

/// Records action `$2` of migration `$1` as finished.
const RECORD_STEP: &str = "INSERT INTO solid_migration_steps (version, step) VALUES ($1, $2)";

/// Records migration `$1`, described as `$2`, as applied.
const RECORD_MIGRATION: &str =
    "INSERT INTO solid_schema_migrations (version, description) VALUES ($1, $2)";

/// Forgets the actions of migration `$1`, once it is recorded.
const FORGET_STEPS: &str = "DELETE FROM solid_migration_steps WHERE version = $1";

/// Whether the index `$1` is valid (`NULL`: there is no such index).
const INDEX_IS_VALID: &str = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)";

/// The migrations this database has applied; `None` if it has no solid-objects schema.
pub(super) async fn applied(pool: &PgPool) -> Result<Option<Vec<i64>>> {
    let exists: bool = sqlx::query_scalar(HAS_MIGRATIONS_TABLE)
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(None);
    }
    let versions = sqlx::query_scalar(APPLIED_VERSIONS).fetch_all(pool).await?;
    Ok(Some(versions))
}

/// Applies the migrations this database has not seen yet, on a connection of its own that
/// holds the migration lock.
pub(super) async fn migrate(pool: &PgPool) -> Result<()> {
    let applied = applied(pool).await?.unwrap_or_default();
    let Some(missing) = MIGRATIONS
        .iter()
        .map(|(version, ..)| *version)
        .find(|version| !applied.contains(version))
    else {
        return Ok(());
    };
    // Out of the pool: its session's lock and settings never reach a turn.
    let mut connection = pool.acquire().await?.detach();
    let migrated = migrate_on(&mut connection, missing).await;
    // Closing ends the session, and with it the lock; a close that fails has ended it too.
    let _ = connection.close().await;
    migrated
}

/// Takes the migration lock on `connection`, then applies what is missing (from migration
/// `missing` on, as the database was before the lock).
async fn migrate_on(connection: &mut PgConnection, missing: i64) -> Result<()> {
    sqlx::raw_sql(&session_bounds())
        .execute(&mut *connection)
        .await?;
    take_lock(connection, missing).await?;
    sqlx::raw_sql(CREATE_MIGRATION_TABLES)
        .execute(&mut *connection)
        .await?;
    let applied: HashSet<i64> = sqlx::query_scalar(APPLIED_VERSIONS)
        .fetch_all(&mut *connection)
        .await?
        .into_iter()
        .collect();
    let finished: HashSet<(i64, i32)> = sqlx::query_as(FINISHED_STEPS)
        .fetch_all(&mut *connection)
        .await?
        .into_iter()
        .collect();
    for (version, description, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let steps = steps(sql);
        let actions = actions(&steps).ok_or_else(|| unreadable(*version))?;
        let last = actions.len().saturating_sub(1);
        for (number, action) in actions.iter().enumerate() {
            let step = Record {
                version: *version,
                description,
                number: i32::try_from(number).map_err(|_| unreadable(*version))?,
                last: number == last,
            };
            if !finished.contains(&(step.version, step.number)) {
                apply(connection, &step, action).await?;
            }
        }
    }
    Ok(())
}

/// Waits until this session holds the migration lock, polling for it.
///
/// # Errors
///
/// [`Error::SchemaMigrationBlocked`], naming migration `missing`, after
/// [`LOCK_WAIT_AT_MOST`] of another session holding it.
async fn take_lock(connection: &mut PgConnection, missing: i64) -> Result<()> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let taken: bool = sqlx::query_scalar(TRY_LOCK)
            .bind(MIGRATION_LOCK)
            .fetch_one(&mut *connection)
            .await?;
        if taken {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= LOCK_WAIT_AT_MOST {
            return Err(Error::SchemaMigrationBlocked {
                version: missing,
                waited,
                reason: "another session held the migration lock (an advisory lock) all along: \
                         another process is migrating, see pg_stat_activity"
                    .to_owned(),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// An action of a migration, as its record names it.
struct Record<'a> {
    version: i64,
    description: &'a str,
    /// The action's place among the migration's actions, from 0.
    number: i32,
    /// Whether it is the migration's last action, whose record is the migration's.
    last: bool,
}

/// Applies `action`, the action `step` names, and records it.
async fn apply(
    connection: &mut PgConnection,
    step: &Record<'_>,
    action: &Action<'_>,
) -> Result<()> {
    tracing::info!(
        version = step.version,
        step = step.number,
        ?action,
        "applying a migration step"
    );
    match action {
        Action::Transaction(sql) => in_transaction(connection, step, sql).await,
        Action::Rename { from, to } => {
            in_transaction(connection, step, &rename_index(from, to)).await
        }
        Action::Build { index, statement } => {
            build(connection, step.version, index, statement).await?;
            record_alone(connection, step).await
        }
        Action::Drop { index } => {
            concurrently(connection, step.version, &drop_index(index)).await?;
            record_alone(connection, step).await
        }
    }
}

/// Runs `sql` in a transaction with `step`'s record, each lock wait in it at most
/// [`SHORT_LOCK_WAIT`], trying again while other sessions' locks are in the way.
async fn in_transaction(connection: &mut PgConnection, step: &Record<'_>, sql: &str) -> Result<()> {
    let mut tries = Tries::new(step.version);
    loop {
        match try_in_transaction(connection, step, sql).await {
            Ok(()) => return Ok(()),
            Err(error) => tries.again(error).await?,
        }
    }
}

/// One try of [`in_transaction`]: rolled back if it fails.
async fn try_in_transaction(
    connection: &mut PgConnection,
    step: &Record<'_>,
    sql: &str,
) -> Result<()> {
    let mut tx = connection.begin().await?;
    sqlx::query(SHORT_LOCK_WAIT).execute(&mut *tx).await?;
    sqlx::raw_sql(sql).execute(&mut *tx).await?;
    record(&mut tx, step).await?;
    tx.commit().await?;
    Ok(())
}

/// Builds the index `index` with `statement`, unless a valid one of that name is there (a
/// build before a crash finished); an invalid one (a build cut short) is dropped first.
async fn build(
    connection: &mut PgConnection,
    version: i64,
    index: &str,
    statement: &str,
) -> Result<()> {
    let valid: Option<bool> = sqlx::query_scalar(INDEX_IS_VALID)
        .bind(index)
        .fetch_optional(&mut *connection)
        .await?;
    match valid {
        Some(true) => return Ok(()),
        Some(false) => concurrently(connection, version, &drop_index(index)).await?,
        None => {}
    }
    concurrently(connection, version, statement).await
}

/// Runs `statement`, one that PostgreSQL runs outside a transaction (`CONCURRENTLY`), whose
/// waits for the transactions using its table last at most [`PATIENCE`] each.
async fn concurrently(connection: &mut PgConnection, version: i64, statement: &str) -> Result<()> {
    match sqlx::raw_sql(statement).execute(&mut *connection).await {
        Ok(_) => Ok(()),
        Err(error) if is_busy(&error) => Err(blocked(version, PATIENCE, &error)),
        Err(error) => Err(error.into()),
    }
}

/// Records `step` in a transaction of its own.
async fn record_alone(connection: &mut PgConnection, step: &Record<'_>) -> Result<()> {
    let mut tx = connection.begin().await?;
    record(&mut tx, step).await?;
    tx.commit().await?;
    Ok(())
}

/// Records `step` as finished; the migration's last records the migration, and forgets
/// its steps.
async fn record(connection: &mut PgConnection, step: &Record<'_>) -> Result<()> {
    if step.last {
        sqlx::query(RECORD_MIGRATION)
            .bind(step.version)
            .bind(step.description)
            .execute(&mut *connection)
            .await?;
        sqlx::query(FORGET_STEPS)
            .bind(step.version)
            .execute(&mut *connection)
            .await?;
    } else {
        sqlx::query(RECORD_STEP)
            .bind(step.version)
            .bind(step.number)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}

/// The error for a migration of this build whose steps do not read (a defect of the build,
/// which its tests catch).
fn unreadable(version: i64) -> Error {
    Error::Config(format!(
        "this build's PostgreSQL migration {version} has an index step that is not \
         `[DROP INDEX name;] CREATE [UNIQUE] INDEX name ON table ...;`: a defect of the build"
    ))
}
