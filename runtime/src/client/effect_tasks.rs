//! [`EffectTasks`]: the effect handlers a runtime's workers started, each in a task of its
//! own, so that no handler holds a worker and shutdown can wait for them or abandon them.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How many effects one runtime's workers run at once; the rest wait for a later pass.
const CONCURRENT_EFFECTS: u32 = 16;

/// The effect tasks of one runtime: at most [`CONCURRENT_EFFECTS`] at once.
pub(crate) struct EffectTasks {
    permits: Arc<Semaphore>,
    tasks: Mutex<JoinSet<()>>,
    abandon: watch::Sender<bool>,
}

impl EffectTasks {
    pub(crate) fn new() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(CONCURRENT_EFFECTS as usize)),
            tasks: Mutex::default(),
            abandon: watch::Sender::new(false),
        }
    }

    /// Resolves once a shutdown abandons the effects still running: a task then stops its
    /// handler and gives its lease back.
    pub(crate) fn abandoning(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut abandon = self.abandon.subscribe();
        async move {
            let _ = abandon.wait_for(|abandon| *abandon).await;
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

    /// Tells the effect tasks still running to stop their handlers and give their leases
    /// back; returns how many there were.
    pub(crate) fn abandon(&self) -> usize {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        self.abandon.send_replace(true);
        tasks.len()
    }
}
