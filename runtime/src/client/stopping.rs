//! [`Stopping`]: how a runtime's runs of the workers stop, and how many were abandoned.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;
use tokio::task::JoinSet;

/// How a runtime's runs of the workers stop: how many run, whether to abandon their work,
/// and how many workers were abandoned.
pub(crate) struct Stopping {
    runs: watch::Sender<usize>,
    abandon: watch::Sender<bool>,
    abandoned_workers: AtomicUsize,
}

impl Stopping {
    pub(crate) fn new() -> Self {
        Self {
            runs: watch::Sender::new(0),
            abandon: watch::Sender::new(false),
            abandoned_workers: AtomicUsize::new(0),
        }
    }

    /// Counts one run of the workers until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Running<'_> {
        self.runs.send_modify(|runs| *runs += 1);
        Running(self)
    }

    /// Resolves once a shutdown's deadline passed and the work in flight is to be abandoned.
    pub(crate) async fn abandoning(&self) {
        // `self` holds the sender, so the wait ends only when told to abandon.
        let _ = self.abandon.subscribe().wait_for(|abandon| *abandon).await;
    }

    /// Aborts `workers` and waits until each is gone, counting those abandoned mid-way.
    pub(crate) async fn abandon(&self, workers: &mut JoinSet<()>) {
        workers.abort_all();
        let mut abandoned = 0;
        while let Some(stopped) = workers.join_next().await {
            if stopped.is_err_and(|stopped| stopped.is_cancelled()) {
                abandoned += 1;
            }
        }
        self.abandoned_workers
            .fetch_add(abandoned, Ordering::AcqRel);
    }

    /// Tells every run of the workers to abandon its work, waits until none is left, and
    /// returns how many workers were abandoned mid-way since the last time.
    pub(crate) async fn abandon_all(&self) -> usize {
        self.abandon.send_replace(true);
        self.stopped().await;
        self.abandoned_workers.swap(0, Ordering::AcqRel)
    }

    /// Resolves once no run of the workers is left.
    pub(crate) async fn stopped(&self) {
        let _ = self.runs.subscribe().wait_for(|runs| *runs == 0).await;
    }
}

/// One run of the workers, counted while it lasts.
pub(crate) struct Running<'s>(&'s Stopping);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.runs.send_modify(|runs| *runs -= 1);
    }
}
