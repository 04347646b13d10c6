//! One turn, from the head of the mailbox (or a fresh synchronous call) to the commit.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tracing::Instrument;

use super::{append, from_micros, micros, Engine, Outcome, Step, TurnReport};
use crate::actor::{Actor, Operations};
use crate::codec::{decode_operation, encode_operation, from_json, to_json};
use crate::error::{Error, Rejection, Result};
use crate::handled::Handled;
use crate::limits::{Payload, RetryPolicy};
use crate::reference::validate_id;
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageProgress, NewEffect, NewMessage, ReminderWrite,
    StoredMessage, StoredStatus, Transaction,
};
use crate::turn::{ReminderChange, Turn};

/// How a turn takes its actor's lock (a row lock on PostgreSQL; SQLite's single writer
/// already excludes every other turn).
#[derive(Debug, Clone, Copy)]
pub(super) enum Lock {
    /// Skip an actor whose lock another turn holds: workers move on to other actors.
    Skip,
    /// Wait for the lock until the caller's deadline: callers wait for the actor.
    WaitUntil(tokio::time::Instant),
}

/// Where the message of a turn comes from.
pub(super) enum Delivery<'a, M> {
    /// A synchronous call on an empty mailbox: enqueue, turn and completion in one transaction.
    Fresh {
        message: M,
        arguments: &'a str,
        request_id: &'a str,
        idempotency_key: Option<&'a str>,
    },
    /// The head of the mailbox.
    Stored { row: StoredMessage, message: M },
}

/// A staged reminder change, encoded for the store.
enum ReminderOp {
    Upsert {
        name: &'static str,
        key: String,
        due_at: i64,
        arguments: String,
    },
    Delete {
        name: &'static str,
        key: String,
    },
}

/// A message to another actor, encoded for the store.
struct SendOp {
    actor_type: &'static str,
    actor_id: String,
    operation: &'static str,
    arguments: String,
    register: fn(&Engine) -> Result<()>,
}

/// What a completed turn writes besides its message row.
struct Writes {
    state: String,
    reminders: Vec<ReminderOp>,
    sends: Vec<SendOp>,
    /// Effects: (name, payload).
    effects: Vec<(&'static str, String)>,
}

/// What a turn commits, before the message row's fields are worked out.
struct Settled {
    kind: SettledKind,
    attempts: i64,
    writes: Option<Writes>,
}

enum SettledKind {
    Completed(String),
    Rejected { rejection: Rejection, json: String },
    Failed { error: String, retryable: bool },
}

impl Engine {
    /// Runs the actor's next ready message, if one is due.
    pub(crate) async fn run_next<A: Actor>(&self, actor_id: &str) -> Result<Step> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let tx = self.store.begin().await?;
        self.run_next_in::<A>(tx, key, Lock::Skip).await
    }

    /// Runs the actor's next ready message in `tx`, taking the actor's lock as `lock` says.
    pub(super) async fn run_next_in<A: Actor>(
        &self,
        mut tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        lock: Lock,
    ) -> Result<Step> {
        let instance = match lock {
            Lock::Skip => tx.try_lock_instance(key).await?,
            Lock::WaitUntil(deadline) => {
                match tokio::time::timeout_at(deadline, tx.lock_instance(key)).await {
                    Ok(instance) => Some(instance?),
                    Err(_) => return Ok(Step::Busy),
                }
            }
        };
        let Some(instance) = instance else {
            return Ok(Step::Idle);
        };
        if instance.unfinished == 0 {
            return Ok(Step::Idle);
        }
        let Some(row) = tx.next_message(key).await? else {
            tracing::warn!(
                actor_type = key.actor_type,
                actor_id = key.actor_id,
                unfinished = instance.unfinished,
                "the actor counts unfinished messages but has none ready"
            );
            return Ok(Step::Idle);
        };
        if row.available_at > micros(self.now()) {
            return Ok(Step::Blocked {
                sequence: row.sequence,
                until: from_micros(row.available_at),
            });
        }
        let message = decode_operation::<A::Message>(
            key.actor_type,
            key.actor_id,
            &row.operation,
            &row.arguments,
            row.sequence,
        )?;
        let report = self
            .run_turn::<A>(tx, key, instance, Delivery::Stored { row, message })
            .await?;
        Ok(Step::Ran(report))
    }

    pub(super) fn decode_state<A: Actor>(
        &self,
        key: ActorKey<'static, '_>,
        instance: &Instance,
    ) -> Result<A> {
        match &instance.state {
            Some(json) => from_json("state", key.actor_type, key.actor_id, json),
            None => Ok(A::default()),
        }
    }

