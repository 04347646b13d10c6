//! How a schema migration's step waits for locks other sessions hold: briefly, then again.
//!
//! DDL that takes a strong lock on a table (PostgreSQL's `ALTER TABLE`, MySQL's metadata lock
//! at the start and the end of an `ALTER`) waits behind every transaction using the table,
//! and while it waits every later statement on the table waits behind it: one long
//! transaction would hold up every turn. So such a step waits for its lock only for the
//! backend's short lock timeout, gives way when that runs out (the turns queued behind it go
//! on), and tries again after a pause, until [`PATIENCE`] has passed; then the migration
//! stops with [`Error::SchemaMigrationBlocked`], and the steps it finished stay recorded for
//! the next start.

use std::time::Duration;

use tokio::time::Instant;

use super::errors::{is_busy, is_transient};
use crate::error::{Error, Result};

/// How long a migration step tries again for a lock before the migration stops.
pub(crate) const PATIENCE: Duration = Duration::from_secs(300);

/// The first pause between two tries; each pause doubles, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);

/// The longest pause between two tries.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The tries of one step of migration `version`: after each that failed, [`Tries::again`]
/// pauses and says whether to try again.
pub(crate) struct Tries {
    version: i64,
    started: Instant,
    pause: Duration,
}

impl Tries {
    /// The tries of a step of migration `version`, starting now.
    pub(crate) fn new(version: i64) -> Self {
        Self {
            version,
            started: Instant::now(),
            pause: FIRST_PAUSE,
        }
    }

    /// After a try that failed with `error`: pauses and returns `Ok` to try again if the try
    /// gave way to other sessions' locks (its lock wait ran out, or a deadlock ended it) and
    /// [`PATIENCE`] has not passed.
    ///
    /// # Errors
    ///
    /// [`Error::SchemaMigrationBlocked`] once [`PATIENCE`] has passed; any other `error` as
    /// it is.
    pub(crate) async fn again(&mut self, error: Error) -> Result<()> {
        let Error::Database(error) = error else {
            return Err(error);
        };
        if !is_busy(&error) && !is_transient(&error) {
            return Err(Error::Database(error));
        }
        let waited = self.started.elapsed();
        if waited >= PATIENCE {
            return Err(blocked(self.version, waited, &error));
        }
        tracing::info!(
            version = self.version,
            %error,
            "a migration step gave way to other sessions' locks; trying again"
        );
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        Ok(())
    }
}

/// The error of migration `version`, stopped after `waited` with the database's `error`.
pub(crate) fn blocked(version: i64, waited: Duration, error: &sqlx::Error) -> Error {
    Error::SchemaMigrationBlocked {
        version,
        waited,
        reason: error.to_string(),
    }
}
