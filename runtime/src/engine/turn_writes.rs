//! A completed turn's writes: its state, reminder changes, effects and messages to other
//! actors, encoded and checked against the limits before anything is written (never commit
//! what cannot be read back), then written in the turn's transaction.

use std::any::Any;
use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::micros;
use crate::actor::operation_codec::store_operation;
use crate::actor::reply::PendingEffect;
use crate::actor::reply::StoredReply;
use crate::actor::schedule::{Missed, ReminderChange};
use crate::actor::send::{Outgoing, Registrar};
use crate::actor::turn::Staged;
use crate::actor::Actor;
use crate::codec::store_and_read_back;
use crate::error::{Error, Result};
use crate::limits::{Limits, Payload};
use crate::store::{
    ActorKey, Doomed, Instance, InstanceWrite, MessageProgress, NewEffect, NewMessage,
    ReminderWrite, Transaction,
};
use crate::time::saturating::later;
use crate::trace_context::TraceContext;
use crate::validate::{validate_id, validate_key};

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
    register: fn(&dyn Registrar) -> Result<()>,
}

/// What a completed turn writes besides its message row.
pub(super) struct Writes {
    state: String,
    /// The state read back from `state`: what decoding it gives the actor's next turn.
    read_back: Box<dyn Any + Send + Sync>,
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
pub(super) struct Completed<'s, A: Actor> {
    pub(super) state: &'s A,
    pub(super) staged: Staged<A>,
    pub(super) now: DateTime<Utc>,
}

impl Writes {
    /// The state, reminder and message writes of a completed turn, within the limits and
    /// readable back.
    pub(super) fn of<A: Actor>(
        limits: &Limits,
        completed: Completed<'_, A>,
        result: &str,
        operation: &str,
    ) -> Result<Self> {
        let Completed { state, staged, now } = completed;
        let destroy = staged.destroy;
        limits.check(Payload::Result, operation, result.len())?;
        let (state, read_back) = store_and_read_back("state", operation, state)?;
        limits.check(Payload::State, operation, state.len())?;
        Ok(Self {
            state,
            read_back: Box::new(read_back),
            reminders: reminder_ops::<A>(limits, staged.reminders)?,
            sends: send_ops(limits, staged.outbox, now)?,
            effects: effect_ops(limits, staged.effects)?,
            destroy,
        })
    }

    /// The state text the turn wrote and the state read back from it (an `A`), or `None`
    /// when it destroyed its actor.
    pub(super) fn into_state(self) -> Option<(String, Box<dyn Any + Send + Sync>)> {
        (!self.destroy).then_some((self.state, self.read_back))
    }

