//! [`MessageRef`]: a durable message in a mailbox, found again by id, request id or
//! idempotency key.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::client::shared::Runtime;
use crate::engine::{read_until, Lock, Step};
use crate::error::{Error, Rejection, Result};
use crate::limits::{check_timeout, deadline_after};
use crate::store::ErrorKinds;
use crate::store::{MessageLookup, MessageRecord, StoredStatus};
use crate::time::clock::IntoDuration;
use crate::time::micros::{from_micros, micros};

/// How often [`MessageRef::wait`] looks at its message again, at most.
const WAIT_POLL: Duration = Duration::from_millis(25);

/// Where a message stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageStatus {
    /// Waiting in the mailbox: not run yet, or waiting for its next attempt.
    Ready {
        /// Attempts made so far.
        attempts: i64,
        /// Not run before this time.
        available_at: DateTime<Utc>,
        /// The error of the last failed attempt.
        last_error: Option<String>,
    },
    /// Ran and returned a value.
    Completed,
    /// Ran and was rejected.
    Rejected(Rejection),
    /// Failed on every attempt (or permanently); later messages of the actor ran on.
    Dead {
        /// Attempts made.
        attempts: i64,
        /// The last attempt's error.
        error: String,
    },
    /// Its actor was destroyed before it ran; it never will.
    Destroyed,
}

/// A message in a mailbox, with its typed result `T` once it has run.
///
/// Returned by `reference.enqueue().<command>(..)` as soon as the message is durable.
pub struct MessageRef<T = serde_json::Value> {
    runtime: Runtime,
    id: i64,
    request_id: String,
    actor_type: String,
    actor_id: String,
    result: PhantomData<fn() -> T>,
}

impl<T> MessageRef<T> {
    pub(crate) fn new(runtime: Runtime, record: &MessageRecord) -> Self {
        Self {
            runtime,
            id: record.id,
            request_id: record.request_id.clone(),
            actor_type: record.actor_type.clone(),
            actor_id: record.actor_id.clone(),
            result: PhantomData,
        }
    }

    pub(crate) fn from_parts(
        runtime: Runtime,
        actor_type: &str,
        actor_id: &str,
        id: i64,
        request_id: String,
    ) -> Self {
        Self {
            runtime,
            id,
            request_id,
            actor_type: actor_type.to_owned(),
            actor_id: actor_id.to_owned(),
            result: PhantomData,
        }
    }

    /// The message's id: unique, and increasing in the order messages were enqueued (an
    /// actor runs its messages in this order).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The message's request id (a UUID), unique across all actors.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The stored type name of the actor it is for.
    pub fn actor_type(&self) -> &str {
        &self.actor_type
    }

    /// The id of the actor it is for.
    pub fn actor_id(&self) -> &str {
        &self.actor_id
    }

    /// The same message, with its result read as `U`.
    pub fn typed<U>(self) -> MessageRef<U> {
        MessageRef {
            runtime: self.runtime,
            id: self.id,
            request_id: self.request_id,
            actor_type: self.actor_type,
            actor_id: self.actor_id,
            result: PhantomData,
        }
    }

    async fn record(&self) -> Result<MessageRecord> {
        self.runtime
            .engine()
            .reads()
            .message(MessageLookup::Id(self.id))
            .await?
            // A pruned message's id may be reused by a later one on SQLite.
            .filter(|record| record.request_id == self.request_id)
            .ok_or(Error::MessageNotFound)
    }

    /// Where the message stands now.
    pub async fn status(&self) -> Result<MessageStatus> {
        let record = self.record().await?;
        Ok(match record.status {
            StoredStatus::Ready => MessageStatus::Ready {
                attempts: record.attempts,
                // A message enqueued without a delay is stored as available from time 0.
                available_at: from_micros(record.available_at.max(record.created_at)),
                last_error: record.last_error,
            },
            StoredStatus::Completed => MessageStatus::Completed,
            StoredStatus::Rejected => {
                MessageStatus::Rejected(crate::engine::stored_rejection(&record))
            }
            StoredStatus::Dead => MessageStatus::Dead {
                attempts: record.attempts,
                error: record.last_error.unwrap_or_default(),
            },
            StoredStatus::Destroyed => MessageStatus::Destroyed,
        })
    }
}

