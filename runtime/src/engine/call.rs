//! The paths a caller drives: synchronous calls, queries, snapshots and enqueues.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::time::Instant;

use super::turn::{Delivery, Lock};
use super::{micros, Engine, Outcome, Step};
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::handled::Handled;
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageLookup, MessageProgress, MessageRecord, NewMessage,
    Transaction,
};
use crate::turn::Turn;

/// How often a caller waiting on another task's turn looks at its message again, at most.
const WAIT_POLL: Duration = Duration::from_millis(25);

/// The options of one synchronous call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallOptions<'a> {
    pub(crate) timeout: Duration,
    pub(crate) idempotency_key: Option<&'a str>,
}

/// The options of one enqueue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EnqueueOptions<'a> {
    pub(crate) idempotency_key: Option<&'a str>,
    /// Not before this time (default: now).
    pub(crate) available_at: Option<DateTime<Utc>>,
}

/// A message arriving at the tail of a mailbox.
struct Arrival<'a> {
    operation: &'a str,
    arguments: &'a str,
    idempotency_key: Option<&'a str>,
    /// Microseconds since the epoch.
    available_at: i64,
}

/// A message now in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct Enqueued {
    pub(crate) message_id: i64,
    pub(crate) request_id: String,
    pub(crate) sequence: i64,
}

/// A call in progress: its actor, operation and deadline.
struct Call<'a> {
    key: ActorKey<'static, 'a>,
    operation: &'static str,
    timeout: Duration,
    deadline: Instant,
}

impl Call<'_> {
    fn timed_out(&self, sequence: Option<i64>, waiting_on: String) -> Error {
        Error::SyncTimeout {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            sequence,
            waiting_on,
            timeout: self.timeout,
        }
    }

    fn result(&self, outcome: Outcome) -> Result<String> {
        outcome.into_result(self.key.actor_type, self.key.actor_id, self.operation)
    }
}

impl Engine {
    /// Starts a write transaction, or gives up at the call's deadline.
    async fn begin_for(
        &self,
        call: &Call<'_>,
        sequence: Option<i64>,
    ) -> Result<Box<dyn Transaction>> {
        match tokio::time::timeout_at(call.deadline, self.store.begin()).await {
            Ok(begun) => begun,
            Err(_) => Err(call.timed_out(
                sequence,
                "the database writer, which other turns held until the timeout".to_owned(),
            )),
        }
    }

    /// A synchronous call: enqueue the message and run turns until it has run.
    ///
    /// On an empty mailbox the enqueue, the turn and the completion share one transaction.
    /// With an idempotency key already used by this actor, it answers for that message.
    pub(crate) async fn call<A: Actor>(
        &self,
        actor_id: &str,
        message: A::Message,
        arguments: String,
        options: CallOptions<'_>,
    ) -> Result<String> {
        let call = Call {
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: message.name(),
            timeout: options.timeout,
            deadline: Instant::now() + options.timeout,
        };
        let mut tx = self.begin_for(&call, None).await?;
        // On PostgreSQL this waits for the actor's row lock; bound the wait by the deadline
        // (dropping the transaction rolls back: nothing was written yet). Holding the lock
        // before the idempotency check makes two calls with one key take turns.
        let instance =
            match tokio::time::timeout_at(call.deadline, tx.lock_instance(call.key)).await {
                Ok(instance) => instance?,
                Err(_) => {
                    return Err(call.timed_out(
                        None,
                        "the actor, whose current turn (in another task or process) held it until \
                     the timeout"
                            .to_owned(),
                    ))
                }
            };
        if let Some(key) = options.idempotency_key {
            if let Some(existing) = tx
                .message(MessageLookup::IdempotencyKey(call.key, key))
                .await?
            {
                drop(tx);
                same_request(&existing, call.operation, &arguments, key)?;
                return match Outcome::from_record(&existing) {
                    Some(outcome) => call.result(outcome),
                    None => {
                        self.run_until_done::<A>(&call, existing.id, existing.sequence)
                            .await
                    }
                };
            }
        }
        let request_id = uuid::Uuid::new_v4().to_string();
        if instance.unfinished == 0 {
            let delivery = Delivery::Fresh {
                message,
                arguments: &arguments,
                request_id: &request_id,
                idempotency_key: options.idempotency_key,
            };
            let report = self.run_turn::<A>(tx, call.key, instance, delivery).await?;
            return call.result(report.outcome);
        }
        let now = micros(self.now());
        let enqueued = self
            .insert_ready(
                &mut *tx,
                call.key,
                &instance,
                &Arrival {
                    operation: call.operation,
                    arguments: &arguments,
                    idempotency_key: options.idempotency_key,
                    available_at: now,
                },
            )
            .await?;
        tx.commit().await?;
        self.wake();
        self.run_until_done::<A>(&call, enqueued.message_id, enqueued.sequence)
            .await
    }

    /// Runs the actor's turns until `message_id` has run, or the call's deadline passes.
    async fn run_until_done<A: Actor>(
        &self,
        call: &Call<'_>,
        message_id: i64,
        sequence: i64,
    ) -> Result<String> {
        loop {
            let tx = self.begin_for(call, Some(sequence)).await?;
            let lock = Lock::WaitUntil(call.deadline);
            let blocked_on = match self.run_next_in::<A>(tx, call.key, lock).await? {
                Step::Ran(report) if report.message_id == message_id => {
                    return call.result(report.outcome);
                }
                Step::Ran(_) => continue,
                Step::Idle | Step::Busy => None,
                Step::Blocked { sequence, until } => Some((sequence, until)),
            };
            if let Some(record) = self.store.message(MessageLookup::Id(message_id)).await? {
                if let Some(outcome) = Outcome::from_record(&record) {
                    return call.result(outcome);
                }
            }
            let pause = WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
            self.wait_for_work(pause).await;
            if Instant::now() >= call.deadline {
                let waiting_on = match blocked_on {
                    Some((ahead, until)) if ahead != sequence => {
                        format!("message {ahead} ahead of it, which waits for a retry at {until}")
                    }
                    Some((_, until)) => format!("its own retry at {until}"),
                    None => "another task running the actor's earlier messages".to_owned(),
                };
                return Err(call.timed_out(Some(sequence), waiting_on));
            }
        }
    }

