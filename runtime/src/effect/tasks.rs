//! [`EffectTasks`]: the effect handlers a runtime's workers started, each in a task of its
//! own, so that no handler holds a worker and shutdown can wait for them or abandon them.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How many effects one runtime's workers run at once; the rest wait for a later pass.
const CONCURRENT_EFFECTS: u32 = 16;

/// The effect tasks of one runtime: at most [`CONCURRENT_EFFECTS`] at once.
pub(crate) struct EffectTasks {
    permits: Arc<Semaphore>,
    tasks: Mutex<JoinSet<()>>,
}

impl EffectTasks {
    pub(crate) fn new() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(CONCURRENT_EFFECTS as usize)),
            tasks: Mutex::default(),
        }
    }

    /// A place for one more effect, if fewer than the most run now.
    pub(crate) fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }

    /// Runs `task`, which holds its permit until it ends, in a task of its own.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Returns once no effect task runs.
    pub(crate) async fn idle(&self) {
        // Every task holds a permit until it ends; the semaphore is never closed.
        let _all = self.permits.acquire_many(CONCURRENT_EFFECTS).await;
    }

    /// Aborts the effect tasks still running; returns how many there were.
    pub(crate) fn abandon(&self) -> usize {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        let running = tasks.len();
        tasks.abort_all();
        running
    }
}
