//! Enqueues: a message appended at the tail of an actor's mailbox without taking its lock,
//! within the mailbox limit, answered from the message already stored under its
//! idempotency key if there is one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::call::Calls;
use super::core::Core;
use super::tail::{insert_ready, same_request, Enqueued, Origin};
use super::{micros, paused, WAIT_POLL};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::store::{ActorKey, MessageLookup};
use crate::trace_context::TraceContext;

/// The options of one enqueue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnqueueOptions<'a> {
    pub(crate) idempotency_key: Option<&'a str>,
    /// Not before this time (default: now, whatever the clock says later).
    pub(crate) available_at: Option<DateTime<Utc>>,
    /// How long the enqueue may wait for the database.
    pub(crate) timeout: Duration,
}

impl Calls<'_> {
    /// Appends a message to the tail of the actor's mailbox without running it or taking
    /// the actor's lock. With an idempotency key this actor already used, returns that
    /// message instead (an operator's retry of a dead letter takes its key over).
    ///
    /// # Errors
    ///
    /// A `COMMIT` whose connection was lost with it is in doubt: the enqueue tries again
    /// under the same request id until its deadline (the message found committed is the
    /// answer; the request id's unique index keeps a second one out), and at the deadline
    /// its [`Error::SyncTimeout`] (or [`Error::DatabaseUnavailable`]) names that request id.
    pub(crate) async fn enqueue(
        &self,
        key: ActorKey<'static, '_>,
        operation: &'static str,
        arguments: &str,
        options: EnqueueOptions<'_>,
    ) -> Result<Enqueued> {
        let deadline = deadline_after(options.timeout);
        let request_id = crate::ids::new_request_id();
        let mut in_doubt = false;
        loop {
            let tried = self
                .try_enqueue(
                    key,
                    operation,
                    arguments,
                    options,
                    deadline,
                    (&request_id, in_doubt),
                )
                .await;
            let past_deadline = Instant::now() >= deadline;
            let error = match tried {
                Ok(Some(enqueued)) => return Ok(enqueued),
                // Its COMMIT ended in doubt: the next try looks its message up first.
                Ok(None) => {
                    in_doubt = true;
                    if !past_deadline {
                        continue;
                    }
                    None
                }
                Err(error) if error.is_conflict() && !past_deadline => continue,
                // A connection lost before the COMMIT (one lost with it comes as `Ok(None)`):
                // the next try waits for the database to accept writes again.
                Err(error) if error.is_connection_lost() => {
                    match self.core().store().reconnect(deadline).await {
                        Ok(()) if Instant::now() < deadline => continue,
                        Ok(()) => None,
                        Err(unavailable) => Some(unavailable),
                    }
                }
                // While in doubt, a busy actor or pool (the cut transaction's locks, still
                // held until the server notices) is waited out.
                Err(error) if in_doubt && error.is_busy() && !past_deadline => {
                    let pause = WAIT_POLL.min(deadline.saturating_duration_since(Instant::now()));
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(error) => Some(error),
            };
            // Whatever ends an enqueue in doubt names the request id its message is found by.
            return Err(match (in_doubt, error) {
                (false, Some(error)) => error,
                (false, None) => Error::SyncTimeout {
                    actor_type: key.actor_type,
                    actor_id: key.actor_id.to_owned(),
                    operation,
                    message_id: None,
                    request_id: None,
                    waiting_on: "the database, whose connection was lost (nothing was written)"
                        .to_owned(),
                    timeout: options.timeout,
                },
                (true, Some(error @ Error::DatabaseUnavailable { .. })) => {
                    error.in_doubt_of(&request_id)
                }
                (_, _) => in_doubt_at_deadline(key, operation, &request_id, options),
            });
        }
    }

    /// One try at an enqueue, in a transaction of its own, storing the message under
    /// `request_id`; `Ok(None)` if its `COMMIT` ended in doubt (the connection was lost with
    /// it), and then the next try (`in_doubt`) looks the request id up first.
    async fn try_enqueue(
        &self,
        key: ActorKey<'_, '_>,
        operation: &str,
        arguments: &str,
        options: EnqueueOptions<'_>,
        deadline: Instant,
        (request_id, in_doubt): (&str, bool),
    ) -> Result<Option<Enqueued>> {
        let mut tx = self.core().begin(Some(deadline)).await?;
        if in_doubt {
            if let Some(existing) = tx.message(MessageLookup::RequestId(request_id)).await? {
                Core::release(tx).await;
                return Ok(Some(Enqueued {
                    message_id: existing.id,
                    request_id: existing.request_id,
                }));
            }
        }
        if tx.is_paused(key).await? {
            Core::release(tx).await;
            return Err(paused(key));
        }
        if let Some(idempotency_key) = options.idempotency_key {
            let lookup = MessageLookup::IdempotencyKey(key, idempotency_key);
            if let Some(existing) = tx.message(lookup).await? {
                Core::release(tx).await;
                same_request(&existing, operation, arguments, idempotency_key)?;
                return Ok(Some(Enqueued {
                    message_id: existing.id,
                    request_id: existing.request_id,
                }));
            }
        }
        let available_at = match options.available_at {
            Some(at) if at > self.core().now() => micros(at),
            _ => 0,
        };
        let enqueued = insert_ready(
            self.core(),
            &mut *tx,
            key,
            operation,
            arguments,
            options.idempotency_key,
            Origin {
                available_at,
                request_id: Some(request_id),
                trace: TraceContext::current(),
                ..Origin::now()
            },
        )
        .await?;
        if let Err(error) = tx.commit().await {
            return if error.is_connection_lost() {
                Ok(None)
            } else {
                Err(error)
            };
        }
        self.core().wake();
        crate::metrics::enqueued(key.actor_type, operation, 1);
        Ok(Some(enqueued))
    }
}

/// What an enqueue whose `COMMIT` stayed in doubt until its deadline answers: the request id
/// its message is found by if that `COMMIT` landed.
fn in_doubt_at_deadline(
    key: ActorKey<'static, '_>,
    operation: &'static str,
    request_id: &str,
    options: EnqueueOptions<'_>,
) -> Error {
    Error::SyncTimeout {
        actor_type: key.actor_type,
        actor_id: key.actor_id.to_owned(),
        operation,
        message_id: None,
        request_id: Some(Box::new(request_id.to_owned())),
        waiting_on: "the COMMIT of its message, whose connection was lost with it (the server \
                     may have committed it)"
            .to_owned(),
        timeout: options.timeout,
    }
}
