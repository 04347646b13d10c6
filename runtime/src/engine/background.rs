//! The work of workers and operators: reminders, ready mailboxes, retention, dead letters.

use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

use super::{append, micros, Engine, EnqueueOptions, Enqueued, Step};
use crate::error::{Error, Result};
use crate::store::{ActorKey, MessageLookup, MessageRecord, StoredStatus};

/// What [`Engine::run_ready`] does with a turn that fails with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnErrors {
    /// Return it to the caller (the testing API).
    Return,
    /// Log it and leave the actor alone for a while (workers).
    LogAndStall,
}

/// How long workers leave an actor alone after one of its turns failed with an error.
const STALL: Duration = Duration::from_secs(30);

/// Each actor's newest finished messages with an idempotency key that retention keeps.
pub(crate) const KEPT_IDEMPOTENCY_KEYS: i64 = 64;

impl Engine {
    /// Turns every reminder due at the clock's now into a message at the tail of its actor's
    /// mailbox; returns how many fired. Reminders are not held back by the mailbox limit.
    pub(crate) async fn fire_due_reminders(&self, limit: i64) -> Result<usize> {
        let mut tx = self.store.begin().await?;
        let now = micros(self.now());
        let due = tx.take_due_reminders(now, limit).await?;
        for reminder in &due {
            let key = ActorKey {
                actor_type: &reminder.actor_type,
                actor_id: &reminder.actor_id,
            };
            append(&mut *tx, key, &reminder.name, &reminder.arguments, now).await?;
        }
        tx.commit().await?;
        if !due.is_empty() {
            self.wake();
        }
        Ok(due.len())
    }

    /// Runs up to `turns_per_actor` turns for each of up to `actors` actors with due
    /// messages whose types this runtime knows and no other worker of it runs; returns how
    /// many turns ran. A turn that fails with an error (not a handler failure, which is
    /// recorded as an attempt) is returned, or, for workers, logged and its actor stalled.
    pub(crate) async fn run_ready(
        &self,
        actors: i64,
        turns_per_actor: usize,
        errors: TurnErrors,
    ) -> Result<usize> {
        let ready = self.store.ready_actors(micros(self.now()), actors).await?;
        let mut turns = 0;
        for (actor_type, actor_id) in ready {
            let Some(runner) = self.runner(&actor_type) else {
                self.report_unknown_type(&actor_type, &actor_id);
                continue;
            };
            if self.is_stalled(&actor_type, &actor_id) {
                continue;
            }
            let Some(_claim) = Claim::take(self, &actor_type, &actor_id) else {
                continue;
            };
            for _ in 0..turns_per_actor {
                match runner.run_next(self, &actor_id).await {
                    Ok(Step::Ran(_)) => turns += 1,
                    Ok(Step::Idle | Step::Blocked { .. } | Step::Busy) => break,
                    Err(error) if errors == TurnErrors::Return => return Err(error),
                    Err(error) => {
                        tracing::error!(
                            actor_type,
                            actor_id,
                            %error,
                            "a turn failed; this worker leaves the actor alone for {STALL:?}"
                        );
                        self.stall(&actor_type, &actor_id);
                        break;
                    }
                }
            }
        }
        Ok(turns)
    }

    /// Whether a turn of this actor failed with an error recently (a stored message this
    /// build cannot decode, say): it is skipped until the stall passes, so the log is not
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

    fn stall(&self, actor_type: &str, actor_id: &str) {
        self.stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                (actor_type.to_owned(), actor_id.to_owned()),
                Instant::now() + STALL,
            );
    }

    fn report_unknown_type(&self, actor_type: &str, actor_id: &str) {
        let first = self
            .unknown_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(actor_type.to_owned());
        if first {
            tracing::warn!(
                actor_type,
                actor_id,
                "messages wait for an actor type this runtime does not know; they stay queued \
                 until a runtime that registers it (Builder::actor::<T>()) runs them"
            );
        }
    }

    /// Deletes finished messages older than the retention period; returns how many.
    pub(crate) async fn prune_finished(&self) -> Result<u64> {
        let before = self.now() - self.limits.retention;
        let mut tx = self.store.begin().await?;
        let pruned = tx
            .prune_finished(micros(before), KEPT_IDEMPOTENCY_KEYS)
            .await?;
        tx.commit().await?;
        Ok(pruned)
    }

    /// Enqueues a dead letter again at the tail of its actor's mailbox. Retrying the same
    /// dead letter twice enqueues one message.
    pub(crate) async fn retry_dead_letter(
        &self,
        message_id: i64,
    ) -> Result<(MessageRecord, Enqueued)> {
        let record = self
            .store
            .message(MessageLookup::Id(message_id))
            .await?
            .ok_or(Error::MessageNotFound)?;
        if record.status != StoredStatus::Dead {
            return Err(Error::NotDeadLetter {
                message_id,
                status: record.status.as_str(),
            });
        }
        let key = ActorKey {
            actor_type: &record.actor_type,
            actor_id: &record.actor_id,
        };
        let idempotency_key = format!("retry-of:{}", record.request_id);
        let options = EnqueueOptions {
            idempotency_key: Some(&idempotency_key),
            available_at: None,
        };
        let enqueued = self
            .enqueue(key, &record.operation, &record.arguments, options)
            .await?;
        Ok((record, enqueued))
    }
}

/// A worker's hold on one actor, released when dropped.
struct Claim<'e> {
    engine: &'e Engine,
    actor: (String, String),
}

impl<'e> Claim<'e> {
    fn take(engine: &'e Engine, actor_type: &str, actor_id: &str) -> Option<Self> {
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        let taken = engine
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(actor.clone());
        taken.then(|| Self { engine, actor })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.engine
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.actor);
    }
}
