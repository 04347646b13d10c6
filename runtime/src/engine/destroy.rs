//! Destroying an actor: its reminders deleted, its unfinished messages ended as destroyed,
//! and its next incarnation started from no state.

use std::time::Duration;

use tokio::time::Instant;

use super::conflicts::conflict_pause;
use super::{micros, paused, Engine};
use crate::error::Result;
use crate::limits::deadline_after;
use crate::store::{ActorKey, LockWait};

impl Engine {
    /// Destroys an actor: waits for its lock (a turn elsewhere finishes first), deletes its
    /// reminders, ends its unfinished messages as destroyed, and starts its next incarnation
    /// from no state.
    pub(crate) async fn destroy(&self, key: ActorKey<'_, '_>, timeout: Duration) -> Result<()> {
        let deadline = deadline_after(timeout);
        let mut conflicts = 0;
        loop {
            match self.destroy_once(key, deadline).await {
                // A turn another node certified first (Galera): destroy after it, as a
                // destroy on one server waits for the turn that holds the lock.
                Err(error) if error.is_conflict() && Instant::now() < deadline => {
                    conflicts += 1;
                    conflict_pause(conflicts).await;
                }
                destroyed => return destroyed,
            }
        }
    }

    /// One try at [`destroy`](Self::destroy), in a transaction of its own.
    async fn destroy_once(&self, key: ActorKey<'_, '_>, deadline: Instant) -> Result<()> {
        let mut tx = self.begin(Some(deadline)).await?;
        let locked = tx
            .lock_actor(key, LockWait::Wait, micros(self.now()), None)
            .await?;
        if locked.is_some_and(|locked| locked.instance.paused) {
            Self::release(tx).await;
            return Err(paused(key));
        }
        tx.destroy_actor(key, micros(self.now())).await?;
        let committed = tx.commit().await;
        self.states.forget(key);
        committed?;
        self.wake();
        self.state_committed(key);
        Ok(())
    }
}
