//! The worker loop: [`Runtime::run`], its supervised workers, the relay of other
//! processes' work notices, and the hourly upkeep; and how a run stops within a deadline
//! ([`Runtime::shutdown_with_deadline`], [`Runtime::run_until_signal`], with the
//! `shutdown.rs` they stop by).
//!
//! Workers only call the engine; what they run is decided there.

use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::client::shared::Runtime;
use crate::client::shutdown::{stop_by, ShutdownReport, Signals};
use crate::client::workers::IDLE_POLL_MIN;
use crate::engine::TurnErrors;
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::time::clock::IntoDuration;

/// How many actors a worker pass takes, and how many turns one actor gets per pass.
const ACTORS_PER_PASS: i64 = 100;
const TURNS_PER_ACTOR: usize = 50;
/// How long the supervisor waits before it starts a worker that stopped, at first and at
/// most (doubling while workers keep stopping).
const RESTART_PAUSE_MIN: Duration = Duration::from_millis(100);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(5);
/// How long the relay of PostgreSQL's work notices waits after an error before it listens
/// again.
const NOTICE_RETRY: Duration = Duration::from_secs(1);
/// How long a paused worker waits for the database at a time before it looks at the
/// runtime's shutdown again.
const DATABASE_WAIT: Duration = Duration::from_secs(1);
/// How often (by the runtime's clock) the workers do the upkeep: prune, report.
const UPKEEP_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// How often (by the runtime's clock) the workers fold the charts' tallies of the minutes
/// that ended: the charts count the minutes not yet folded from their rows.
const FOLD_EVERY: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

impl Runtime {
    /// Runs the workers until [`shutdown`](Runtime::shutdown): they fire due reminders as
    /// ordinary mailbox messages, run the ready messages of the actor types this runtime
    /// knows (a busy actor yields after 50 turns so others are not starved), run due effects
    /// with their handlers, and prune old rows hourly. A commit in this process wakes an
    /// idle worker at once, and on PostgreSQL so does a commit in any other process (the
    /// workers `LISTEN` on a connection of their own); otherwise idle workers poll every
    /// 100 ms, backing off to [`Workers::idle_poll`](crate::Workers::idle_poll) (1 s), taking turns: one idle worker
    /// polls at a time.
    ///
    /// The workers are supervised: one that stops for any reason but shutdown (a panic in
    /// a custom [`Clock`](crate::Clock), say) is logged and started again. Returns `Ok(())` only after
    /// [`shutdown`](Runtime::shutdown), once every worker finished what it was doing, or
    /// once [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) abandoned them.
    pub async fn run(&self) -> Result<()> {
        let _running = self.shared.stopping.enter();
        let worker_loop = WorkerLoop {
            runtime: self.clone(),
        };
        let mut workers = JoinSet::new();
        for _ in 0..self.shared.workers.count {
            worker_loop.spawn_worker(&mut workers);
        }
        // Ends with this call (the guard aborts it), whatever way it returns.
        let _relay = AbortOnDrop(tokio::spawn(worker_loop.clone().relay_notices()).abort_handle());
        let mut restart_pause = RESTART_PAUSE_MIN;
        loop {
            let stopped = tokio::select! {
                stopped = workers.join_next() => stopped,
                () = self.shared.stopping.abandoning() => {
                    self.shared.stopping.abandon(&mut workers).await;
                    break;
                }
            };
            let Some(stopped) = stopped else {
                break;
            };
            if self.is_closed() {
                continue;
            }
            match stopped {
                Err(failure) => tracing::error!(%failure, "a worker stopped; starting another"),
                Ok(()) => tracing::error!("a worker returned before shutdown; starting another"),
            }
            tokio::select! {
                () = self.shared.shutdown.notified() => continue,
                () = tokio::time::sleep(restart_pause) => {}
            }
            restart_pause = (restart_pause * 2).min(RESTART_PAUSE_MAX);
            if !self.is_closed() {
                worker_loop.spawn_worker(&mut workers);
            }
        }
        Ok(())
    }

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
        stop_by(self, tokio::time::sleep_until(deadline)).await
    }

    /// Runs the workers ([`run`](Runtime::run)) until the process gets SIGINT or SIGTERM
    /// (Ctrl-C where there are no Unix signals), then shuts down with the deadline of
    /// [`Workers::shutdown_deadline`](crate::Workers::shutdown_deadline) (30 s by default),
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
        let deadline = deadline_after(self.shared.workers.shutdown_deadline);
        tracing::info!(
            deadline = ?self.shared.workers.shutdown_deadline,
            "a signal asked the runtime to stop; the work in flight may finish until the deadline"
        );
        let abandon = async {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = signals.next() => {}
            }
        };
        let (ran, report) = tokio::join!(run, stop_by(self, abandon));
        ran.map(|()| report)
    }
}

