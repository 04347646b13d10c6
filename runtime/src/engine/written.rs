//! What a turn leaves before its commit: its writes in its transaction ([`Written`]), or why
//! it committed nothing ([`Uncommitted`]). Whoever commits the transaction (the turn itself,
//! or the leader of the group it joined) reports the first and hears the second.

use super::settle::Settled;
use crate::error::Error;
use crate::store::ErrorKinds;
use crate::store::Version;

/// Why a turn committed nothing.
#[derive(Debug)]
pub(super) enum Uncommitted {
    /// Another transaction got in the way (a deadlock, a key taken at the same moment, a
    /// stale read): run the turn again, nothing counted.
    Conflict(String),
    /// The caller's deadline passed while the handler ran: abandoned, nothing counted; a
    /// stored message stays for later.
    Abandoned,
    /// The turn failed: an attempt to count, and whether another may succeed.
    Failed { error: String, retryable: bool },
    /// The turn joined a group commit and ran past the group's budget: undone so the
    /// earlier members could commit, nothing counted; it runs again outside any group.
    OverBudget,
    /// Its group commit ended in doubt (another member ended the transaction itself, or the
    /// `COMMIT` failed and the connection was closed), or its connection was lost with its
    /// `COMMIT` (perhaps after the server committed, before its answer came): the turn was
    /// kept or not. Read back under the actor's lock (which waits for any transaction still
    /// holding it), then counted as nothing or run again.
    InDoubt,
}

impl From<Error> for Uncommitted {
    fn from(error: Error) -> Self {
        #[cfg(feature = "simulation")]
        let counted =
            crate::simulation::reintroduced(crate::simulation::Defect::ConflictCountedAsFailure);
        #[cfg(not(feature = "simulation"))]
        let counted = false;
        if let Error::GroupCommitFailed { .. } = error {
            Self::InDoubt
        } else if error.is_conflict() && !counted {
            Self::Conflict(error.to_string())
        } else {
            Self::Failed {
                error: error.to_string(),
                retryable: true,
            }
        }
    }
}

/// A turn whose writes are in its transaction, not yet committed: what reporting it takes
/// once the transaction commits.
pub(super) struct Written {
    pub(super) actor_type: &'static str,
    pub(super) actor_id: String,
    pub(super) operation: &'static str,
    /// Whether the turn inserted its message (a fresh call's).
    pub(super) fresh: bool,
    /// The message's row; `None` for a fresh call's rejection that kept none.
    pub(super) message_id: Option<i64>,
    pub(super) settled: Settled,
    /// The actor's version the turn ran on.
    pub(super) version: Version,
    pub(super) delivered: Vec<(&'static str, &'static str)>,
    pub(super) available_at: i64,
    pub(super) finished: bool,
    pub(super) span: tracing::Span,
}
