//! Transactions that lost to another's write: a deadlock victim, a serialization failure,
//! or a Galera node's certification failure. They committed nothing, so they run again
//! after a short, growing pause, a few times at most.

use std::future::Future;

use crate::error::Result;
use crate::store::ErrorKinds;

/// How many conflicts in a row a transaction runs again after; the next one is returned.
const CONFLICTS_RETRIED: u32 = 8;

/// Runs `attempt` (one transaction, committed or not at all) until it ends other than in a
/// conflict, or until it has conflicted [`CONFLICTS_RETRIED`] times and once more, which is
/// returned.
pub(crate) async fn rerun_conflicts<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut conflicts = 0;
    loop {
        match attempt().await {
            Err(error) if error.is_conflict() && conflicts < CONFLICTS_RETRIED => {
                conflicts += 1;
                conflict_pause(conflicts).await;
            }
            ended => return ended,
        }
    }
}

/// A short, growing pause before a conflicting turn (or claim, or firing pass) runs again,
/// so two that keep deadlocking each other, or two nodes of a cluster whose certification
/// keeps picking one of them, fall out of step.
pub(super) async fn conflict_pause(conflicts: u32) {
    let base = 1_u64 << conflicts.min(6);
    let jitter = u64::from(crate::ids::random_byte()) % base.max(1);
    tokio::time::sleep(std::time::Duration::from_millis(base + jitter)).await;
}
