//! Running one turn, from the head of the mailbox (or a fresh synchronous call) to the
//! commit.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::failures::failed_progress;
use super::{from_micros, micros, Engine, Lock, Outcome, Step, TurnReport};
use crate::actor::handled::Handled;
use crate::actor::operation_codec::{decode_operation, store_operation};
use crate::actor::reply::StoredReply;
use crate::actor::turn::{Missed, ReminderChange, Staged, Turn, TurnFacts};
use crate::actor::{Actor, Operations};
use crate::codec::{store_value, to_json};
use crate::error::{Error, Rejection, Result};
use crate::limits::{deadline_after, Payload};
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageProgress, NewEffect, NewMessage, ReminderWrite,
    StoredMessage, StoredStatus, Transaction,
};
use crate::time::saturating::later;
use crate::validate::{validate_id, validate_key};

/// How many times in a row a turn that conflicts with other transactions runs again at once
/// before its attempt is counted as failed.
const CONFLICT_RETRIES: u32 = 8;

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
    Stored { head: &'a StoredMessage, message: M },
}

/// Why a turn committed nothing.
#[derive(Debug)]
pub(super) enum Uncommitted {
    /// Another transaction got in the way (a deadlock, a key taken at the same moment, a
    /// stale read): run the turn again, nothing counted.
    Conflict(String),
    /// The caller's deadline passed while the handler ran: abandoned, nothing counted; a
    /// stored message stays for later.
    Abandoned,
    /// The turn failed: an attempt to count, and whether another may succeed.
    Failed { error: String, retryable: bool },
    /// The turn joined a group commit and ran past the group's budget: undone so the
    /// earlier members could commit, nothing counted; it runs again outside any group.
    OverBudget,
    /// Its group commit ended in doubt (another member ended the transaction itself, or the
    /// `COMMIT` failed and the connection was closed): the turn was kept or not, and no later
    /// commit can change which. Read back, then counted as nothing or run again.
    InDoubt,
}

impl From<Error> for Uncommitted {
    fn from(error: Error) -> Self {
        if let Error::GroupCommitFailed { .. } = error {
            Self::InDoubt
        } else if error.is_conflict() {
            Self::Conflict(error.to_string())
        } else {
            Self::Failed {
                error: error.to_string(),
                retryable: true,
            }
        }
    }
}

/// A staged reminder change, encoded for the store.
enum ReminderOp {
    Upsert {
        name: &'static str,
        key: String,
        due_at: i64,
        arguments: String,
        /// For a recurring reminder: its interval in microseconds, and missed occurrences.
        every: Option<(i64, Missed)>,
    },
    Delete {
        name: &'static str,
        /// `None`: every key.
        key: Option<String>,
    },
}

/// A message to another actor, encoded for the store.
struct SendOp {
    actor_type: &'static str,
    actor_id: String,
    operation: &'static str,
    arguments: String,
    /// Microseconds; 0 for "now, whatever the clock says later".
    available_at: i64,
    idempotency_key: Option<String>,
    register: fn(&Engine) -> Result<()>,
}

/// What a completed turn writes besides its message row.
struct Writes {
    state: String,
    reminders: Vec<ReminderOp>,
    sends: Vec<SendOp>,
    effects: Vec<EffectOp>,
    /// Whether the turn destroys its actor (its state and reminders are then not written).
    destroy: bool,
}

/// An effect to insert: its kind, payload, and the stored replies to its outcome.
struct EffectOp {
    effect_id: String,
    name: &'static str,
    payload: String,
    on_success: Option<String>,
    on_failure: Option<String>,
}