/// The workers of one run of [`Runtime::run`]: each started and supervised, the relay of other
/// processes' notices, and each worker's loop.
#[derive(Clone)]
struct WorkerLoop {
    runtime: Runtime,
}

impl WorkerLoop {
    /// Starts a worker, inside this runtime's scope: code it runs (effect handlers) reaches
    /// this runtime through `Actor::reference(id)`.
    fn spawn_worker(&self, workers: &mut JoinSet<()>) {
        let worker = self.clone();
        workers.spawn(async move { worker.runtime.scope(worker.work()).await });
    }

    /// Wakes idle workers whenever the database says another process committed work.
    async fn relay_notices(self) {
        if !self.runtime.shared.listen {
            return;
        }
        let mut notices = None;
        while !self.runtime.is_closed() {
            let waited = match &mut notices {
                None => match self.runtime.engine().listen().await {
                    // Work committed before it listened (again) sent notices nobody heard:
                    // the workers look for it once.
                    Ok(Some(listening)) => {
                        notices = Some(listening);
                        Ok(())
                    }
                    // This database gives no notices: the workers poll.
                    Ok(None) => return,
                    Err(error) => Err(error),
                },
                Some(listening) => listening.next().await,
            };
            match waited {
                Ok(()) => self.runtime.engine().core().wake_here(),
                Err(_) if self.runtime.is_closed() => return,
                Err(error) => {
                    tracing::warn!(%error, "listening for work from other processes failed; \
                        idle workers poll until it listens again");
                    notices = None;
                    tokio::select! {
                        () = self.runtime.shared.shutdown.notified() => {}
                        () = tokio::time::sleep(NOTICE_RETRY) => {}
                    }
                }
            }
        }
    }

    /// One worker's loop.
    async fn work(&self) {
        let mut idle = IDLE_POLL_MIN;
        loop {
            // Made before the check and the pass, so a shutdown or a commit from here on
            // wakes this worker.
            let shutdown = self.runtime.shared.shutdown.notified();
            let woken = self.runtime.engine().core().woken();
            if self.runtime.is_closed() {
                return;
            }
            let worked = match self.work_once().await {
                Ok(worked) => worked,
                // A deadlock the database broke (InnoDB reports one rather than wait) is
                // the next pass's to retry.
                Err(error) if error.is_conflict() => {
                    tracing::warn!(%error, "a worker pass met a conflict; retrying");
                    false
                }
                Err(error) if error.is_connection_lost() => {
                    tracing::warn!(
                        %error,
                        "the database connection was lost; this worker pauses until the \
                         database accepts writes again"
                    );
                    self.wait_for_database().await;
                    false
                }
                Err(error) => {
                    tracing::error!(%error, "a worker pass failed; retrying");
                    false
                }
            };
            if worked {
                idle = IDLE_POLL_MIN;
                continue;
            }
            // Idle workers take turns to poll: the one holding the turn waits out its
            // interval, the others wait for the turn (or to be woken), so an idle runtime
            // looks at the database once per interval however many workers it runs.
            let polling = async {
                let _turn = self.runtime.shared.poll_turn.lock().await;
                tokio::time::sleep(idle).await;
            };
            tokio::select! {
                () = shutdown => {}
                () = woken => {}
                () = polling => {}
            }
            idle = (idle * 2).min(self.runtime.shared.workers.idle_poll);
        }
    }