    /// An ordered read: runs the actor's earlier messages, then answers from its state.
    pub(crate) async fn ask<A: Actor>(
        &self,
        actor_id: &str,
        query: A::Query,
        timeout: Duration,
    ) -> Result<String> {
        let call = Call {
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: query.name(),
            timeout,
            deadline: Instant::now() + timeout,
        };
        let mut drained = false;
        loop {
            let instance = self
                .store
                .read_instance(call.key)
                .await?
                .unwrap_or_else(Instance::fresh);
            if instance.unfinished == 0 || drained {
                let state: A = self.decode_state(call.key, &instance)?;
                let turn = Turn::<A>::new(actor_id, self.now(), None, 1);
                let handled = AssertUnwindSafe(state.answer(&turn, query))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| Handled::panicked(&*panic));
                let outcome = match handled {
                    Handled::Value(value) => Outcome::Completed(value),
                    Handled::Rejected(rejection) => Outcome::Rejected(rejection),
                    Handled::Failed { error, .. } => Outcome::Failed {
                        error,
                        attempts: 1,
                        retry_at: None,
                    },
                };
                return call.result(outcome);
            }
            let tx = self.begin_for(&call, None).await?;
            match self
                .run_next_in::<A>(tx, call.key, Lock::WaitUntil(call.deadline))
                .await?
            {
                Step::Ran(_) => {}
                Step::Idle => drained = true,
                Step::Busy => {
                    return Err(call.timed_out(
                        None,
                        "the actor, whose current turn held it until the timeout".to_owned(),
                    ))
                }
                Step::Blocked { sequence, until } => {
                    let pause =
                        WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
                    self.wait_for_work(pause).await;
                    if Instant::now() >= call.deadline {
                        let waiting_on =
                            format!("message {sequence}, which waits for a retry at {until}");
                        return Err(call.timed_out(None, waiting_on));
                    }
                }
            }
        }
    }

    /// The actor's committed state, without a message; the default state if it has none.
    pub(crate) async fn snapshot<A: Actor>(&self, actor_id: &str) -> Result<A> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        match self.store.read_instance(key).await? {
            Some(instance) => self.decode_state(key, &instance),
            None => Ok(A::default()),
        }
    }

    /// Appends a message to the tail of the actor's mailbox without running it. With an
    /// idempotency key this actor already used, returns that message instead.
    pub(crate) async fn enqueue(
        &self,
        key: ActorKey<'_, '_>,
        operation: &str,
        arguments: &str,
        options: EnqueueOptions<'_>,
    ) -> Result<Enqueued> {
        let mut tx = self.store.begin().await?;
        let instance = tx.lock_instance(key).await?;
        if let Some(idempotency_key) = options.idempotency_key {
            let lookup = MessageLookup::IdempotencyKey(key, idempotency_key);
            if let Some(existing) = tx.message(lookup).await? {
                same_request(&existing, operation, arguments, idempotency_key)?;
                return Ok(Enqueued {
                    message_id: existing.id,
                    request_id: existing.request_id,
                    sequence: existing.sequence,
                });
            }
        }
        let now = self.now();
        let available_at = micros(options.available_at.map_or(now, |at| at.max(now)));
        let enqueued = self
            .insert_ready(
                &mut *tx,
                key,
                &instance,
                &Arrival {
                    operation,
                    arguments,
                    idempotency_key: options.idempotency_key,
                    available_at,
                },
            )
            .await?;
        tx.commit().await?;
        self.wake();
        Ok(enqueued)
    }

    /// Inserts a ready message at the tail of the mailbox, within the mailbox limit.
    async fn insert_ready(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        instance: &Instance,
        arrival: &Arrival<'_>,
    ) -> Result<Enqueued> {
        if instance.unfinished >= self.limits.max_unfinished {
            return Err(Error::MailboxFull {
                actor_type: key.actor_type.to_owned(),
                actor_id: key.actor_id.to_owned(),
                limit: self.limits.max_unfinished,
            });
        }
        let now = micros(self.now());
        let request_id = uuid::Uuid::new_v4().to_string();
        let sequence = instance.next_sequence;
        let message_id = tx
            .insert_message(
                key,
                &NewMessage {
                    sequence,
                    operation: arrival.operation,
                    arguments: arrival.arguments,
                    request_id: &request_id,
                    idempotency_key: arrival.idempotency_key,
                    created_at: now,
                    progress: MessageProgress::ready(0, arrival.available_at),
                },
            )
            .await?;
        tx.write_instance(
            key,
            &InstanceWrite {
                state: None,
                revision: instance.revision,
                next_sequence: sequence + 1,
                unfinished: instance.unfinished + 1,
                updated_at: now,
            },
        )
        .await?;
        Ok(Enqueued {
            message_id,
            request_id,
            sequence,
        })
    }
}

/// An idempotency key answers only for the same operation with the same arguments.
fn same_request(
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
