//! Stopping a runtime's workers within a deadline: [`Runtime::shutdown_with_deadline`],
//! [`Runtime::run_until_signal`], and the [`ShutdownReport`] they return.
//!
//! Work is abandoned by aborting the task that does it. A turn in flight then drops its
//! transaction, which rolls back (see `store::owned_transaction`): nothing of the turn
//! stays, and its message stays ready with its attempts as they were, for any runtime to run.

use std::future::Future;

use crate::client::shared::Runtime;
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::time::clock::IntoDuration;

/// What a shutdown with a deadline had to abandon.
///
/// Abandoned work is not lost: a turn rolls back and its message stays ready (no attempt
/// counted) for any runtime on the database, and an abandoned effect's runner gives its lease
/// back, so the effect is ready again at once with no attempt counted either. If the lease
/// cannot be given back within a moment (the database is gone), the effect runs again once
/// its lease ([`Builder::effect_lease`]) runs out, and that attempt counts.
///
/// [`Builder::effect_lease`]: crate::Builder::effect_lease
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

impl Runtime {
    /// Shuts down ([`shutdown`](Runtime::shutdown): no new calls, no new claims) and waits
    /// for the work in flight (the turns of [`run`](Runtime::run)'s workers and the effect
    /// handlers they started) to finish, until `deadline` from now; then abandons what is
    /// still running. Returns once `run` returned and no effect handler runs, with what was
    /// abandoned. The database stays open: [`close`](Runtime::close) closes it.
    ///
    /// An abandoned turn rolls back and its message stays ready, with no attempt counted, so
    /// another process (or this one, restarted) runs it; an abandoned effect's lease is given
    /// back, with no attempt counted either, so it runs again at once elsewhere. Work is abandoned at an `.await`: a handler blocking its thread
    /// is waited for. Keep `run` polled meanwhile (spawn it): dropping the `run` future
    /// abandons its workers at once. A worker counts as abandoned if it was still running
    /// at the deadline, whether in a turn or waiting for the database.
    ///
    /// Calls in flight from callers (a sync call running its turn) belong to their callers'
    /// futures, not to the runtime: they end by their own timeouts (the sync timeout), and
    /// on SQLite, whose one writer such a turn holds, [`close`](Runtime::close) waits for
    /// them. Stop taking requests before shutting down, or drop those futures.
    ///
    /// ```no_run
    /// # async fn example(runtime: solid_objects::Runtime) -> Result<(), solid_objects::Error> {
    /// use std::time::Duration;
    ///
    /// let workers = tokio::spawn({
    ///     let runtime = runtime.clone();
    ///     async move { runtime.run().await }
    /// });
    /// // ... until it is time to stop ...
    /// let report = runtime.shutdown_with_deadline(Duration::from_secs(10)).await;
    /// if !report.is_clean() {
    ///     tracing::warn!(?report, "abandoned work in flight; it runs again elsewhere");
    /// }
    /// workers.await.expect("the workers ran")?;
    /// runtime.close().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown_with_deadline(&self, deadline: impl IntoDuration) -> ShutdownReport {
        let deadline = deadline_after(deadline.into_duration());
        self.stop_by(tokio::time::sleep_until(deadline)).await
    }

    /// Runs the workers ([`run`](Runtime::run)) until the process gets SIGINT or SIGTERM
    /// (Ctrl-C where there are no Unix signals), then shuts down with the deadline of
    /// [`Builder::shutdown_deadline`](crate::Builder::shutdown_deadline) (30 s by default),
    /// as [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) does. A second signal
    /// abandons the work in flight at once. If another handle shuts the runtime down first,
    /// it returns when `run` does, with an empty report.
    ///
    /// ```no_run
    /// # async fn example(runtime: solid_objects::Runtime) -> Result<(), solid_objects::Error> {
    /// let report = runtime.run_until_signal().await?;
    /// tracing::info!(?report, "stopped");
    /// runtime.close().await;
    /// # Ok(()) }
    /// ```
    pub async fn run_until_signal(&self) -> Result<ShutdownReport> {
        // Listening starts before any worker does: no signal is missed once work runs.
        let mut signals = Signals::listen().map_err(Error::Signal)?;
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            ran = &mut run => return ran.map(|()| ShutdownReport::default()),
            () = signals.next() => {}
        }
        let deadline = deadline_after(self.shared.shutdown_deadline);
        tracing::info!(
            deadline = ?self.shared.shutdown_deadline,
            "a signal asked the runtime to stop; the work in flight may finish until the deadline"
        );
        let abandon = async {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = signals.next() => {}
            }
        };
        let (ran, report) = tokio::join!(run, self.stop_by(abandon));
        ran.map(|()| report)
    }

    /// Shuts down, waits for the work in flight until `deadline` resolves, then abandons
    /// the rest.
    async fn stop_by(&self, deadline: impl Future<Output = ()>) -> ShutdownReport {
        self.shutdown();
        let stopping = &self.shared.stopping;
        let effects = &self.shared.effect_tasks;
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
}

/// The signals that stop [`Runtime::run_until_signal`].
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts listening (from now on the signals no longer end the process).
    #[cfg(unix)]
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    fn listen() -> std::io::Result<Self> {
        Ok(Self {})
    }

    /// Resolves at the next signal.
    async fn next(&mut self) {
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
