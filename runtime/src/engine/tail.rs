//! Messages appended at the tail of a mailbox without taking its actor's lock: the insert an
//! enqueue, a call queued behind others and an operator's retry share, within the mailbox
//! limit, and what an idempotency key answers for.

use super::core::Core;
use super::micros;
use crate::error::{Error, Result};
use crate::store::{ActorKey, MessageProgress, MessageRecord, NewMessage, Transaction};
use crate::trace_context::TraceContext;

/// A message now in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct Enqueued {
    pub(crate) message_id: i64,
    pub(crate) request_id: String,
}

/// Inserts a ready message at the tail of the mailbox, within the mailbox limit (`core`'s).
pub(super) async fn insert_ready(
    core: &Core,
    tx: &mut dyn Transaction,
    key: ActorKey<'_, '_>,
    operation: &str,
    arguments: &str,
    idempotency_key: Option<&str>,
    origin: Origin<'_>,
) -> Result<Enqueued> {
    let limit = core.config().limits.max_unfinished;
    if tx.count_ready(key, limit).await? >= limit {
        return Err(Error::MailboxFull {
            actor_type: key.actor_type.to_owned(),
            actor_id: key.actor_id.to_owned(),
            limit,
        });
    }
    let request_id = origin
        .request_id
        .map_or_else(crate::ids::new_request_id, str::to_owned);
    let message_id = tx
        .insert_message(
            key,
            &NewMessage {
                operation,
                arguments,
                request_id: &request_id,
                idempotency_key,
                created_at: micros(core.now()),
                progress: MessageProgress::ready(0, origin.available_at),
                incarnation: origin.incarnation,
                scheduled_for: origin.scheduled_for,
                trace: origin.trace,
            },
        )
        .await?;
    Ok(Enqueued {
        message_id,
        request_id,
    })
}

/// When a message enqueued at the tail may run, what it keeps of an earlier message (an
/// operator's retry of a dead letter keeps a fired reminder's incarnation and time), the
/// request id an earlier try of the same enqueue stored it under, if any, and the trace
/// context of the span that enqueued it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin<'a> {
    /// Not before this time (microseconds; 0: now).
    pub(super) available_at: i64,
    pub(super) incarnation: Option<i64>,
    pub(super) scheduled_for: Option<i64>,
    /// The request id to store the message under (`None`: a new one).
    pub(super) request_id: Option<&'a str>,
    /// The context of the span that enqueued it, which its turn continues.
    pub(super) trace: TraceContext,
}

impl Origin<'_> {
    /// A new message, due now, of whichever incarnation is current, under a new request id,
    /// with no trace context.
    pub(super) fn now() -> Self {
        Self {
            available_at: 0,
            incarnation: None,
            scheduled_for: None,
            request_id: None,
            trace: TraceContext::NONE,
        }
    }
}

/// An idempotency key answers only for the same operation with the same arguments.
pub(super) fn same_request(
    existing: &MessageRecord,
    operation: &str,
    arguments: &str,
    key: &str,
) -> Result<()> {
    if existing.operation == operation && existing.arguments == arguments {
        Ok(())
    } else {
        Err(Error::IdempotencyConflict {
            key: key.to_owned(),
            existing_operation: existing.operation.clone(),
        })
    }
}