    /// Waits until the database accepts writes again (a server restarting, a failover under
    /// way), or until shutdown; where the store cannot tell, it returns at once and the next
    /// pass finds out.
    async fn wait_for_database(&self) {
        loop {
            let shutdown = self.runtime.shared.shutdown.notified();
            if self.runtime.is_closed() {
                return;
            }
            let deadline = tokio::time::Instant::now() + DATABASE_WAIT;
            tokio::select! {
                () = shutdown => return,
                back = self.runtime.engine().reconnect(deadline) => {
                    if back.is_ok() {
                        return;
                    }
                }
            }
        }
    }

    /// One worker pass; true if it did anything. Once the runtime shuts down it starts
    /// nothing new: the turn in flight finishes, and no other.
    async fn work_once(&self) -> Result<bool> {
        self.runtime.engine().count_worker_pass();
        // Reminders that cannot fire (the database gone, say) hold back no mailbox: the
        // pass runs them anyway, and fails there if the database is gone.
        let fired = match self
            .runtime
            .engine()
            .reminders()
            .fire_due_reminders(ACTORS_PER_PASS)
            .await
        {
            Ok(fired) => fired.count,
            Err(error) => {
                tracing::error!(%error, "firing due reminders failed; the mailboxes run anyway");
                0
            }
        };
        let stopping = || self.runtime.is_closed();
        let turns = self
            .runtime
            .engine()
            .worker_pass()
            .run_ready(
                ACTORS_PER_PASS,
                TURNS_PER_ACTOR,
                TurnErrors::LogAndStall,
                &stopping,
            )
            .await?
            .turns;
        let effects =
            crate::client::effect::start_due(&self.runtime, &self.runtime.shared.effect_tasks)
                .await?;
        match self.upkeep_due() {
            Some(Periodic::Upkeep) => self.runtime.engine().upkeep().run().await?,
            Some(Periodic::Fold) => {
                // The charts read the minutes not folded from their rows: a fold that
                // failed (the database away for a moment) leaves them to the next one.
                if let Err(error) = self.runtime.engine().activity_fold().run().await {
                    tracing::warn!(%error, "folding the charts' tallies failed; the next fold catches up");
                }
            }
            None => {}
        }
        Ok(fired + turns + effects > 0)
    }

    /// Which periodic job this worker should do now, if any: the hourly upkeep, or else the
    /// fold of the minutes that ended (if so, no other worker does it for a while). The
    /// runtime's clock is read once, the last thing a pass does before the worker waits.
    fn upkeep_due(&self) -> Option<Periodic> {
        let now = self.runtime.engine().core().now();
        let shared = &self.runtime.shared;
        if take_if_due(&shared.last_upkeep, now, UPKEEP_EVERY) {
            Some(Periodic::Upkeep)
        } else if take_if_due(&shared.last_fold, now, FOLD_EVERY) {
            Some(Periodic::Fold)
        } else {
            None
        }
    }
}

/// A job the workers do now and then, by the runtime's clock.
enum Periodic {
    /// The hourly upkeep (which folds too).
    Upkeep,
    /// The fold of the charts' minutes that ended.
    Fold,
}

/// Whether a job last done at `last` is due at `now`, `every` being its period; if so, it is
/// marked done now, so no other worker does it for a while.
fn take_if_due(
    last: &Mutex<Option<DateTime<Utc>>>,
    now: DateTime<Utc>,
    every: chrono::TimeDelta,
) -> bool {
    let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
    let due = last.is_none_or(|last| now - last >= every);
    if due {
        *last = Some(now);
    }
    due
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
