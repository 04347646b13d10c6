//! The store side of effects: handlers by name, claims with a lease, outcomes.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{micros, Engine};
use crate::effect::EffectRunner;
use crate::error::{Error, Result};
use crate::failure::Failure;
use crate::store::{ClaimedEffect, EffectProgress};

/// How long a claimed effect is a worker's; after that another worker may run it again.
const LEASE: Duration = Duration::from_secs(300);

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

    /// Claims up to `limit` due effects named `name` for one lease.
    pub(crate) async fn claim_effects(&self, name: &str, limit: i64) -> Result<Vec<ClaimedEffect>> {
        let now = self.now();
        let mut tx = self.store.begin().await?;
        let claimed = tx
            .claim_effects(name, micros(now), micros(now + LEASE), limit)
            .await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// Records how an attempt at an effect went: done, retried with backoff, or dead.
    pub(crate) async fn finish_effect(
        &self,
        effect: &ClaimedEffect,
        outcome: std::result::Result<(), Failure>,
    ) -> Result<()> {
        let now = self.now();
        let error = outcome.as_ref().err().map(ToString::to_string);
        let retry_at = match &outcome {
            Err(failure) if failure.is_retryable() => {
                self.retry
                    .next_attempt_at(now, effect.attempts, self.retry.max_attempts)
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
        let mut tx = self.store.begin().await?;
        tx.finish_effect(effect.id, &progress).await?;
        tx.commit().await
    }
}

impl Engine {
    /// Makes a dead effect ready again with its attempts reset; false if it is not dead.
    pub(crate) async fn retry_effect(&self, id: i64) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        let revived = tx.revive_effect(id, micros(self.now())).await?;
        tx.commit().await?;
        if revived {
            self.wake();
        }
        Ok(revived)
    }
}
