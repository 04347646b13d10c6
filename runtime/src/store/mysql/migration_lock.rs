//! The lock that serialises migrators: one row in `solid_migration_lock`, taken by a
//! committed `INSERT` and given back by a `DELETE`, with a lease the holder renews while it
//! migrates.
//!
//! A row works where a named lock does not: `GET_LOCK` belongs to one server, and a Galera
//! cluster does not replicate it, so two processes on two nodes would both hold it. Two
//! `INSERT`s of the one row conflict on every server: on one server the second waits for
//! the first and fails on its key; on a Galera cluster certification lets one commit and
//! aborts the other (a deadlock error), or the other fails on the key once the first's row
//! has reached its node. Either way the loser waits and tries again. A holder that dies
//! leaves its row behind: once its lease has run out (the holder renews it every few
//! seconds while it migrates), the next migrator deletes it and takes the lock.
//!
//! The lease runs on the server's clock, read where the statement runs.

use std::time::Duration;

use sqlx::mysql::MySqlPool;

use crate::error::{Error, Result};

/// The table the lock's row is in.
#[cfg(feature = "test-support")]
pub(super) const LOCK_TABLE: &str = "solid_migration_lock";

/// The lock's table: at most one row, the holder's.
const CREATE_LOCK_TABLE: &str = "CREATE TABLE IF NOT EXISTS solid_migration_lock (
    id         TINYINT NOT NULL PRIMARY KEY,
    holder     VARCHAR(64) NOT NULL,
    expires_at BIGINT NOT NULL)";

/// Takes the lock for holder `$1` until `$2` microseconds from now (fails on the key while
/// another holds it).
const TAKE_LOCK: &str = "INSERT INTO solid_migration_lock (id, holder, expires_at)
     VALUES (1, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ?)";

/// Deletes the lock's row if its holder's lease ran out.
const BREAK_EXPIRED_LOCK: &str = "DELETE FROM solid_migration_lock
     WHERE id = 1 AND expires_at < CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";

/// Extends holder `$1`'s lease to `$2` microseconds from now.
const RENEW_LOCK: &str = "UPDATE solid_migration_lock
     SET expires_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ?
     WHERE id = 1 AND holder = ?";

/// Gives holder `$1`'s lock back.
const RELEASE_LOCK: &str = "DELETE FROM solid_migration_lock WHERE id = 1 AND holder = ?";

/// How long a holder's lock outlives its last renewal.
const LEASE: Duration = Duration::from_secs(30);

/// How often a holder renews its lease while it migrates.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// How long a migrator waits for the lock before it gives up.
const WAIT_AT_MOST: Duration = Duration::from_secs(3600);

/// The migration lock, held: its lease renewed until it is released or dropped (a dropped
/// holder's row stays until its lease runs out).
pub(super) struct MigrationLock {
    pool: MySqlPool,
    holder: String,
    renewing: tokio::task::JoinHandle<()>,
}

impl MigrationLock {
    /// Waits until this process holds the lock, or an hour has passed.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] after an hour of another holder renewing its lease; a database error
    /// other than the lock being taken.
    pub(super) async fn take(pool: &MySqlPool) -> Result<Self> {
        sqlx::query(CREATE_LOCK_TABLE).execute(pool).await?;
        let holder = uuid::Uuid::new_v4().to_string();
        let lease = micros(LEASE);
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let taken = committed(pool, sqlx::query(TAKE_LOCK).bind(&holder).bind(lease)).await;
            match taken {
                Ok(_) => break,
                Err(error) if is_taken(&error) => {}
                Err(error) => return Err(error.into()),
            }
            let broken = committed(pool, sqlx::query(BREAK_EXPIRED_LOCK)).await;
            match broken {
                Ok(done) if done.rows_affected() > 0 => continue,
                Ok(_) => {}
                Err(error) if is_taken(&error) => {}
                Err(error) => return Err(error.into()),
            }
            if started.elapsed() >= WAIT_AT_MOST {
                return Err(Error::Config(
                    "another process held the migration lock (the row of \
                     solid_migration_lock) for an hour; if no process is migrating, delete \
                     that row"
                        .to_owned(),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
        let renewing = tokio::spawn(renew(pool.clone(), holder.clone()));
        Ok(Self {
            pool: pool.clone(),
            holder,
            renewing,
        })
    }

    /// Gives the lock back.
    pub(super) async fn release(self) -> Result<()> {
        self.renewing.abort();
        committed(&self.pool, sqlx::query(RELEASE_LOCK).bind(&self.holder)).await?;
        Ok(())
    }
}

impl Drop for MigrationLock {
    fn drop(&mut self) {
        self.renewing.abort();
    }
}

/// Renews `holder`'s lease every [`RENEW_EVERY`] until aborted; a renewal that fails is
/// tried again at the next.
async fn renew(pool: MySqlPool, holder: String) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let renewed = committed(
            &pool,
            sqlx::query(RENEW_LOCK).bind(micros(LEASE)).bind(&holder),
        )
        .await;
        if let Err(error) = renewed {
            tracing::warn!(%error, "renewing the migration lock's lease failed");
        }
    }
}

/// Runs `statement` in a transaction of its own and commits it: a session whose
/// `autocommit` is off (an application's pool) would otherwise leave it open, its lock row
/// unseen by the others.
async fn committed(
    pool: &MySqlPool,
    statement: sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>,
) -> sqlx::Result<sqlx::mysql::MySqlQueryResult> {
    let mut tx = pool.begin().await?;
    let done = statement.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(done)
}

/// Whether an error says another migrator holds, or is taking, the lock: its key is taken
/// (1062), or a cluster's certification, or InnoDB, picked this statement as the loser
/// (1213), or a lock wait on the row ran out (1205).
fn is_taken(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(database) = error else {
        return false;
    };
    database
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|mysql| matches!(mysql.number(), 1062 | 1213 | 1205))
}

/// A duration in whole microseconds.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
