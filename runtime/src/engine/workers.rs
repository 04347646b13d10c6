//! Workers: a pass over the actors with due messages, each run by one worker of this process
//! at a time, with the actors whose turns fail with errors left alone for a while.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::one_turn::Turns;
use super::registry::Registry;
use super::{insert_bounded, micros, Lock, Outcome, Step, TurnReport, MAP_CAPACITY};
use crate::error::Result;
use crate::store::ErrorKinds;

/// What one [`WorkerPass::run_ready`] ran: how many turns, and how those that did not complete
/// ended.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    /// Turns that ran (failed attempts counted), whatever their outcome.
    pub(crate) turns: usize,
    /// The turns that did not complete (rejected, failed, dead, or destroyed), by actor.
    pub(crate) uncompleted: Vec<(String, String, TurnReport)>,
}

impl Pass {
    /// Adds another actor's pass to this one.
    fn add(&mut self, other: Pass) {
        self.turns += other.turns;
        self.uncompleted.extend(other.uncompleted);
    }
}

/// What [`WorkerPass::run_ready`] does with a turn that fails with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnErrors {
    /// Return it to the caller (the testing API).
    Return,
    /// Log it and leave the actor alone for a while (workers).
    LogAndStall,
}

/// How long workers leave an actor alone after one of its turns failed with an error that
/// is not an attempt (an operation this build does not know, the database gone).
pub(super) const STALL: Duration = Duration::from_secs(30);

/// What the workers of this process share: the actors they run now, the actors they leave
/// alone for a while, and what they reported or sampled already.
#[derive(Default)]
pub(crate) struct Workers {
    /// Actors a worker of this process is running now, so two workers do not take the same one.
    claims: Mutex<HashSet<(String, String)>>,
    /// Actors whose last turn failed with an error, and until when workers skip them.
    stalled: Mutex<HashMap<(String, String), Instant>>,
    /// Stored type names already reported as unknown, so the log says it once.
    unknown_types: Mutex<HashSet<String>>,
    /// When a worker last sampled the mailbox depth for the metrics.
    depth_sampled: Mutex<Option<Instant>>,
}

/// The workers' job: a pass over the actors with due messages, each actor's turns run
/// through the turns job by one worker of this process at a time. It borrows the turns job,
/// the registry of the actor types it runs, and what the workers share.
#[derive(Clone, Copy)]
pub(crate) struct WorkerPass<'e> {
    turns: Turns<'e>,
    registry: &'e Registry,
    workers: &'e Workers,
}

impl<'e> WorkerPass<'e> {
    /// The workers' job over the turns job and the workers' shared state.
    pub(super) fn new(turns: Turns<'e>, registry: &'e Registry, workers: &'e Workers) -> Self {
        Self {
            turns,
            registry,
            workers,
        }
    }
}