/// What a handler left when it returned a value: its state and what it staged.
struct Completed<'s, A: Actor> {
    state: &'s A,
    staged: Staged<A>,
    destroy: bool,
    now: DateTime<Utc>,
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
    /// Runs the actor's next ready message, if one is due, taking its lock as `lock` says.
    /// A turn that conflicts with other transactions runs again; a failure anywhere in the
    /// turn is counted as an attempt on its message.
    pub(crate) async fn run_next<A: Actor>(&self, actor_id: &str, lock: Lock) -> Result<Step> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let mut conflicts = 0;
        let mut alone = false;
        loop {
            let attempt = self.step::<A>(key, lock, alone).await;
            match attempt {
                Ok(Attempted::Done(step)) => return Ok(step),
                Ok(Attempted::OverBudget) => alone = true,
                Ok(Attempted::InDoubt) => {
                    if lock.deadline().is_some_and(|at| Instant::now() >= at) {
                        return Ok(Step::Busy);
                    }
                }
                Ok(Attempted::Conflict { head, why }) => {
                    conflicts += 1;
                    let past_deadline = lock.deadline().is_some_and(|at| Instant::now() >= at);
                    if conflicts >= CONFLICT_RETRIES || past_deadline {
                        let error =
                            format!("the turn kept conflicting with other transactions: {why}");
                        return self.count_failure::<A>(key, &head, &error, true).await;
                    }
                    tracing::debug!(actor_id, conflicts, %why, "a turn conflicted; running it again");
                    conflict_pause(conflicts).await;
                }
                Err(error) if error.is_busy() => return Ok(Step::Busy),
                Err(error) => return Err(error),
            }
        }
    }

    /// One try at the actor's next message.
    async fn step<A: Actor>(
        &self,
        key: ActorKey<'static, '_>,
        lock: Lock,
        alone: bool,
    ) -> Result<Attempted> {
        let mut tx = self.begin_turn(lock.deadline(), alone).await?;
        let Some(locked) = tx.lock_actor(key, lock.waits(), micros(self.now())).await? else {
            // On PostgreSQL the skipped actor's row may have just been created.
            Self::release(tx).await;
            return Ok(Attempted::Done(Step::Busy));
        };
        if locked.instance.paused {
            // Paused after a worker listed it: workers leave it; a waiting caller hears why.
            Self::release(tx).await;
            return match lock {
                Lock::Skip => Ok(Attempted::Done(Step::Busy)),
                Lock::WaitUntil(_) => Err(super::call::paused(key)),
            };
        }
        let Some(head) = locked.head else {
            Self::release(tx).await;
            return Ok(Attempted::Done(Step::Idle));
        };
        if head.available_at > micros(self.now()) {
            Self::release(tx).await;
            return Ok(Attempted::Done(Step::Blocked {
                message_id: head.id,
                until: from_micros(head.available_at),
                attempts: head.attempts,
            }));
        }
        if head
            .incarnation
            .is_some_and(|incarnation| incarnation != locked.instance.incarnation)
        {
            // A reminder of an earlier incarnation fired after its actor was destroyed.
            let ended = MessageProgress {
                status: StoredStatus::Destroyed,
                finished_at: Some(micros(self.now())),
                ..MessageProgress::ready(head.attempts, head.available_at)
            };
            if tx.update_message(head.id, head.attempts, &ended).await? {
                tx.commit().await?;
            } else {
                Self::release(tx).await;
            }
            return Ok(Attempted::Done(Step::Ran(TurnReport {
                message_id: head.id,
                outcome: Outcome::Destroyed,
            })));
        }
        let message = decode_operation::<A::Message>(
            key.actor_type,
            key.actor_id,
            &head.operation,
            &head.arguments,
            head.id,
        );
        let message = match message {
            Ok(message) => message,
            Err(error @ Error::UnknownOperation { .. }) => {
                Self::release(tx).await;
                self.note_waiting(head.id, &error).await?;
                return Err(error);
            }
            // Arguments that do not decode never will: a dead letter at once.
            Err(error) => {
                Self::release(tx).await;
                let step = self
                    .count_failure::<A>(key, &head, &error.to_string(), false)
                    .await?;
                return Ok(Attempted::Done(step));
            }
        };
        let state = match self.decode_state::<A>(key, &locked.instance) {
            Ok(state) => state,
            // A state this build cannot read yet (a newer build wrote it, or no migration
            // starts from its version) waits, uncounted, for a build that can.
            Err(error @ (Error::StateFromNewerBuild { .. } | Error::NoMigration { .. })) => {
                Self::release(tx).await;
                self.note_waiting(head.id, &error).await?;
                return Err(error);
            }
            Err(error) => {
                Self::release(tx).await;
                let step = self
                    .count_failure::<A>(key, &head, &error.to_string(), true)
                    .await?;
                return Ok(Attempted::Done(step));
            }
        };
        let delivery = Delivery::Stored {
            head: &head,
            message,
        };
        let ran = self
            .run_turn::<A>(tx, key, &locked.instance, state, delivery, lock.deadline())
            .await;
        let step = match ran {
            Ok(report) => Step::Ran(report),
            Err(Uncommitted::Conflict(why)) => return Ok(Attempted::Conflict { head, why }),
            Err(Uncommitted::OverBudget) => return Ok(Attempted::OverBudget),
            // The message's row says whether the turn was kept: the next try reads it.
            Err(Uncommitted::InDoubt) => return Ok(Attempted::InDoubt),
            Err(Uncommitted::Abandoned) => Step::Busy,
            Err(Uncommitted::Failed { error, retryable }) => {
                self.count_failure::<A>(key, &head, &error, retryable)
                    .await?
            }
        };
        Ok(Attempted::Done(step))
    }

    /// Decodes the actor's stored state (the default state if it has none).
    pub(crate) fn decode_state<A: Actor>(
        &self,
        key: ActorKey<'static, '_>,
        instance: &Instance,
    ) -> Result<A> {
        match &instance.state {
            Some(json) => {
                crate::actor::migration::to_current(key.actor_id, instance.state_version, json)
            }
            // `Default` is user code too.
            None => std::panic::catch_unwind(A::default).map_err(|panic| Error::Panicked {
                during: format!("making the default state of {}", key.actor_type),
                message: crate::codec::panic_text(&*panic).to_owned(),
            }),
        }
    }

    /// Runs one turn in `tx` on `state` and commits it. The handler runs until the turn
    /// timeout (its attempt then counts as failed) or the caller's deadline (then nothing
    /// counts), whichever comes first.
    pub(super) async fn run_turn<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: &Instance,
        mut state: A,
        delivery: Delivery<'_, A::Message>,
        caller_deadline: Option<Instant>,
    ) -> Result<TurnReport, Uncommitted> {
        let scheduled_at = match &delivery {
            Delivery::Stored { head, .. } => head.scheduled_for.map(from_micros),
            Delivery::Fresh { .. } => None,
        };
        let (message, message_id, previous_attempts, fresh) = match delivery {
            Delivery::Fresh {
                message,
                arguments,
                request_id,
                idempotency_key,
            } => (
                message,
                None,
                0,
                Some((arguments, request_id, idempotency_key)),
            ),
            Delivery::Stored { head, message } => (message, Some(head.id), head.attempts, None),
        };
        let operation = message.name();
        // OpenTelemetry's messaging conventions: the actor type is the destination.
        let span = tracing::info_span!(
            "turn",
            messaging.system = "solid_objects",
            messaging.operation.type = "process",
            messaging.destination.name = key.actor_type,
            messaging.operation.name = operation,
            messaging.message.id = message_id,
            actor_id = key.actor_id,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let ran = async move {
            let now = self.now();
            let now_us = micros(now);
            let attempts = previous_attempts + 1;
            let attempt = u32::try_from(attempts).unwrap_or(u32::MAX);
            let mut turn = Turn::<A>::new(TurnFacts {
                actor_id: key.actor_id,
                now,
                message_id,
                attempt,
                incarnation: instance.incarnation,
                scheduled_at,
            });
            let budget = tx.group_budget();
            turn.attach(tx);
            let turn_deadline = deadline_after(self.config.turn_timeout);
            let own_deadline = caller_deadline.map_or(turn_deadline, |at| at.min(turn_deadline));
            let handler_deadline = budget.map_or(own_deadline, |at| at.min(own_deadline));
            let handling = crate::actor::handler_scope::as_handler(
                key.actor_type,
                key.actor_id,
                AssertUnwindSafe(state.handle(&mut turn, message)).catch_unwind(),
            );
            let handled = match tokio::time::timeout_at(handler_deadline, handling).await {
                Ok(Ok(handled)) => handled,
                Ok(Err(panic)) => Handled::panicked(&*panic),
                Err(_) if handler_deadline < own_deadline => {
                    // Over its group's budget: undone to its savepoint (after any statement
                    // its handler left running), so the earlier members commit now.
                    if let Some((tx, _)) = turn.detach() {
                        Self::release(tx).await;
                    }
                    return Err(Uncommitted::OverBudget);
                }
                Err(_) => {
                    // The handler future is gone, maybe in the middle of its own SQL: the
                    // transaction's connection is closed, not reused.
                    turn.poison();
                    if handler_deadline < turn_deadline {
                        return Err(Uncommitted::Abandoned);
                    }
                    let error = Error::TurnTimeout {
                        actor_type: key.actor_type,
                        actor_id: key.actor_id.to_owned(),
                        operation,
                        timeout: self.config.turn_timeout,
                    };
                    return Err(Uncommitted::Failed {
                        error: error.to_string(),
                        retryable: true,
                    });
                }
            };
            let staged = turn.close_staging();
            let destroy = turn.destroy_requested();
            let (mut tx, savepoint) = turn.detach().ok_or_else(|| Uncommitted::Failed {
                error: "the turn's transaction was not returned".to_owned(),
                retryable: true,
            })?;
            if let Handled::Transient(why) = handled {
                Self::release(tx).await;
                return Err(Uncommitted::Conflict(why));
            }
            let completed = Completed {
                state: &state,
                staged,
                destroy,
                now,
            };
            let settled = self.settle(completed, handled, operation, attempts);
            if savepoint {
                if matches!(settled.kind, SettledKind::Completed(_)) {
                    tx.release_savepoint().await?;
                } else {
                    tx.rollback_to_savepoint().await?;
                }
            }
            let max_attempts = self.max_attempts::<A>();
            let progress = settled.progress(now, &self.config.retry, max_attempts);
            let finished = progress.status != StoredStatus::Ready;
            let message_id = match (fresh, message_id) {
                (Some((arguments, request_id, idempotency_key)), _) => {
                    let new = NewMessage {
                        operation,
                        arguments,
                        request_id,
                        idempotency_key,
                        created_at: now_us,
                        progress,
                        incarnation: None,
                        scheduled_for: None,
                    };
                    tx.insert_message(key, &new).await?
                }
                (None, Some(id)) => {
                    if !tx.update_message(id, previous_attempts, &progress).await? {
                        Self::release(tx).await;
                        return Err(Uncommitted::Conflict(format!(
                            "message {id} was run by another turn meanwhile"
                        )));
                    }
                    id
                }
                (None, None) => unreachable!("a stored delivery carries its message id"),
            };
            let mut delivered = Vec::new();
            if let Some(writes) = &settled.writes {
                if writes.destroy {
                    tx.destroy_actor(key, now_us).await?;
                } else {
                    let write = InstanceWrite {
                        state: &writes.state,
                        revision: instance.revision + 1,
                        state_version: i64::from(A::VERSION),
                        updated_at: now_us,
                    };
                    tx.write_instance(key, &write).await?;
                    self.apply_reminders(&mut *tx, key, &writes.reminders, instance.incarnation)
                        .await?;
                }
                delivered = self
                    .apply_writes(&mut *tx, key, writes, now_us, instance.incarnation)
                    .await?;
            }
            tx.commit().await?;
            self.wake();
            if settled.writes.is_some() {
                self.state_committed(key);
            }
            let available_at = progress.available_at;
            let outcome = settled.into_outcome(available_at, finished);
            tracing::Span::current().record("outcome", outcome.label());
            if fresh.is_some() {
                crate::metrics::enqueued(key.actor_type, operation, 1);
            }
            outcome.record(key.actor_type, operation);
            for (actor_type, operation) in delivered {
                crate::metrics::enqueued(actor_type, operation, 1);
            }
            Ok(TurnReport {
                message_id,
                outcome,
            })
        }
        .instrument(span)
        .await;
        crate::metrics::turn_duration(key.actor_type, operation, started.elapsed());
        ran
    }

    /// The attempts an actor's failing message gets before it becomes a dead letter.
    pub(super) fn max_attempts<A: Actor>(&self) -> i64 {
        A::MAX_ATTEMPTS.map_or(self.config.retry.max_attempts, i64::from)
    }

    /// Writes a completed turn's reminder changes, in the incarnation it ran in.
    async fn apply_reminders(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        reminders: &[ReminderOp],
        incarnation: i64,
    ) -> Result<()> {
        for change in reminders {
            match change {
                ReminderOp::Upsert {
                    name,
                    key: alarm,
                    due_at,
                    arguments,
                    every,
                } => {
                    let write = ReminderWrite {
                        name,
                        key: alarm,
                        due_at: *due_at,
                        arguments,
                        incarnation,
                        every: every.map(|(interval, _)| interval),
                        missed: every.map(|(_, missed)| missed.as_str()),
                    };
                    tx.upsert_reminder(key, &write).await?;
                }
                ReminderOp::Delete { name, key: alarm } => {
                    tx.delete_reminder(key, name, alarm.as_deref()).await?;
                }
            }
        }
        Ok(())
    }

    /// Writes a completed turn's effects and messages, none of which takes another actor's
    /// lock; returns the actor type and operation of each message delivered.
    async fn apply_writes(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        writes: &Writes,
        now: i64,
        incarnation: i64,
    ) -> Result<Vec<(&'static str, &'static str)>> {
        let mut delivered = Vec::new();
        for effect in &writes.effects {
            let effect = NewEffect {
                effect_id: &effect.effect_id,
                name: effect.name,
                payload: &effect.payload,
                created_at: now,
                incarnation,
                on_success: effect.on_success.as_deref(),
                on_failure: effect.on_failure.as_deref(),
            };
            tx.insert_effect(key, &effect).await?;
        }
        for send in &writes.sends {
            (send.register)(self)?;
            let target = ActorKey {
                actor_type: send.actor_type,
                actor_id: &send.actor_id,
            };
            let request_id = crate::engine::new_request_id();
            let message = NewMessage {
                operation: send.operation,
                arguments: &send.arguments,
                request_id: &request_id,
                idempotency_key: send.idempotency_key.as_deref(),
                created_at: now,
                progress: MessageProgress::ready(0, send.available_at),
                incarnation: None,
                scheduled_for: None,
            };
            // A key already used for this target delivers nothing more.
            if tx.insert_message_once(target, &message).await?.is_some() {
                delivered.push((send.actor_type, send.operation));
            }
        }
        Ok(delivered)
    }

    /// Turns what the handler produced into what the turn commits.
    fn settle<A: Actor>(
        &self,
        completed: Completed<'_, A>,
        handled: Handled,
        operation: &str,
        attempts: i64,
    ) -> Settled {
        let kind = match handled {
            Handled::Value(result) => match self.completion(completed, &result, operation) {
                Ok(writes) => {
                    return Settled {
                        kind: SettledKind::Completed(result),
                        attempts,
                        writes: Some(writes),
                    };
                }
                // What the turn would commit cannot be stored and read back: the same
                // message on the same state does the same again, unless user code panicked.
                Err(error) => SettledKind::Failed {
                    retryable: matches!(error, Error::Panicked { .. }),
                    error: error.to_string(),
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
            Handled::Transient(error) => SettledKind::Failed {
                error,
                retryable: true,
            },
        };
        Settled {
            kind,
            attempts,
            writes: None,
        }
    }

    /// The state, reminder and message writes of a completed turn, within the limits and
    /// readable back.
    fn completion<A: Actor>(
        &self,
        completed: Completed<'_, A>,
        result: &str,
        operation: &str,
    ) -> Result<Writes> {
        let Completed {
            state,
            staged,
            destroy,
            now,
        } = completed;
        let limits = &self.config.limits;
        limits.check(Payload::Result, operation, result.len())?;
        let state = store_value("state", operation, state)?;
        limits.check(Payload::State, operation, state.len())?;
        let mut changes = staged.reminders;
        let mut seen = HashSet::new();
        changes.reverse();
        changes.retain(|change| {
            let (name, key) = change.alarm();
            seen.insert((name, key.map(str::to_owned)))
        });
        changes.reverse();
        let reminders = changes
            .into_iter()
            .map(|change| match change {
                ReminderChange::Schedule {
                    key,
                    at,
                    message,
                    every,
                } => {
                    validate_key("reminder key", &key)?;
                    let (stored, _) = store_operation(&message)?;
                    limits.check(Payload::Arguments, stored.name, stored.arguments.len())?;
                    let every = every.map(|(interval, missed)| {
                        let micros = i64::try_from(interval.as_micros()).unwrap_or(i64::MAX);
                        (micros.max(1), missed)
                    });
                    Ok(ReminderOp::Upsert {
                        name: stored.name,
                        key,
                        due_at: micros(at),
                        arguments: stored.arguments,
                        every,
                    })
                }
                ReminderChange::Cancel { name, key } => {
                    if let Some(key) = &key {
                        validate_key("reminder key", key)?;
                    }
                    Ok(ReminderOp::Delete { name, key })
                }
            })
            .collect::<Result<_>>()?;
        let sends = staged
            .outbox
            .into_iter()
            .map(|outgoing| {
                validate_id(&outgoing.actor_id)?;
                let stored = outgoing.message?;
                limits.check(Payload::Arguments, stored.name, stored.arguments.len())?;
                let options = outgoing.options;
                if let Some(key) = &options.idempotency_key {
                    validate_key("idempotency key", key)?;
                }
                let at = match (options.available_at, options.delay) {
                    (Some(at), _) => Some(at),
                    (None, Some(delay)) => Some(later(now, delay)),
                    (None, None) => None,
                };
                Ok(SendOp {
                    actor_type: outgoing.actor_type,
                    actor_id: outgoing.actor_id,
                    operation: stored.name,
                    arguments: stored.arguments,
                    available_at: at.filter(|at| *at > now).map_or(0, micros),
                    idempotency_key: options.idempotency_key,
                    register: outgoing.register,
                })
            })
            .collect::<Result<_>>()?;
        let effects = staged
            .effects
            .into_iter()
            .map(|effect| {
                let payload = effect.payload?;
                limits.check(Payload::Arguments, effect.name, payload.len())?;
                // A failure reply carries the effect back: it must fit the limit too.
                let room = crate::actor::effect::FAILURE_REPLY_ROOM;
                if effect.on_failure.is_some() && payload.len() + room > limits.max_arguments_bytes
                {
                    return Err(Error::PayloadTooLarge {
                        what: "effect (whose failure reply carries it back, in 512 bytes more)",
                        operation: effect.name.to_owned(),
                        size: payload.len(),
                        limit: limits.max_arguments_bytes.saturating_sub(room),
                    });
                }
                Ok(EffectOp {
                    effect_id: effect.effect_id,
                    name: effect.name,
                    payload,
                    on_success: effect
                        .on_success
                        .as_ref()
                        .map(StoredReply::to_stored)
                        .transpose()?,
                    on_failure: effect
                        .on_failure
                        .as_ref()
                        .map(StoredReply::to_stored)
                        .transpose()?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Writes {
            state,
            reminders,
            sends,
            effects,
            destroy,
        })
    }
}

/// One try at an actor's next message.
enum Attempted {
    /// It ended (ran, was counted, or there was nothing to run).
    Done(Step),
    /// It conflicted with another transaction: try again.
    Conflict { head: StoredMessage, why: String },
    /// It ran past its group commit's budget: try again outside any group.
    OverBudget,
    /// Its group commit ended in doubt: the next try reads whether it was kept (it waits
    /// for the writer, which the group holds until it ends, or joins that same group).
    InDoubt,
}

/// A short, growing pause before a conflicting turn runs again, so two turns that keep
/// deadlocking each other fall out of step.
async fn conflict_pause(conflicts: u32) {
    let base = 1_u64 << conflicts.min(6);
    let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % base.max(1);
    tokio::time::sleep(std::time::Duration::from_millis(base + jitter)).await;
}

impl Settled {
    /// The message row after this turn.
    fn progress(
        &self,
        now: DateTime<Utc>,
        retry: &crate::limits::RetryPolicy,
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
                failed_progress(now, self.attempts, max_attempts, *retryable, error, retry)
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
