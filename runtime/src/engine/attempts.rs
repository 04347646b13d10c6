//! Attempts: how many a message gets, the row a failed one leaves (its retry, or a dead
//! letter), and counting a failed attempt that happened outside a committed turn: stored
//! arguments that do not decode, a state that does not decode, a savepoint or a write that
//! failed, a handler that ran past the turn timeout. The turn's own transaction is gone by
//! then, so the attempt is recorded in a transaction of its own, on the message row alone (no
//! actor lock: the turn that failed may still hold it, on a connection being closed). A pass
//! that leaves a message unrun because its turn kept conflicting, or its commit kept going
//! unanswered, counts a stall instead of an attempt.

use super::conflicts::rerun_conflicts;
use super::one_turn::Turns;
use super::settle::failed_progress;
use super::{from_micros, Outcome, Step, TurnReport};
use crate::actor::Actor;
use crate::error::{Error, Result};
use crate::store::{ActorKey, ErrorKinds, MessageProgress, StoredMessage, StoredStatus};

impl Turns<'_> {
    /// The attempts an actor's failing message gets before it becomes a dead letter.
    pub(super) fn max_attempts<A: Actor>(&self) -> i64 {
        A::MAX_ATTEMPTS.map_or(self.core().config().retry.max_attempts, i64::from)
    }

    /// Counts a failed attempt at `head`, which is still ready with its attempts unchanged
    /// (if another turn moved it on meanwhile, nothing is written and the step is `Busy`).
    pub(super) async fn count_failure<A: Actor>(
        &self,
        key: ActorKey<'_, '_>,
        head: &StoredMessage,
        error: &str,
        retryable: bool,
    ) -> Result<Step> {
        let now = self.core().now();
        let attempts = head.attempts + 1;
        let progress = failed_progress(
            now,
            attempts,
            self.max_attempts::<A>(),
            retryable,
            error,
            &self.core().config().retry,
        );
        tracing::warn!(
            actor_type = key.actor_type,
            actor_id = key.actor_id,
            message_id = head.id,
            attempts,
            error,
            dead = progress.status == StoredStatus::Dead,
            "a turn failed outside its handler"
        );
        let mut tx = self.core().begin(None).await?;
        let recorded = tx.update_message(head.id, head.attempts, &progress).await?;
        tx.commit().await?;
        if !recorded {
            return Ok(Step::Busy);
        }
        self.core().wake();
        let retry_at =
            (progress.status == StoredStatus::Ready).then(|| from_micros(progress.available_at));
        let outcome = Outcome::Failed {
            error: error.to_owned(),
            attempts,
            retry_at,
        };
        outcome.record(key.actor_type, &head.operation);
        Ok(Step::Ran(TurnReport {
            message_id: Some(head.id),
            outcome,
        }))
    }

    /// Notes on a message why it waits without counting an attempt (an operation this build
    /// does not know), so its status says so.
    pub(super) async fn note_waiting(&self, message_id: i64, why: &Error) -> Result<()> {
        let mut tx = self.core().begin(None).await?;
        tx.note_message(
            message_id,
            &format!("waits for a build that can run it: {why}"),
        )
        .await?;
        tx.commit().await
    }

    /// Counts a pass that leaves `message_id` unrun, with `why` as its note (its turn kept
    /// conflicting, or its commit kept going unanswered): no attempt is counted, so the
    /// message never moves toward a dead letter for it, and a later pass runs it. The count
    /// is how an endless one shows ([`Admin::doctor`](crate::admin::Admin::doctor)).
    pub(super) async fn record_stall(&self, message_id: i64, why: &str) -> Result<Step> {
        tracing::warn!(message_id, why, "a message is left for a later pass");
        let recorded = rerun_conflicts(|| async {
            let mut tx = self.core().begin(None).await?;
            tx.record_stall(message_id, why).await?;
            tx.commit().await
        })
        .await;
        match recorded {
            // Counting the stall kept conflicting too: the count is lost, not the message,
            // which stays ready for a later pass.
            Err(error) if error.is_conflict() => {
                tracing::debug!(message_id, %error, "the stall was not counted");
            }
            recorded => recorded?,
        }
        Ok(Step::Busy)
    }
}

impl MessageProgress<'_> {
    /// A message that waits in the mailbox until `available_at`.
    pub(crate) fn ready(attempts: i64, available_at: i64) -> Self {
        Self {
            status: StoredStatus::Ready,
            attempts,
            available_at,
            result: None,
            last_error: None,
            finished_at: None,
            failed_at: None,
        }
    }
}
