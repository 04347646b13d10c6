//! The store side of effects: the kinds this runtime handles, one claim per effect with a
//! lease that starts when it runs, and outcomes that only the lease's holder can record.

use super::conflicts::rerun_conflicts;
use super::core::Core;
use super::effect_kinds::EffectKinds;
use super::micros;
use super::registry::Registry;
use crate::actor::effect::EffectFailure;
use crate::actor::failure::Failure;
use crate::actor::reply::StoredReply;
use crate::error::Result;
use crate::limits::{Limits, Payload};
use crate::store::{
    ActorKey, ClaimedEffect, EffectProgress, MessageProgress, NewMessage, PendingEffects,
    Transaction,
};
use crate::trace_context::TraceContext;

/// The longest error text an `EffectFailure` carries back to its actor, in bytes.
const MAX_FAILURE_TEXT: usize = 4096;

/// Where an attempt leaves an effect, the command it sends back to its actor, and the trace
/// context that reply continues.
struct Outcome<'a> {
    progress: EffectProgress<'a>,
    reply: Option<Reply>,
    trace: TraceContext,
}

/// A command an effect's outcome goes back to its actor as.
struct Reply {
    operation: String,
    arguments: String,
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The span an attempt at `effect` runs in (its handler, its lease's renewals and its
/// outcome): a child of the turn that emitted it, wherever that ran.
pub(crate) fn effect_span(effect: &ClaimedEffect) -> tracing::Span {
    let span = tracing::info_span!(
        "effect",
        effect = effect.name,
        effect_id = effect.effect_id,
        actor_type = effect.actor_type,
        actor_id = effect.actor_id,
        attempt = effect.attempts,
    );
    effect.trace.continue_in(&span);
    span
}

/// How long an effect may wait with no process that handles it before this one warns.
const UNHANDLED_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// The effects job: claims with a lease, renewals, outcomes and the replies they send, an
/// operator's retry, and the effects no handler here runs. It borrows the core, the effect
/// kinds this runtime handles, and the registry the replies' commands are checked against.
#[derive(Clone, Copy)]
pub(crate) struct Effects<'e> {
    core: &'e Core,
    kinds: &'e EffectKinds,
    registry: &'e Registry,
}

impl<'e> Effects<'e> {
    /// The effects job over the engine's parts.
    pub(super) fn new(core: &'e Core, kinds: &'e EffectKinds, registry: &'e Registry) -> Self {
        Self {
            core,
            kinds,
            registry,
        }
    }
}

impl Effects<'_> {
    /// The replies of effects, checked against this engine's limits and actor types.
    fn replies(&self) -> Replies<'_> {
        Replies {
            limits: &self.core.config().limits,
            registry: self.registry,
        }
    }

    /// Claims one due effect named `name`, leased from now (by the lease clock: the database
    /// server's on PostgreSQL and MySQL) for the runtime's effect lease.
    ///
    /// A claim that finds no attempt left (the effect's runner died on its last attempt and
    /// its lease ran out: a reclaimed lease is an attempt) makes the effect dead and sends
    /// its failure reply instead, and looks for the next.
    pub(crate) async fn claim_effect(&self, name: &str) -> Result<Option<ClaimedEffect>> {
        rerun_conflicts(|| self.claim_effect_once(name)).await
    }

    /// One try of [`claim_effect`](Self::claim_effect): a claim that conflicts with another
    /// runner's (a Galera cluster's certification lets one of two nodes' claims of an
    /// effect commit) committed nothing and returns the conflict.
    async fn claim_effect_once(&self, name: &str) -> Result<Option<ClaimedEffect>> {
        let max_attempts = self.kinds.retry(name).max_attempts;
        loop {
            let mut tx = self.core.begin(None).await?;
            let now = micros(self.core.now());
            let Some(effect) = tx
                .claim_effect(name, now, self.core.config().effect_lease)
                .await?
            else {
                tx.commit().await?;
                return Ok(None);
            };
            #[cfg(feature = "simulation")]
            let effect = reclaimed_lease_uncounted(effect);
            if effect.attempts <= max_attempts {
                tx.commit().await?;
                let age = crate::metrics::micros_between(effect.created_at, now);
                crate::metrics::effect_outbox_age(&effect.actor_type, &effect.name, age);
                return Ok(Some(effect));
            }
            // The claim took over a runner's lease that ran out (its error says so), or the
            // retry policy was lowered below the attempts it had made (its error is its own).
            let attempts = effect.attempts - 1;
            let last = effect
                .last_error
                .as_deref()
                .unwrap_or("it has no error recorded");
            let error = format!("no attempt left after {attempts} of {max_attempts}: {last}");
            tracing::warn!(
                effect = name,
                id = effect.effect_id,
                "an effect is dead: {error}"
            );
            let dead = Outcome {
                progress: EffectProgress {
                    status: "dead",
                    attempts,
                    available_at: now,
                    last_error: Some(&error),
                    finished_at: Some(now),
                },
                reply: self.replies().failure_reply(&effect, &error, attempts),
                // No attempt ran: the reply continues the turn that emitted the effect.
                trace: effect.trace,
            };
            self.record_effect(tx, &effect, dead).await?;
        }
    }

    /// Extends the lease of an effect this runner is running; false if it is not its any
    /// more (its lease ran out and another runner claimed it, or an operator changed it).
    pub(crate) async fn renew_effect(&self, effect: &ClaimedEffect) -> Result<bool> {
        let mut tx = self.core.begin(None).await?;
        let now = micros(self.core.now());
        let renewed = tx
            .renew_effect(
                effect.id,
                effect.claims,
                now,
                self.core.config().effect_lease,
            )
            .await?;
        tx.commit().await?;
        Ok(renewed)
    }

    /// Gives back the lease of an effect this runner stops running before it finishes (a
    /// shutdown abandons it): it is ready again at once with this attempt not counted, as
    /// an abandoned turn counts none; false if it was not this runner's any more.
    pub(crate) async fn release_effect(&self, effect: &ClaimedEffect) -> Result<bool> {
        let mut tx = self.core.begin(None).await?;
        let now = micros(self.core.now());
        let released = tx.release_effect(effect.id, effect.claims, now).await?;
        tx.commit().await?;
        Ok(released)
    }

    /// Records how an attempt at an effect went: done, retried with backoff, or dead; a
    /// final outcome the effect names a reply for enqueues that command to its actor in the
    /// same transaction, continuing the attempt's `trace` (its span's context). A runner
    /// whose lease ran out (another runner claimed the effect since) records nothing.
    pub(crate) async fn finish_effect(
        &self,
        effect: &ClaimedEffect,
        outcome: std::result::Result<String, Failure>,
        trace: TraceContext,
    ) -> Result<bool> {
        let now = self.core.now();
        let (outcome, success_reply) = match outcome {
            Ok(output) => match self.replies().success_reply(effect, &output) {
                Ok(reply) => (Ok(()), reply),
                Err(failure) => (Err(failure), None),
            },
            Err(failure) => (Err(failure), None),
        };
        let error = outcome.as_ref().err().map(ToString::to_string);
        let retry = self.kinds.retry(&effect.name);
        let retry_at = match &outcome {
            Err(failure) if failure.is_retryable() => {
                retry.next_attempt_at(now, effect.attempts, retry.max_attempts)
            }
            _ => None,
        };
        let progress = match (&outcome, retry_at) {
            (Ok(()), _) => EffectProgress {
                status: "done",
                attempts: effect.attempts,
                available_at: micros(now),
                last_error: None,
                finished_at: Some(micros(now)),
            },
            (Err(_), Some(at)) => EffectProgress {
                status: "ready",
                attempts: effect.attempts,
                available_at: micros(at),
                last_error: error.as_deref(),
                finished_at: None,
            },
            (Err(_), None) => EffectProgress {
                status: "dead",
                attempts: effect.attempts,
                available_at: micros(now),
                last_error: error.as_deref(),
                finished_at: Some(micros(now)),
            },
        };
        let reply = match progress.status {
            "done" => success_reply,
            "dead" => self.replies().failure_reply(
                effect,
                error.as_deref().unwrap_or_default(),
                effect.attempts,
            ),
            _ => None,
        };
        let tx = self.core.begin(None).await?;
        let outcome = Outcome {
            progress,
            reply,
            trace,
        };
        let recorded = self.record_effect(tx, effect, outcome).await?;
        if !recorded {
            tracing::warn!(
                effect_id = effect.effect_id,
                "an effect's lease ran out before its handler finished; another runner owns it \
                 now and this outcome is discarded"
            );
        }
        Ok(recorded)
    }

    /// Writes an attempt's outcome in `tx` and commits it, if the effect still runs under
    /// its claim, with the reply the outcome sends; returns whether it did.
    async fn record_effect(
        &self,
        mut tx: Box<dyn Transaction>,
        effect: &ClaimedEffect,
        outcome: Outcome<'_>,
    ) -> Result<bool> {
        let Outcome {
            progress,
            reply,
            trace,
        } = outcome;
        let recorded = tx
            .finish_effect(effect.id, effect.claims, &progress)
            .await?;
        if let (true, Some(reply)) = (recorded, &reply) {
            let actor = ActorKey {
                actor_type: &effect.actor_type,
                actor_id: &effect.actor_id,
            };
            let request_id = crate::ids::new_request_id();
            let message = NewMessage {
                operation: &reply.operation,
                arguments: &reply.arguments,
                request_id: &request_id,
                idempotency_key: None,
                created_at: progress.available_at,
                progress: MessageProgress::ready(0, 0),
                incarnation: Some(effect.incarnation),
                scheduled_for: None,
                trace,
            };
            tx.insert_message(actor, &message).await?;
        }
        tx.commit().await?;
        if let (true, Some(reply)) = (recorded, &reply) {
            self.core.wake();
            crate::metrics::enqueued(&effect.actor_type, &reply.operation, 1);
        }
        Ok(recorded)
    }

    /// Makes a dead effect ready again with its attempts reset; false if it is not dead
    /// (a retry through another node that certified first revived it: the rerun finds it
    /// ready).
    pub(crate) async fn retry_effect(&self, id: i64) -> Result<bool> {
        let revived = rerun_conflicts(|| async {
            let mut tx = self.core.begin(None).await?;
            let revived = tx.revive_effect(id, micros(self.core.now())).await?;
            tx.commit().await?;
            Ok(revived)
        })
        .await?;
        if revived {
            self.core.wake();
        }
        Ok(revived)
    }

    /// Effects waiting to run, of kinds this runtime has no handler for (one that a handler
    /// elsewhere runs under a live lease is not waiting).
    pub(crate) async fn unhandled_effects(&self) -> Result<Vec<PendingEffects>> {
        let now = micros(self.core.now());
        self.core
            .store()
            .unhandled_effects(&self.kinds.handled(), now)
            .await
    }

    /// Warns once per kind about effects that waited a while with no handler here; if no
    /// process has one, they are never run.
    pub(crate) async fn report_unhandled_effects(&self) -> Result<()> {
        let stale_before = micros(self.core.now() - UNHANDLED_AFTER);
        for pending in self.unhandled_effects().await? {
            if pending.oldest_created_at < stale_before
                && self.kinds.first_report_of_unhandled(&pending.name)
            {
                tracing::warn!(
                    effect = pending.name,
                    count = pending.count,
                    "effects wait with no handler in this process; register one with \
                     Builder::effect in a process that runs workers, or they are never run"
                );
            }
        }
        Ok(())
    }
}

