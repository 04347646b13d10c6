//! The work of workers and operators: reminders, ready mailboxes, retention, dead letters.

use std::sync::PoisonError;

use super::{micros, Engine, EnqueueOptions, Enqueued, Step};
use crate::error::{Error, Result};
use crate::store::{
    ActorKey, MessageLookup, MessageProgress, MessageRecord, NewMessage, StoredStatus, Transaction,
};

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
    /// many turns ran. An actor whose turn fails with an error is logged and skipped.
    pub(crate) async fn run_ready(&self, actors: i64, turns_per_actor: usize) -> Result<usize> {
        let ready = self.store.ready_actors(micros(self.now()), actors).await?;
        let mut turns = 0;
        for (actor_type, actor_id) in ready {
            let Some(runner) = self.runner(&actor_type) else {
                self.report_unknown_type(&actor_type, &actor_id);
                continue;
            };
            let Some(_claim) = Claim::take(self, &actor_type, &actor_id) else {
                continue;
            };
            for _ in 0..turns_per_actor {
                match runner.run_next(self, &actor_id).await {
                    Ok(Step::Ran(_)) => turns += 1,
                    Ok(Step::Idle | Step::Blocked { .. }) => break,
                    Err(error) => {
                        tracing::error!(actor_type, actor_id, %error, "a turn failed");
                        break;
                    }
                }
            }
        }
        Ok(turns)
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

/// Appends a ready message to the actor's mailbox inside `tx`; returns its id.
async fn append(
    tx: &mut dyn Transaction,
    key: ActorKey<'_, '_>,
    operation: &str,
    arguments: &str,
    now: i64,
) -> Result<i64> {
    let sequence = tx.allocate_sequence(key, now).await?;
    let request_id = uuid::Uuid::new_v4().to_string();
    tx.insert_message(
        key,
        &NewMessage {
            sequence,
            operation,
            arguments,
            request_id: &request_id,
            idempotency_key: None,
            created_at: now,
            progress: MessageProgress::ready(0, now),
        },
    )
    .await
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
