//! Destroying an actor: its reminders deleted, its unfinished messages ended as destroyed,
//! and its next incarnation started from no state.

use std::time::Duration;

use tokio::time::Instant;

use super::conflicts::conflict_pause;
use super::core::Core;
use super::state_cache::StateCache;
use super::watchers::Watchers;
use super::{micros, paused};
use crate::error::Result;
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::store::{ActorKey, ActorLock};

/// The destroy job: ending an actor's incarnation. It borrows the core, the states kept in
/// memory (the destroyed one is forgotten) and the watchers it tells.
#[derive(Clone, Copy)]
pub(crate) struct Destroy<'e> {
    core: &'e Core,
    states: &'e StateCache,
    watchers: &'e Watchers,
}

impl<'e> Destroy<'e> {
    /// The destroy job over the engine's parts.
    pub(super) fn new(core: &'e Core, states: &'e StateCache, watchers: &'e Watchers) -> Self {
        Self {
            core,
            states,
            watchers,
        }
    }
}

impl Destroy<'_> {
    /// Destroys an actor: waits for its lock (a turn elsewhere finishes first), deletes its
    /// reminders, ends its unfinished messages as destroyed, and starts its next incarnation
    /// from no state.
    pub(crate) async fn actor(&self, key: ActorKey<'_, '_>, timeout: Duration) -> Result<()> {
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
        let mut tx = self.core.begin(Some(deadline)).await?;
        let locked = tx
            .lock_actor(ActorLock::waiting(key, micros(self.core.now())))
            .await?;
        if locked.is_some_and(|locked| locked.instance.paused) {
            Core::release(tx).await;
            return Err(paused(key));
        }
        tx.destroy_actor(key, micros(self.core.now())).await?;
        let committed = tx.commit().await;
        self.states.forget(key);
        committed?;
        self.core.wake();
        self.watchers.committed(key);
        Ok(())
    }
}
