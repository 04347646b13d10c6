//! [`Core`]: what every job of the engine works through: the store, the configuration, the
//! clock, the bounds of a transaction, and the wake-ups of the tasks that wait for work.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::EngineConfig;
use crate::error::Result;
use crate::limits::deadline_after;
use crate::store::{Bounds, Store, Transaction};

/// The store and the configuration every job borrows, and the wake-ups of this process.
pub(crate) struct Core {
    store: Arc<dyn Store>,
    config: EngineConfig,
    /// Woken after every commit that adds or finishes messages.
    wake: Notify,
}

impl Core {
    /// A core over `store`, configured by `config`.
    pub(super) fn new(store: Arc<dyn Store>, config: EngineConfig) -> Self {
        Self {
            store,
            config,
            wake: Notify::new(),
        }
    }

    /// The store every job reads and writes through (the engine's alone: the client and
    /// the operators' API read through [`Engine::reads`](super::Engine::reads)).
    pub(super) fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The store, shared (for watchers, which keep it past a call).
    pub(super) fn shared_store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// What the engine was configured with.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The runtime clock's now.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.config.clock.now()
    }

    /// Wakes every task waiting for work or for a message to finish, after a commit that
    /// left work or finished a message, and tells other processes where the store carries
    /// no notice of its own.
    pub(crate) fn wake(&self) {
        self.store.work_committed();
        self.wake_here();
    }

    /// Wakes every task of this process waiting for work or for a message to finish (a
    /// notice from another process, a shutdown).
    pub(crate) fn wake_here(&self) {
        self.wake.notify_waiters();
    }

    /// A wake-up registered now: it completes at the next [`wake`](Self::wake) from here on,
    /// even one that comes before it is first polled. A worker takes it before its pass, so
    /// a commit during the pass is not lost.
    pub(crate) fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Waits until woken or until `timeout` passes.
    pub(crate) async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// Begins a transaction within the caller's `deadline` (or the turn timeout).
    pub(crate) async fn begin(&self, deadline: Option<Instant>) -> Result<Box<dyn Transaction>> {
        let bounds = bounds(self.config.turn_timeout, deadline);
        self.store.begin(bounds).await
    }

    /// Begins a turn's transaction, whose first statement locks its actor; `alone` keeps it
    /// out of any group commit (a turn that ran past its group's budget runs again so).
    pub(crate) async fn begin_turn(
        &self,
        deadline: Option<Instant>,
        alone: bool,
    ) -> Result<Box<dyn Transaction>> {
        let bounds = Bounds {
            alone,
            locks_first: true,
            ..bounds(self.config.turn_timeout, deadline)
        };
        self.store.begin(bounds).await
    }

    /// Ends a transaction that has nothing to commit, its locks released before this
    /// returns (a failed rollback closes the connection instead).
    pub(crate) async fn release(tx: Box<dyn Transaction>) {
        if let Err(error) = tx.rollback().await {
            tracing::debug!(%error, "a rollback failed; its connection is closed");
        }
    }
}

/// The bounds of a transaction that ends by `deadline` (a caller's), or by the turn timeout
/// `turn` from now. A caller's transaction bounds each statement by its deadline too, so the
/// server stops the SQL of a turn whose caller gave up.
fn bounds(turn: Duration, deadline: Option<Instant>) -> Bounds {
    match deadline {
        Some(deadline) => Bounds {
            deadline,
            statement: turn
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            alone: false,
            locks_first: false,
        },
        None => Bounds {
            deadline: deadline_after(turn),
            statement: turn,
            alone: false,
            locks_first: false,
        },
    }
}