/// The replies an effect's outcome sends back to its actor, built and checked against the
/// limits and the actor's commands.
struct Replies<'e> {
    limits: &'e Limits,
    registry: &'e Registry,
}

impl Replies<'_> {
    /// The command a succeeded effect's output goes to, if it names one. An output its
    /// command cannot take (too large, or a reply that does not read) fails the effect for
    /// good: doing the work again would not mend it.
    fn success_reply(
        &self,
        effect: &ClaimedEffect,
        output: &str,
    ) -> std::result::Result<Option<Reply>, Failure> {
        let Some(stored) = &effect.on_success else {
            return Ok(None);
        };
        let built = serde_json::from_str(output)
            .map_err(|error| error.to_string())
            .and_then(|output| self.build_reply(effect, stored, "on_success", output));
        built.map(Some).map_err(|why| {
            Failure::permanent(format!(
                "the {} effect succeeded, but its output cannot go back to {} {:?}: {why}",
                effect.name, effect.actor_type, effect.actor_id
            ))
        })
    }

    /// The command a dead effect's failure goes to, if it names one that can be built (an
    /// unreadable reply is logged: the dead effect is there for operators either way).
    fn failure_reply(&self, effect: &ClaimedEffect, error: &str, attempts: i64) -> Option<Reply> {
        let stored = effect.on_failure.as_deref()?;
        let limit = self.limits.max_arguments_bytes;
        let failure = |text: &str| {
            serde_json::from_str(&effect.payload)
                .and_then(|payload: serde_json::Value| {
                    serde_json::to_value(EffectFailure {
                        effect_id: effect.effect_id.clone(),
                        name: effect.name.clone(),
                        error: text.to_owned(),
                        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                        effect: payload,
                    })
                })
                .map_err(|error| error.to_string())
        };
        let built = serde_json::from_str::<StoredReply>(stored)
            .map_err(|error| format!("its stored on_failure reply does not read: {error}"))
            .and_then(|reply| {
                // The effect fit the arguments limit with room for the failure's envelope
                // when it was emitted; the error's text is cut to whatever room is left, so
                // the failure always goes back.
                let mut text = truncated(error, MAX_FAILURE_TEXT);
                loop {
                    let arguments = reply
                        .arguments(failure(text)?)
                        .map_err(|error| error.to_string())?;
                    let over = arguments.len().saturating_sub(limit);
                    if over == 0 || text.is_empty() {
                        self.check_reply(effect, &reply.operation, &arguments)?;
                        break Ok(Reply {
                            operation: reply.operation,
                            arguments,
                        });
                    }
                    text = truncated(text, text.len().saturating_sub(over));
                }
            });
        match built {
            Ok(reply) => Some(reply),
            Err(why) => {
                tracing::error!(
                    effect_id = effect.effect_id,
                    why,
                    "a dead effect's failure cannot go back to its actor"
                );
                None
            }
        }
    }

    /// The command `value` goes to as the one argument of the reply stored as `stored`
    /// (the effect's `on_success` or `on_failure`), checked as [`check_reply`] checks it.
    ///
    /// [`check_reply`]: Replies::check_reply
    fn build_reply(
        &self,
        effect: &ClaimedEffect,
        stored: &str,
        outcome: &str,
        value: serde_json::Value,
    ) -> std::result::Result<Reply, String> {
        let reply = serde_json::from_str::<StoredReply>(stored)
            .map_err(|error| format!("its stored {outcome} reply does not read: {error}"))?;
        let arguments = reply.arguments(value).map_err(|error| error.to_string())?;
        self.check_reply(effect, &reply.operation, &arguments)?;
        Ok(Reply {
            operation: reply.operation,
            arguments,
        })
    }

    /// Whether a reply can be stored: within the arguments limit, and read back as the
    /// command it names (checked against the actor's commands when its type is known here,
    /// as JSON otherwise): a reply committed unreadable would wait or die unseen.
    fn check_reply(
        &self,
        effect: &ClaimedEffect,
        operation: &str,
        arguments: &str,
    ) -> std::result::Result<(), String> {
        self.limits
            .check(Payload::Arguments, operation, arguments.len())
            .map_err(|error| error.to_string())?;
        match self.registry.runner(&effect.actor_type) {
            Some(runner) => runner.check_command(operation, arguments),
            None => crate::codec::check_readable(operation, arguments),
        }
        .map_err(|error| error.to_string())
    }
}

/// The claimed `effect`, with the attempt it took over from a runner whose lease ran out
/// uncounted if a simulation put [`Defect::ReclaimedLeaseUncounted`] back.
///
/// [`Defect::ReclaimedLeaseUncounted`]: crate::simulation::Defect::ReclaimedLeaseUncounted
#[cfg(feature = "simulation")]
fn reclaimed_lease_uncounted(mut effect: ClaimedEffect) -> ClaimedEffect {
    use crate::simulation::{reintroduced, Defect};
    let took_over = effect.last_error.as_deref() == Some(crate::store::effects::RUNNER_STOPPED);
    if took_over && reintroduced(Defect::ReclaimedLeaseUncounted) {
        effect.attempts -= 1;
    }
    effect
}
