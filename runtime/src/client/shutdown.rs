//! Stopping a runtime's workers within a deadline (what [`Runtime::shutdown_with_deadline`]
//! and [`Runtime::run_until_signal`] do), the signals that stop them, and the
//! [`ShutdownReport`] they return.
//!
//! Work is abandoned by aborting the task that does it. A turn in flight then drops its
//! transaction, which rolls back (see `store::owned_transaction`): nothing of the turn
//! stays, and its message stays ready with its attempts as they were, for any runtime to run.

use std::future::Future;

use crate::client::shared::Runtime;

/// What a shutdown with a deadline had to abandon.
///
/// Abandoned work is not lost: a turn rolls back and its message stays ready (no attempt
/// counted) for any runtime on the database, and an abandoned effect's runner gives its lease
/// back, so the effect is ready again at once with no attempt counted either. If the lease
/// cannot be given back within a moment (the database is gone), the effect runs again once
/// its lease ([`Workers::effect_lease`]) runs out, and that attempt counts.
///
/// [`Workers::effect_lease`]: crate::Workers::effect_lease
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Workers still busy (in a turn, say) at the deadline, whose work was abandoned.
    pub abandoned_workers: usize,
    /// Effect handlers still running at the deadline, abandoned.
    pub abandoned_effects: usize,
}

impl ShutdownReport {
    /// Whether everything in flight finished before the deadline.
    pub fn is_clean(&self) -> bool {
        self.abandoned_workers == 0 && self.abandoned_effects == 0
    }
}

/// The signals that stop [`Runtime::run_until_signal`].
pub(super) struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts listening (from now on the signals no longer end the process).
    #[cfg(unix)]
    pub(super) fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    pub(super) fn listen() -> std::io::Result<Self> {
        Ok(Self {})
    }

    /// Resolves at the next signal.
    pub(super) async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C; only a shutdown call stops the runtime");
            std::future::pending::<()>().await;
        }
    }
}

/// Shuts down, waits for the work in flight until `deadline` resolves, then abandons
/// the rest.
pub(super) async fn stop_by(
    runtime: &Runtime,
    deadline: impl Future<Output = ()>,
) -> ShutdownReport {
    runtime.shutdown();
    let stopping = &runtime.shared.stopping;
    let effects = &runtime.shared.effect_tasks;
    let finished = async {
        stopping.stopped().await;
        effects.idle().await;
    };
    tokio::select! {
        () = finished => return ShutdownReport::default(),
        () = deadline => {}
    }
    let abandoned_workers = stopping.abandon_all().await;
    let abandoned_effects = effects.abandon();
    effects.idle().await;
    let report = ShutdownReport {
        abandoned_workers,
        abandoned_effects,
    };
    tracing::warn!(
        ?report,
        "the shutdown deadline passed: the work still in flight was abandoned and runs again \
         elsewhere"
    );
    report
}
