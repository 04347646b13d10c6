//! The operators' writes: every change an operator makes goes through this job. An
//! operator's retry of a dead letter enqueues it again, once, at the tail of its actor's
//! mailbox; a pause is a switch on the actor's row, which calls and workers read before they
//! take its lock. The audit log of administration calls is written here too, and the
//! doctor's probe of a write read back.

use super::conflicts::rerun_conflicts;
use super::core::Core;
use super::micros;
use super::tail::{insert_ready, Enqueued, Origin};
use crate::error::{Error, Result};
use crate::store::admin_rows::AdminEventWrite;
use crate::store::{
    ActorKey, ActorLock, InstanceWrite, MessageLookup, MessageRecord, StoredStatus,
};
use crate::trace_context::TraceContext;

/// The operators' writes job. It borrows the core.
#[derive(Clone, Copy)]
pub(crate) struct OperatorWrites<'e> {
    core: &'e Core,
}

impl<'e> OperatorWrites<'e> {
    /// The operators' writes over the engine's core.
    pub(super) fn new(core: &'e Core) -> Self {
        Self { core }
    }
}

impl OperatorWrites<'_> {
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
                let record = self.message(message_id).await?;
                let retry = self
                    .message(record.retried_as.ok_or(Error::MessageNotFound)?)
                    .await?;
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

    /// The message `message_id`, read outside any transaction.
    async fn message(&self, message_id: i64) -> Result<MessageRecord> {
        let lookup = MessageLookup::Id(message_id);
        let record = self.core.store().message(lookup).await?;
        record.ok_or(Error::MessageNotFound)
    }

    /// Enqueues a dead letter again, once; a retry of it committed meanwhile through another
    /// node (a Galera certification failure) is answered as [`Retry::Already`] on the next
    /// try.
    async fn retry_once(&self, message_id: i64) -> Result<Retry> {
        rerun_conflicts(|| self.try_retry(message_id)).await
    }

    /// One try at [`retry_once`](Self::retry_once), in a transaction of its own.
    async fn try_retry(&self, message_id: i64) -> Result<Retry> {
        let mut tx = self.core.begin(None).await?;
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
        let enqueued = insert_ready(
            self.core,
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
                // The retry continues the trace of the operator's request.
                trace: TraceContext::current(),
            },
        )
        .await?;
        tx.link_retry(message_id, enqueued.message_id).await?;
        tx.commit().await?;
        self.core.wake();
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

impl OperatorWrites<'_> {
    /// Pauses the actor (`paused`) or resumes it; false if it already was as asked. A turn
    /// through another node that certified first (Galera) leaves the switch to run again
    /// after it, as on one server the switch waits for the turn that holds the lock.
    pub(crate) async fn set_paused(&self, key: ActorKey<'_, '_>, paused: bool) -> Result<bool> {
        let changed = rerun_conflicts(|| async {
            let paused_at = paused.then(|| micros(self.core.now()));
            let mut tx = self.core.begin(None).await?;
            let changed = tx.set_paused(key, paused_at).await?;
            tx.commit().await?;
            Ok(changed)
        })
        .await?;
        if !paused {
            self.core.wake();
        }
        Ok(changed)
    }
}

impl OperatorWrites<'_> {
    /// Appends an audit row in a transaction of its own; returns its id.
    pub(crate) async fn record_admin_event(&self, event: &AdminEventWrite<'_>) -> Result<i64> {
        let mut tx = self.core.begin(None).await?;
        let id = tx.record_admin_event(event).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Records how an allowed administration call ended on its audit row `row`.
    pub(crate) async fn finish_admin_event(
        &self,
        row: i64,
        outcome: &str,
        details: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.core.begin(None).await?;
        tx.finish_admin_event(row, outcome, details).await?;
        tx.commit().await
    }

    /// Writes `state` as the state of the scratch actor `key` and reads it back under the
    /// actor's lock, inside one transaction that is then rolled back (an interrupted probe
    /// leaves nothing behind); returns the state read back.
    pub(crate) async fn probe_round_trip(
        &self,
        key: ActorKey<'_, '_>,
        state: &str,
    ) -> Result<Option<String>> {
        let mut tx = self.core.begin(None).await?;
        let write = InstanceWrite {
            state,
            revision: 1,
            state_version: 1,
            updated_at: micros(self.core.now()),
        };
        tx.write_instance(key, &write).await?;
        let read = tx
            .lock_actor(ActorLock::waiting(key, micros(self.core.now())))
            .await?;
        Core::release(tx).await;
        Ok(read.and_then(|locked| locked.instance.state))
    }
}