    /// Runs one turn in `tx` and commits it.
    pub(super) async fn run_turn<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: Instance,
        delivery: Delivery<'_, A::Message>,
    ) -> Result<TurnReport> {
        let (message, sequence, previous_attempts, stored_id, fresh) = match delivery {
            Delivery::Fresh {
                message,
                arguments,
                request_id,
                idempotency_key,
            } => (
                message,
                instance.next_sequence,
                0,
                None,
                Some((arguments, request_id, idempotency_key)),
            ),
            Delivery::Stored { row, message } => {
                (message, row.sequence, row.attempts, Some(row.id), None)
            }
        };
        let operation = message.name();
        let span = tracing::info_span!(
            "turn",
            actor_type = key.actor_type,
            actor_id = key.actor_id,
            operation,
            sequence,
            outcome = tracing::field::Empty,
        );
        async move {
            let now = self.now();
            let now_us = micros(now);
            let mut state: A = self.decode_state(key, &instance)?;
            let attempt = u32::try_from(previous_attempts + 1).unwrap_or(u32::MAX);
            let mut turn = Turn::<A>::new(key.actor_id, now, Some(sequence), attempt);
            turn.attach(tx);
            let handled = AssertUnwindSafe(state.handle(&mut turn, message))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Handled::panicked(&*panic));
            let (mut tx, savepoint) = turn.detach().ok_or_else(|| {
                Error::Config("the turn's transaction was not returned".to_owned())
            })?;
            let settled = self.settle(&state, &mut turn, handled, operation, previous_attempts + 1);
            if savepoint {
                if matches!(settled.kind, SettledKind::Completed(_)) {
                    tx.release_savepoint().await?;
                } else {
                    tx.rollback_to_savepoint().await?;
                }
            }
            let max_attempts = A::MAX_ATTEMPTS.map_or(self.retry.max_attempts, i64::from);
            let progress = settled.progress(now, &self.retry, max_attempts);
            let finished = progress.status != StoredStatus::Ready;
            let message_id = match (fresh, stored_id) {
                (Some((arguments, request_id, idempotency_key)), _) => {
                    let new = NewMessage {
                        sequence,
                        operation,
                        arguments,
                        request_id,
                        idempotency_key,
                        created_at: now_us,
                        progress,
                    };
                    tx.insert_message(key, &new).await?
                }
                (None, Some(id)) => {
                    tx.update_message(id, &progress).await?;
                    id
                }
                (None, None) => unreachable!("a stored delivery carries its row id"),
            };
            let (next_sequence, unfinished) = match fresh {
                Some(_) => (
                    instance.next_sequence + 1,
                    instance.unfinished + i64::from(!finished),
                ),
                None => (
                    instance.next_sequence,
                    instance.unfinished - i64::from(finished),
                ),
            };
            let new_state = settled.writes.as_ref().map(|writes| writes.state.as_str());
            tx.write_instance(
                key,
                &InstanceWrite {
                    state: new_state,
                    revision: instance.revision + i64::from(new_state.is_some()),
                    next_sequence,
                    unfinished,
                    updated_at: now_us,
                },
            )
            .await?;
            if let Some(writes) = &settled.writes {
                self.apply_writes(&mut *tx, key, writes, now_us).await?;
            }
            tx.commit().await?;
            self.wake();
            let available_at = progress.available_at;
            let outcome = settled.into_outcome(available_at, finished);
            tracing::Span::current().record("outcome", outcome.label());
            Ok(TurnReport {
                message_id,
                outcome,
            })
        }
        .instrument(span)
        .await
    }

    /// Writes a completed turn's reminders, effects and messages. Runs after the actor's own
    /// row is written: a message the actor sends to itself counts on top of it.
    async fn apply_writes(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        writes: &Writes,
        now: i64,
    ) -> Result<()> {
        for change in &writes.reminders {
            match change {
                ReminderOp::Upsert {
                    name,
                    key: alarm,
                    due_at,
                    arguments,
                } => {
                    let write = ReminderWrite {
                        name,
                        key: alarm,
                        due_at: *due_at,
                        arguments,
                    };
                    tx.upsert_reminder(key, &write).await?;
                }
                ReminderOp::Delete { name, key: alarm } => {
                    tx.delete_reminder(key, name, alarm).await?;
                }
            }
        }
        for (name, payload) in &writes.effects {
            let effect_id = uuid::Uuid::new_v4().to_string();
            let effect = NewEffect {
                effect_id: &effect_id,
                name,
                payload,
                created_at: now,
            };
            tx.insert_effect(key, &effect).await?;
        }
        for send in &writes.sends {
            (send.register)(self)?;
            let target = ActorKey {
                actor_type: send.actor_type,
                actor_id: &send.actor_id,
            };
            append(tx, target, send.operation, &send.arguments, now).await?;
        }
        Ok(())
    }

    /// Turns what the handler produced into what the turn commits.
    fn settle<A: Actor>(
        &self,
        state: &A,
        turn: &mut Turn<A>,
        handled: Handled,
        operation: &str,
        attempts: i64,
    ) -> Settled {
        let kind = match handled {
            Handled::Value(result) => match self.completion(state, turn, &result, operation) {
                Ok(writes) => {
                    return Settled {
                        kind: SettledKind::Completed(result),
                        attempts,
                        writes: Some(writes),
                    };
                }
                Err(error) => SettledKind::Failed {
                    error: error.to_string(),
                    retryable: false,
                },
            },
            Handled::Rejected(rejection) => match to_json("rejection", &rejection) {
                Ok(json) => SettledKind::Rejected { rejection, json },
                Err(error) => SettledKind::Failed {
                    error: error.to_string(),
                    retryable: false,
                },
            },
            Handled::Failed { error, retryable } => SettledKind::Failed { error, retryable },
        };
        Settled {
            kind,
            attempts,
            writes: None,
        }
    }

    /// The state, reminder and message writes of a completed turn, within the limits.
    fn completion<A: Actor>(
        &self,
        state: &A,
        turn: &mut Turn<A>,
        result: &str,
        operation: &str,
    ) -> Result<Writes> {
        self.limits
            .check(Payload::Result, operation, result.len())?;
        let state = to_json("state", state)?;
        self.limits.check(Payload::State, operation, state.len())?;
        let mut changes = turn.take_reminders();
        let mut seen = HashSet::new();
        changes.reverse();
        changes.retain(|change| {
            let (name, key) = change.alarm();
            seen.insert((name, key.to_owned()))
        });
        changes.reverse();
        let reminders = changes
            .into_iter()
            .map(|change| match change {
                ReminderChange::Schedule { key, at, message } => {
                    let encoded = encode_operation(&message)?;
                    let arguments = to_json("reminder arguments", &encoded.arguments)?;
                    self.limits
                        .check(Payload::Arguments, encoded.name, arguments.len())?;
                    Ok(ReminderOp::Upsert {
                        name: encoded.name,
                        key,
                        due_at: micros(at),
                        arguments,
                    })
                }
                ReminderChange::Cancel { name, key } => Ok(ReminderOp::Delete { name, key }),
            })
            .collect::<Result<_>>()?;
        let sends = turn
            .take_outbox()
            .into_iter()
            .map(|outgoing| {
                validate_id(&outgoing.actor_id)?;
                let encoded = outgoing.message?;
                let arguments = to_json("arguments", &encoded.arguments)?;
                self.limits
                    .check(Payload::Arguments, encoded.name, arguments.len())?;
                Ok(SendOp {
                    actor_type: outgoing.actor_type,
                    actor_id: outgoing.actor_id,
                    operation: encoded.name,
                    arguments,
                    register: outgoing.register,
                })
            })
            .collect::<Result<_>>()?;
        let effects = turn
            .take_effects()
            .into_iter()
            .map(|effect| {
                let payload = effect.payload?;
                self.limits
                    .check(Payload::Arguments, effect.name, payload.len())?;
                Ok((effect.name, payload))
            })
            .collect::<Result<_>>()?;
        Ok(Writes {
            state,
            reminders,
            sends,
            effects,
        })
    }
}