impl<T: DeserializeOwned> MessageRef<T> {
    /// The typed result once the message has run (`None` while it waits); a rejection is
    /// `Error::Rejected`, a dead letter `Error::DeadLetter`.
    pub async fn result(&self) -> Result<Option<T>> {
        let record = self.record().await?;
        self.outcome(&record)
    }

    fn outcome(&self, record: &MessageRecord) -> Result<Option<T>> {
        match record.status {
            StoredStatus::Ready => Ok(None),
            StoredStatus::Completed => {
                let json = record.result.as_deref().unwrap_or("null");
                crate::codec::from_json("result", &self.actor_type, &self.actor_id, json).map(Some)
            }
            StoredStatus::Rejected => Err(Error::Rejected(crate::engine::stored_rejection(record))),
            StoredStatus::Dead => Err(Error::DeadLetter {
                request_id: self.request_id.clone(),
                error: record.last_error.clone().unwrap_or_default(),
                attempts: record.attempts,
            }),
            StoredStatus::Destroyed => Err(Error::Destroyed {
                actor_type: self.actor_type.clone(),
                actor_id: self.actor_id.clone(),
            }),
        }
    }

    /// Waits until the message has run, running the actor's mailbox meanwhile if this
    /// runtime knows its type (so it works without workers), through retries, for at most
    /// `timeout` (a `Duration` or a `TimeDelta`; under a millisecond is refused at once with
    /// [`Error::InvalidTimeout`]). On timeout the message stays queued, and
    /// [`Error::WaitTimeout`] says what it waits on: a time it is not due before, a message
    /// ahead of it, its own retry, or a type this runtime does not run.
    pub async fn wait(&self, timeout: impl IntoDuration) -> Result<T> {
        let timeout = check_timeout(timeout.into_duration())?;
        crate::actor::handler_scope::refuse_inside_handler(&self.actor_type, "wait")?;
        let deadline = deadline_after(timeout);
        let engine = self.runtime.engine();
        let runner = engine.registry().runner(&self.actor_type);
        let mut waiting_on = "the database, whose connections were busy".to_owned();
        loop {
            let record = match read_until(deadline, self.record()).await {
                Err(error) if error.is_busy() => break,
                read => read?,
            };
            if let Some(result) = self.outcome(&record)? {
                return Ok(result);
            }
            // A message sent with a delay is not in line before it is due.
            let not_due = (record.attempts == 0
                && record.available_at > micros(engine.core().now()))
            .then(|| format!("it is not due until {}", from_micros(record.available_at)));
            let ran = match &runner {
                Some(runner) => {
                    let lock = Lock::WaitUntil(deadline);
                    let step = runner
                        .run_next(engine.turns(), &self.actor_id, lock)
                        .await?;
                    waiting_on = not_due.unwrap_or_else(|| step.waiting_on(self.id));
                    matches!(step, Step::Ran(_))
                }
                None => {
                    waiting_on = format!(
                        "this runtime does not run {} actors (Builder::actor::<T>() makes it); \
                         a runtime that does runs it",
                        self.actor_type
                    );
                    false
                }
            };
            if Instant::now() >= deadline {
                break;
            }
            if !ran {
                let pause = WAIT_POLL.min(deadline.saturating_duration_since(Instant::now()));
                engine.core().wait_for_work(pause).await;
            }
        }
        Err(Error::WaitTimeout {
            request_id: self.request_id.clone(),
            waiting_on,
            timeout,
        })
    }
}

impl<T> Clone for MessageRef<T> {
    fn clone(&self) -> Self {
        Self {
            runtime: self.runtime.clone(),
            id: self.id,
            request_id: self.request_id.clone(),
            actor_type: self.actor_type.clone(),
            actor_id: self.actor_id.clone(),
            result: PhantomData,
        }
    }
}

impl<T> fmt::Debug for MessageRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageRef")
            .field("id", &self.id)
            .field("request_id", &self.request_id)
            .field("actor_type", &self.actor_type)
            .field("actor_id", &self.actor_id)
            .finish()
    }
}
