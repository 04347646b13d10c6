//! The worker loop: [`Runtime::run`], its supervised workers, the relay of other
//! processes' work notices, and the hourly upkeep.
//!
//! Workers only call the engine; what they run is decided there.

use std::sync::PoisonError;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::client::shared::Runtime;
use crate::engine::TurnErrors;
use crate::error::Result;

/// How many actors a worker pass takes, and how many turns one actor gets per pass.
const ACTORS_PER_PASS: i64 = 100;
const TURNS_PER_ACTOR: usize = 50;
/// How long the supervisor waits before it starts a worker that stopped, at first and at
/// most (doubling while workers keep stopping).
const RESTART_PAUSE_MIN: Duration = Duration::from_millis(100);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(5);
/// The idle poll interval of a worker starts here and doubles up to the maximum (1 s by
/// default, `Builder::idle_poll`).
pub(super) const IDLE_POLL_MIN: Duration = Duration::from_millis(100);
/// How long the relay of PostgreSQL's work notices waits after an error before it listens
/// again.
const NOTICE_RETRY: Duration = Duration::from_secs(1);
/// How long a paused worker waits for the database at a time before it looks at the
/// runtime's shutdown again.
const DATABASE_WAIT: Duration = Duration::from_secs(1);
/// How often (by the runtime's clock) the workers do the upkeep: prune, report.
const UPKEEP_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);

impl Runtime {
    /// Runs the workers until [`shutdown`](Runtime::shutdown): they fire due reminders as
    /// ordinary mailbox messages, run the ready messages of the actor types this runtime
    /// knows (a busy actor yields after 50 turns so others are not starved), run due effects
    /// with their handlers, and prune old rows hourly. A commit in this process wakes an
    /// idle worker at once, and on PostgreSQL so does a commit in any other process (the
    /// workers `LISTEN` on a connection of their own); otherwise idle workers poll every
    /// 100 ms, backing off to [`Builder::idle_poll`](crate::Builder::idle_poll) (1 s), taking turns: one idle worker
    /// polls at a time.
    ///
    /// The workers are supervised: one that stops for any reason but shutdown (a panic in
    /// a custom [`Clock`](crate::Clock), say) is logged and started again. Returns `Ok(())` only after
    /// [`shutdown`](Runtime::shutdown), once every worker finished what it was doing, or
    /// once [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) abandoned them.
    pub async fn run(&self) -> Result<()> {
        let _running = self.shared.stopping.enter();
        let mut workers = JoinSet::new();
        for _ in 0..self.shared.workers {
            self.spawn_worker(&mut workers);
        }
        // Ends with this call (the guard aborts it), whatever way it returns.
        let _relay = AbortOnDrop(tokio::spawn(self.clone().relay_notices()).abort_handle());
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
                self.spawn_worker(&mut workers);
            }
        }
        Ok(())
    }

    /// Starts a worker, inside this runtime's scope: code it runs (effect handlers) reaches
    /// this runtime through `Actor::reference(id)`.
    fn spawn_worker(&self, workers: &mut JoinSet<()>) {
        let runtime = self.clone();
        workers.spawn(async move { runtime.scope(runtime.work()).await });
    }

    /// Wakes idle workers whenever the database says another process committed work.
    async fn relay_notices(self) {
        if !self.shared.listen {
            return;
        }
        let mut notices = None;
        while !self.is_closed() {
            let waited = match &mut notices {
                None => match self.engine().store().listen().await {
                    Ok(Some(listening)) => {
                        notices = Some(listening);
                        continue;
                    }
                    // This database gives no notices: the workers poll.
                    Ok(None) => return,
                    Err(error) => Err(error),
                },
                Some(listening) => listening.next().await,
            };
            match waited {
                Ok(()) => self.engine().wake_here(),
                Err(_) if self.is_closed() => return,
                Err(error) => {
                    tracing::warn!(%error, "listening for work from other processes failed; \
                        idle workers poll until it listens again");
                    notices = None;
                    tokio::select! {
                        () = self.shared.shutdown.notified() => {}
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
            let shutdown = self.shared.shutdown.notified();
            let woken = self.engine().woken();
            if self.is_closed() {
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
                let _turn = self.shared.poll_turn.lock().await;
                tokio::time::sleep(idle).await;
            };
            tokio::select! {
                () = shutdown => {}
                () = woken => {}
                () = polling => {}
            }
            idle = (idle * 2).min(self.shared.idle_poll);
        }
    }

    /// Waits until the database accepts writes again (a server restarting, a failover under
    /// way), or until shutdown; where the store cannot tell, it returns at once and the next
    /// pass finds out.
    async fn wait_for_database(&self) {
        loop {
            let shutdown = self.shared.shutdown.notified();
            if self.is_closed() {
                return;
            }
            let deadline = tokio::time::Instant::now() + DATABASE_WAIT;
            tokio::select! {
                () = shutdown => return,
                back = self.engine().store().reconnect(deadline) => {
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
        self.engine().store().counters().worker_pass();
        // Reminders that cannot fire (the database gone, say) hold back no mailbox: the
        // pass runs them anyway, and fails there if the database is gone.
        let fired = match self.engine().fire_due_reminders(ACTORS_PER_PASS).await {
            Ok(fired) => fired.count,
            Err(error) => {
                tracing::error!(%error, "firing due reminders failed; the mailboxes run anyway");
                0
            }
        };
        let stopping = || self.is_closed();
        let turns = self
            .engine()
            .run_ready(
                ACTORS_PER_PASS,
                TURNS_PER_ACTOR,
                TurnErrors::LogAndStall,
                &stopping,
            )
            .await?
            .turns;
        let effects = crate::client::effect::start_due(self, &self.shared.effect_tasks).await?;
        if self.upkeep_due() {
            self.engine().upkeep().await?;
        }
        Ok(fired + turns + effects > 0)
    }

    /// Whether this worker should do the hourly upkeep now (and if so, no other will for a
    /// while).
    fn upkeep_due(&self) -> bool {
        let now = self.engine().now();
        let mut last = self
            .shared
            .last_upkeep
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = last.is_none_or(|last| now - last >= UPKEEP_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
