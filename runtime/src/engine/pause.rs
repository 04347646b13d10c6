//! Pausing an actor and resuming it: an operator's switch on its instance row, which calls
//! and workers read before they take its lock.

use super::conflicts::rerun_conflicts;
use super::{micros, Engine};
use crate::error::Result;
use crate::store::ActorKey;

impl Engine {
    /// Pauses the actor (`paused`) or resumes it; false if it already was as asked. A turn
    /// through another node that certified first (Galera) leaves the switch to run again
    /// after it, as on one server the switch waits for the turn that holds the lock.
    pub(crate) async fn set_paused(&self, key: ActorKey<'_, '_>, paused: bool) -> Result<bool> {
        let changed = rerun_conflicts(|| async {
            let paused_at = paused.then(|| micros(self.now()));
            let mut tx = self.begin(None).await?;
            let changed = tx.set_paused(key, paused_at).await?;
            tx.commit().await?;
            Ok(changed)
        })
        .await?;
        if !paused {
            self.wake();
        }
        Ok(changed)
    }
}
