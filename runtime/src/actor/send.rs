//! Messages a turn sends to other actors: [`Outgoing`], the builder that stages one
//! (`turn.send::<B>(id)`), and the [`Registrar`] a send's target type is made known to.
//!
//! A turn may send to an actor type its runtime was never told of; the runtime that commits
//! the send learns of it then, so its workers run the message. The registration is the
//! target's own (`Actor::register`, which `#[actor]` generates), and reaches the runtime
//! through [`Registrar`], which the engine implements: this layer names no engine.

use std::any::Any;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};

use crate::actor::operation_codec::{store_operation, StoredOperation};
use crate::actor::staging::Staging;
use crate::actor::Actor;
use crate::error::Result;
use crate::time::clock::IntoDuration;

/// A message a turn sends to an actor, encoded when staged.
pub(crate) struct Outgoing {
    pub(crate) actor_type: &'static str,
    pub(crate) actor_id: String,
    pub(crate) message: Result<StoredOperation>,
    pub(crate) options: SendOptions,
    /// Makes the target's type known to the runtime that commits the send, so its workers
    /// can run the message.
    pub(crate) register: fn(&dyn Registrar) -> Result<()>,
}

/// A runtime that learns of the actor types its turns send to: implemented by the engine,
/// which an actor type's registration (`Actor::register`) finds behind it.
#[doc(hidden)]
pub trait Registrar: Send + Sync {
    /// The runtime itself, for a registration to find its own type in.
    fn runtime(&self) -> &dyn Any;
}

/// When a sent message may run, and the key that makes it arrive once.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendOptions {
    pub(crate) available_at: Option<DateTime<Utc>>,
    pub(crate) delay: Option<std::time::Duration>,
    pub(crate) idempotency_key: Option<String>,
}

/// A message to another actor in the making; the generated sender names the command.
#[doc(hidden)]
pub struct SendStage<B: Actor> {
    outbox: Staging<Outgoing>,
    actor_id: String,
    options: SendOptions,
    target: PhantomData<fn() -> B>,
}

impl<B: Actor> SendStage<B> {
    /// A message to the actor `actor_id`, staged in `outbox`.
    pub(crate) fn new(outbox: Staging<Outgoing>, actor_id: String) -> Self {
        Self {
            outbox,
            actor_id,
            options: SendOptions::default(),
            target: PhantomData,
        }
    }

    /// Not run before `delay` after the sending turn's time.
    pub fn delay(mut self, delay: impl IntoDuration) -> Self {
        self.options.delay = Some(delay.into_duration());
        self
    }

    /// Not run before `at`.
    pub fn available_at(mut self, at: DateTime<Utc>) -> Self {
        self.options.available_at = Some(at);
        self
    }

    /// At most one message per target and key: a turn that runs again (a duplicate
    /// delivery, say) and sends under the same key delivers once.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.options.idempotency_key = Some(key.into());
        self
    }

    /// Stages the message.
    pub fn stage(self, message: B::Message) {
        self.outbox.push(Outgoing {
            actor_type: B::TYPE_NAME,
            actor_id: self.actor_id,
            message: store_operation(&message).map(|(stored, _)| stored),
            options: self.options,
            register: B::register,
        });
    }
}