impl WorkerPass<'_> {
    /// Runs up to `turns_per_actor` turns for each of up to `actors` actors whose head
    /// message is due and of an operation this runtime knows, and that no worker of this
    /// process runs or has stalled; returns how many turns ran and how those that did not
    /// complete ended. A turn that fails with an error (not
    /// a failed attempt, which is counted) is returned, or, for workers, logged and its
    /// actor stalled. It starts no turn once `stopping` says so (a runtime shutting down).
    pub(crate) async fn run_ready(
        &self,
        actors: i64,
        turns_per_actor: usize,
        errors: TurnErrors,
        stopping: &(dyn Fn() -> bool + Sync),
    ) -> Result<Pass> {
        self.sample_mailbox_depth().await?;
        let stalled = i64::try_from(self.workers.stalled_count()).unwrap_or(i64::MAX);
        let core = self.turns.core();
        let ready = core
            .store()
            .ready_actors(
                micros(core.now()),
                &self.registry.known_operations(),
                actors.saturating_add(stalled),
            )
            .await?;
        // Each actor's turns run in order; different actors' turns run side by side (as
        // many as the store takes at once), so on SQLite they share group commits.
        let passes = ready.into_iter().map(|(actor_type, actor_id)| {
            self.run_actor(actor_type, actor_id, turns_per_actor, errors, stopping)
        });
        let mut passes =
            futures_util::stream::iter(passes).buffer_unordered(core.store().concurrent_turns());
        let mut all = Pass::default();
        while let Some(ran) = passes.next().await {
            all.add(ran?);
        }
        Ok(all)
    }

    /// Runs up to `turns_per_actor` turns of one ready actor, unless its type is unknown
    /// here, it is stalled, or another worker of this process runs it.
    async fn run_actor(
        &self,
        actor_type: String,
        actor_id: String,
        turns_per_actor: usize,
        errors: TurnErrors,
        stopping: &(dyn Fn() -> bool + Sync),
    ) -> Result<Pass> {
        let mut pass = Pass::default();
        let Some(runner) = self.registry.runner(&actor_type) else {
            self.workers.report_unknown_type(&actor_type, &actor_id);
            return Ok(pass);
        };
        if self.workers.is_stalled(&actor_type, &actor_id) {
            return Ok(pass);
        }
        let Some(_claim) = self.workers.claim(&actor_type, &actor_id) else {
            return Ok(pass);
        };
        for _ in 0..turns_per_actor {
            if stopping() {
                break;
            }
            match runner.run_next(self.turns, &actor_id, Lock::Skip).await {
                Ok(Step::Ran(report)) => {
                    pass.turns += 1;
                    if !matches!(report.outcome, Outcome::Completed(_)) {
                        let ended = (actor_type.clone(), actor_id.clone(), report);
                        pass.uncompleted.push(ended);
                    }
                }
                Ok(Step::Idle | Step::Blocked { .. } | Step::Busy) => break,
                Err(error) if errors == TurnErrors::Return => return Err(error),
                // The database, not the actor, failed: the worker pauses until it is back.
                Err(error) if error.is_connection_lost() => return Err(error),
                Err(error) => {
                    tracing::error!(
                        actor_type,
                        actor_id,
                        %error,
                        "a turn failed; this worker leaves the actor alone for {STALL:?}"
                    );
                    self.workers.stall(&actor_type, &actor_id);
                    break;
                }
            }
        }
        Ok(pass)
    }

    /// Records each registered actor type's unfinished messages in the metrics, if no pass
    /// did in the last [`DEPTH_SAMPLE_EVERY`](crate::metrics::DEPTH_SAMPLE_EVERY).
    async fn sample_mailbox_depth(&self) -> Result<()> {
        if !self.workers.depth_sample_due() {
            return Ok(());
        }
        let store = self.turns.core().store();
        let depths: HashMap<String, i64> = store.mailbox_depths().await?.into_iter().collect();
        let types = self.registry.type_names();
        for actor_type in types {
            let depth = depths.get(actor_type).copied().unwrap_or(0);
            crate::metrics::mailbox_depth(actor_type, depth);
        }
        Ok(())
    }
}

impl Workers {
    /// Whether the mailbox depth is due for a sample (none in the last
    /// [`DEPTH_SAMPLE_EVERY`](crate::metrics::DEPTH_SAMPLE_EVERY)); if so, it counts as
    /// taken now.
    fn depth_sample_due(&self) -> bool {
        // A simulated run samples nothing: when a sample falls due depends on how long
        // SQLite's threads took, which a run replayed from its seed must not.
        #[cfg(feature = "simulation")]
        if crate::simulation::active() {
            return false;
        }
        let mut sampled = self
            .depth_sampled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if sampled.is_some_and(|at| now < at + crate::metrics::DEPTH_SAMPLE_EVERY) {
            return false;
        }
        *sampled = Some(now);
        true
    }

    /// Takes this process's hold on an actor, unless another worker has it.
    fn claim(&self, actor_type: &str, actor_id: &str) -> Option<Claim<'_>> {
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        let taken = self
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(actor.clone());
        taken.then(|| Claim {
            workers: self,
            actor,
        })
    }

    /// How many actors are stalled (or were, until the next look at them).
    fn stalled_count(&self) -> usize {
        self.stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a turn of this actor failed with an error recently (a stored operation this
    /// build does not know, say): it is skipped until the stall passes, so the log is not
    /// flooded and other actors get the workers.
    fn is_stalled(&self, actor_type: &str, actor_id: &str) -> bool {
        let mut stalled = self.stalled.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (actor_type.to_owned(), actor_id.to_owned());
        match stalled.get(&key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                stalled.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Leaves an actor alone for a while; when the map is full, the stalls that ran out make
    /// room, and past that an actor is simply not stalled.
    fn stall(&self, actor_type: &str, actor_id: &str) {
        let mut stalled = self.stalled.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if stalled.len() >= MAP_CAPACITY {
            stalled.retain(|_, until| *until > now);
        }
        if stalled.len() < MAP_CAPACITY {
            stalled.insert((actor_type.to_owned(), actor_id.to_owned()), now + STALL);
        }
    }

    /// Warns, once per type, about messages of an actor type this runtime does not know.
    fn report_unknown_type(&self, actor_type: &str, actor_id: &str) {
        if insert_bounded(&self.unknown_types, actor_type.to_owned()) {
            tracing::warn!(
                actor_type,
                actor_id,
                "messages wait for an actor type this runtime does not know; they stay queued \
                 until a runtime that registers it (Builder::actor::<T>()) runs them"
            );
        }
    }
}

/// A worker's hold on one actor, released when dropped.
struct Claim<'w> {
    workers: &'w Workers,
    actor: (String, String),
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.workers
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.actor);
    }
}
