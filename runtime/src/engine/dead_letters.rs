//! Dead letters: an operator's retry enqueues a dead message again, once, at the tail of its
//! actor's mailbox.

use super::conflicts::rerun_conflicts;
use super::enqueue::Origin;
use super::{Engine, Enqueued};
use crate::error::{Error, Result};
use crate::store::{ActorKey, MessageLookup, MessageRecord, StoredStatus};

impl Engine {
    /// Enqueues a dead letter again at the tail of its actor's mailbox, handing its
    /// idempotency key over to the new message (so a client that calls again with that key
    /// gets the retry's outcome). Retrying the same dead letter twice enqueues one message.
    pub(crate) async fn retry_dead_letter(
        &self,
        message_id: i64,
    ) -> Result<(MessageRecord, Enqueued)> {
        match self.retry_once(message_id).await? {
            Retry::Enqueued(record, enqueued) => Ok((*record, enqueued)),
            Retry::Already => {
                // Retried already (maybe a moment ago, by another operator): answer with that.
                let record = self
                    .store
                    .message(MessageLookup::Id(message_id))
                    .await?
                    .ok_or(Error::MessageNotFound)?;
                let retry_id = record.retried_as.ok_or(Error::MessageNotFound)?;
                let retry = self
                    .store
                    .message(MessageLookup::Id(retry_id))
                    .await?
                    .ok_or(Error::MessageNotFound)?;
                let enqueued = Enqueued {
                    message_id: retry.id,
                    request_id: retry.request_id,
                };
                Ok((record, enqueued))
            }
        }
    }

    /// Enqueues a dead letter again unless it was retried already (or is no longer dead,
    /// or was pruned): a redrive's step, which never retries one message twice. Returns
    /// the new message's id.
    pub(crate) async fn redrive_dead_letter(&self, message_id: i64) -> Result<Option<i64>> {
        match self.retry_once(message_id).await {
            Ok(Retry::Enqueued(_, enqueued)) => Ok(Some(enqueued.message_id)),
            Ok(Retry::Already) | Err(Error::MessageNotFound | Error::NotDeadLetter { .. }) => {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Enqueues a dead letter again, once; a retry of it committed meanwhile through another
    /// node (a Galera certification failure) is answered as [`Retry::Already`] on the next
    /// try.
    async fn retry_once(&self, message_id: i64) -> Result<Retry> {
        rerun_conflicts(|| self.try_retry(message_id)).await
    }

    /// One try at [`retry_once`](Self::retry_once), in a transaction of its own.
    async fn try_retry(&self, message_id: i64) -> Result<Retry> {
        let mut tx = self.begin(None).await?;
        let record = tx
            .message(MessageLookup::Id(message_id))
            .await?
            .ok_or(Error::MessageNotFound)?;
        if record.status != StoredStatus::Dead {
            return Err(Error::NotDeadLetter {
                message_id,
                status: record.status.as_str(),
            });
        }
        if !tx.release_dead_letter(message_id).await? {
            return Ok(Retry::Already);
        }
        let key = ActorKey {
            actor_type: &record.actor_type,
            actor_id: &record.actor_id,
        };
        let enqueued = self
            .insert_ready(
                &mut *tx,
                key,
                &record.operation,
                &record.arguments,
                record.idempotency_key.as_deref(),
                Origin {
                    available_at: 0,
                    incarnation: record.incarnation,
                    scheduled_for: record.scheduled_for,
                    request_id: None,
                },
            )
            .await?;
        tx.link_retry(message_id, enqueued.message_id).await?;
        tx.commit().await?;
        self.wake();
        crate::metrics::enqueued(&record.actor_type, &record.operation, 1);
        Ok(Retry::Enqueued(Box::new(record), enqueued))
    }
}

/// What one retry of a dead letter did.
enum Retry {
    /// Enqueued it again as a new message.
    Enqueued(Box<MessageRecord>, Enqueued),
    /// An earlier retry had.
    Already,
}