    /// The actor's new row, written with the turn's message row; `None` when the turn
    /// destroys its actor.
    pub(super) fn state_write(
        &self,
        instance: &Instance,
        state_version: i64,
        now: i64,
    ) -> Option<InstanceWrite<'_>> {
        (!self.destroy).then(|| InstanceWrite {
            state: &self.state,
            revision: instance.revision + 1,
            state_version,
            updated_at: now,
        })
    }

    /// Writes the rest of the turn in `tx`, after its message row and state: the
    /// destruction of the actor or its reminder changes, then its effects and messages,
    /// none of which takes another actor's lock, each with the turn's `trace` context;
    /// returns the actor type and operation of each message delivered.
    pub(super) async fn write(
        &self,
        registrar: &dyn Registrar,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        instance: &Instance,
        now: i64,
        trace: TraceContext,
    ) -> Result<Vec<(&'static str, &'static str)>> {
        let incarnation = instance.incarnation;
        if self.destroy {
            tx.destroy_actor(key, now).await?;
        } else {
            write_reminders(tx, key, &self.reminders, incarnation, now, trace).await?;
        }
        self.write_effects(tx, key, now, incarnation, trace).await?;
        self.write_sends(registrar, tx, now, trace).await
    }

    /// Writes a completed turn's effects, of the actor's `incarnation` and with the turn's
    /// trace context.
    async fn write_effects(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        now: i64,
        incarnation: i64,
        trace: TraceContext,
    ) -> Result<()> {
        for effect in &self.effects {
            let effect = NewEffect {
                effect_id: &effect.effect_id,
                name: effect.name,
                payload: &effect.payload,
                created_at: now,
                incarnation,
                on_success: effect.on_success.as_deref(),
                on_failure: effect.on_failure.as_deref(),
                trace,
            };
            tx.insert_effect(key, &effect).await?;
        }
        Ok(())
    }

    /// Writes a completed turn's messages to other actors, none of which takes another
    /// actor's lock, with the turn's `trace` context; returns the actor type and operation of
    /// each message delivered.
    async fn write_sends(
        &self,
        registrar: &dyn Registrar,
        tx: &mut dyn Transaction,
        now: i64,
        trace: TraceContext,
    ) -> Result<Vec<(&'static str, &'static str)>> {
        let mut delivered = Vec::new();
        for send in &self.sends {
            (send.register)(registrar)?;
            let target = ActorKey {
                actor_type: send.actor_type,
                actor_id: &send.actor_id,
            };
            let request_id = crate::ids::new_request_id();
            let message = NewMessage {
                operation: send.operation,
                arguments: &send.arguments,
                request_id: &request_id,
                idempotency_key: send.idempotency_key.as_deref(),
                created_at: now,
                progress: MessageProgress::ready(0, send.available_at),
                incarnation: None,
                scheduled_for: None,
                trace,
            };
            // A key already used for this target delivers nothing more.
            if tx.insert_message_once(target, &message).await?.is_some() {
                delivered.push((send.actor_type, send.operation));
            }
        }
        Ok(delivered)
    }
}

/// Writes a completed turn's reminder changes, in the incarnation it ran in, at `now`
/// (microseconds), with its trace context.
async fn write_reminders(
    tx: &mut dyn Transaction,
    key: ActorKey<'_, '_>,
    reminders: &[ReminderOp],
    incarnation: i64,
    now: i64,
    trace: TraceContext,
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
                    trace,
                };
                tx.upsert_reminder(key, &write).await?;
            }
            ReminderOp::Delete { name, key: alarm } => {
                let doomed = Doomed::Named {
                    name,
                    key: alarm.as_deref(),
                };
                tx.delete_reminders(key, doomed, now).await?;
            }
        }
    }
    Ok(())
}

/// A turn's staged reminder changes, encoded and checked: the last change of each reminder
/// (by name and key) wins.
fn reminder_ops<A: Actor>(
    limits: &Limits,
    mut changes: Vec<ReminderChange<A::Message>>,
) -> Result<Vec<ReminderOp>> {
    let mut seen = HashSet::new();
    changes.reverse();
    changes.retain(|change| {
        let (name, key) = change.alarm();
        seen.insert((name, key.map(str::to_owned)))
    });
    changes.reverse();
    changes
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
        .collect()
}

/// A turn's messages to other actors, encoded and checked, each due when its options say.
fn send_ops(limits: &Limits, outbox: Vec<Outgoing>, now: DateTime<Utc>) -> Result<Vec<SendOp>> {
    outbox
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
        .collect()
}

/// A turn's effects, encoded and checked, with room for a failure reply that carries one back.
fn effect_ops(limits: &Limits, effects: Vec<PendingEffect>) -> Result<Vec<EffectOp>> {
    effects
        .into_iter()
        .map(|effect| {
            let payload = effect.payload?;
            limits.check(Payload::Arguments, effect.name, payload.len())?;
            // A failure reply carries the effect back: it must fit the limit too.
            let room = crate::actor::effect::FAILURE_REPLY_ROOM;
            if effect.on_failure.is_some() && payload.len() + room > limits.max_arguments_bytes {
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
        .collect()
}