impl Settled {
    /// The message row after this turn.
    fn progress(
        &self,
        now: DateTime<Utc>,
        retry: &RetryPolicy,
        max_attempts: i64,
    ) -> MessageProgress<'_> {
        let now_us = micros(now);
        let finished = |status, result, last_error| MessageProgress {
            status,
            attempts: self.attempts,
            available_at: now_us,
            result,
            last_error,
            finished_at: Some(now_us),
        };
        match &self.kind {
            SettledKind::Completed(result) => {
                finished(StoredStatus::Completed, Some(result.as_str()), None)
            }
            SettledKind::Rejected { json, .. } => {
                finished(StoredStatus::Rejected, Some(json.as_str()), None)
            }
            SettledKind::Failed { error, retryable } => {
                let retry_at = retryable
                    .then(|| retry.next_attempt_at(now, self.attempts, max_attempts))
                    .flatten();
                match retry_at {
                    Some(at) => MessageProgress {
                        last_error: Some(error),
                        ..MessageProgress::ready(self.attempts, micros(at))
                    },
                    None => finished(StoredStatus::Dead, None, Some(error)),
                }
            }
        }
    }

    fn into_outcome(self, available_at: i64, finished: bool) -> Outcome {
        match self.kind {
            SettledKind::Completed(result) => Outcome::Completed(result),
            SettledKind::Rejected { rejection, .. } => Outcome::Rejected(rejection),
            SettledKind::Failed { error, .. } => Outcome::Failed {
                error,
                attempts: self.attempts,
                retry_at: (!finished).then(|| from_micros(available_at)),
            },
        }
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
        }
    }
}
