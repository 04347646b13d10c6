//! The store side of effects: handlers by name, one claim per effect with a lease that
//! starts when it runs, and outcomes that only the lease's holder can record.

use std::sync::{Arc, PoisonError};

use super::{insert_bounded, micros, Engine};
use crate::effect::EffectRunner;
use crate::error::{Error, Result};
use crate::failure::Failure;
use crate::store::{ClaimedEffect, EffectProgress, PendingEffects};

/// How long an effect may wait with no process that handles it before this one warns.
const UNHANDLED_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

impl Engine {
    /// Makes a handler run the effects named `name`.
    pub(crate) fn register_effect(
        &self,
        name: &'static str,
        runner: Arc<dyn EffectRunner>,
    ) -> Result<()> {
        let mut effects = self.effects.write().unwrap_or_else(PoisonError::into_inner);
        if effects.insert(name, runner).is_some() {
            return Err(Error::Config(format!(
                "two handlers for the effect {name:?}; register one"
            )));
        }
        Ok(())
    }

    /// The handlers, with their effect names.
    pub(crate) fn effect_runners(&self) -> Vec<(&'static str, Arc<dyn EffectRunner>)> {
        self.effects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, runner)| (*name, Arc::clone(runner)))
            .collect()
    }

    /// How long a claimed effect belongs to its runner.
    pub(crate) fn effect_lease(&self) -> std::time::Duration {
        self.config.effect_lease
    }

    /// Claims one due effect named `name`, leased from now (by the lease clock: the database
    /// server's on PostgreSQL) for the runtime's effect lease.
    pub(crate) async fn claim_effect(&self, name: &str) -> Result<Option<ClaimedEffect>> {
        let mut tx = self.begin(None).await?;
        let claimed = tx
            .claim_effect(name, micros(self.now()), self.config.effect_lease)
            .await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// Records how an attempt at an effect went: done, retried with backoff, or dead. A
    /// runner whose lease ran out (another runner claimed the effect since) records nothing.
    pub(crate) async fn finish_effect(
        &self,
        effect: &ClaimedEffect,
        outcome: std::result::Result<(), Failure>,
    ) -> Result<bool> {
        let now = self.now();
        let error = outcome.as_ref().err().map(ToString::to_string);
        let retry = &self.config.retry;
        let retry_at = match &outcome {
            Err(failure) if failure.is_retryable() => {
                retry.next_attempt_at(now, effect.attempts, retry.max_attempts)
            }
            _ => None,
        };
        let progress = match (&outcome, retry_at) {
            (Ok(()), _) => EffectProgress {
                status: "done",
                available_at: micros(now),
                last_error: None,
                finished_at: Some(micros(now)),
            },
            (Err(_), Some(at)) => EffectProgress {
                status: "ready",
                available_at: micros(at),
                last_error: error.as_deref(),
                finished_at: None,
            },
            (Err(_), None) => EffectProgress {
                status: "dead",
                available_at: micros(now),
                last_error: error.as_deref(),
                finished_at: Some(micros(now)),
            },
        };
        let mut tx = self.begin(None).await?;
        let recorded = tx
            .finish_effect(effect.id, effect.claims, &progress)
            .await?;
        tx.commit().await?;
        if !recorded {
            tracing::warn!(
                effect_id = effect.effect_id,
                "an effect's lease ran out before its handler finished; another runner owns it \
                 now and this outcome is discarded"
            );
        }
        Ok(recorded)
    }

    /// Makes a dead effect ready again with its attempts reset; false if it is not dead.
    pub(crate) async fn retry_effect(&self, id: i64) -> Result<bool> {
        let mut tx = self.begin(None).await?;
        let revived = tx.revive_effect(id, micros(self.now())).await?;
        tx.commit().await?;
        if revived {
            self.wake();
        }
        Ok(revived)
    }

    /// Unfinished effects of kinds this runtime has no handler for.
    pub(crate) async fn unhandled_effects(&self) -> Result<Vec<PendingEffects>> {
        let handled: Vec<&str> = self
            .effects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        let handled = serde_json::Value::from(handled).to_string();
        self.store.unhandled_effects(&handled).await
    }

    /// Warns once per kind about effects that waited a while with no handler here; if no
    /// process has one, they are never run.
    pub(crate) async fn report_unhandled_effects(&self) -> Result<()> {
        let stale_before = micros(self.now() - UNHANDLED_AFTER);
        for pending in self.unhandled_effects().await? {
            if pending.oldest_created_at < stale_before
                && insert_bounded(&self.reported_unhandled, pending.name.clone())
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
