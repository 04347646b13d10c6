//! The traits `#[actor]` implements: what the runtime knows about an actor type.
//!
//! Users do not implement these by hand; the macros generate them from the struct and its
//! `#[actor]` impl block. They are public so that generic code can name them
//! (`fn audit<A: Actor>(reference: &Reference<A>)`).
//!
//! The files of this folder are the contract the macros implement and handlers use: they
//! import from the store and the leaves, never from the engine or the client. The typed
//! reference is named by a client-side trait ([`Addressable`](crate::Addressable)), and a
//! send's target type reaches the runtime through [`Registrar`], which the engine implements.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) mod effect;
pub(crate) mod failure;
pub(crate) mod handled;
pub(crate) mod handler_scope;
pub mod migration;
pub(crate) mod operation_codec;
pub(crate) mod reminder;
pub(crate) mod reply;
pub(crate) mod schedule;
pub(crate) mod send;
pub(crate) mod staging;
pub(crate) mod stored_field;
pub(crate) mod turn;

use crate::actor::effect::Effect;
use crate::actor::handled::Handled;
use crate::actor::reply::ReplyStage;
use crate::actor::schedule::{ScheduleStage, UnscheduleStage};
use crate::actor::send::{Registrar, SendStage};
use crate::actor::turn::{ReminderLookup, Turn};

/// The durable state of an actor: the struct that carries `#[actor]`.
///
/// `#[actor]` on the struct derives serde for it (with `#[serde(default)]`, so state stored
/// before a field was added still loads) and implements this trait, whose
/// [`initial`](ActorState::initial) state is the struct's `Default`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an actor's state",
    label = "this type needs `#[actor]` on its struct",
    note = "put `#[actor]` on the struct and `#[derive(Default)]` beside it"
)]
pub trait ActorState: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The name stored in every row of this actor: `#[actor(name = "...")]`, or the struct's
    /// name. Renaming the struct without setting it orphans the stored rows.
    const TYPE_NAME: &'static str;

    /// Attempts before a failing message of this actor becomes a dead letter:
    /// `#[actor(max_attempts = 3)]`, or `None` for the runtime's [`RetryPolicy`](crate::RetryPolicy).
    const MAX_ATTEMPTS: Option<u32> = None;

    /// The version of the state's shape: `#[actor(version = 3)]`, or 1. A stored state of
    /// an older version goes through the actor's `#[migrate(from = n)]` functions when it is
    /// read; one of a newer version is left alone (a newer build wrote it).
    const VERSION: u32 = 1;

    /// The kinds of effect ([`Effect::NAME`](crate::Effect::NAME)) this actor emits:
    /// `#[actor(effects(ChargeCard, SendReceipt))]`, or none declared. A runtime that runs
    /// effects (it has a [`Builder::effect`](crate::Builder::effect) handler) refuses to
    /// start without a handler for each kind its actors declare.
    const EFFECTS: &'static [&'static str] = &[];

    /// The state a new actor starts from, and the fields a stored state lacks are taken
    /// from: the struct's `Default`.
    fn initial() -> Self;
}

/// A set of operations (the commands and reminders of an actor, or its queries), in the
/// serde form `{"operation": "hold", "arguments": {"hold_id": .., ..}}`.
pub trait Operations: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The operation names, as stored.
    const NAMES: &'static [&'static str];

    /// The names of the operations that are reminders: only the actor's own schedule runs
    /// them, never a caller.
    const REMINDERS: &'static [&'static str] = &[];

    /// The names of the operations that are effect replies (`#[reply]`): only the runtime
    /// delivers them, with an effect's outcome, never a caller.
    const REPLIES: &'static [&'static str] = &[];

    /// This operation's name, as stored.
    fn name(&self) -> &'static str;

    /// Whether this operation is a reminder.
    fn is_reminder(&self) -> bool {
        Self::REMINDERS.contains(&self.name())
    }

    /// Whether this operation is an effect reply.
    fn is_reply(&self) -> bool {
        Self::REPLIES.contains(&self.name())
    }
}

/// An actor type: its state, operations, dispatch, typed reference and schedule builders.
///
/// Implemented by `#[actor]` on the impl block.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an actor",
    label = "this type has no `#[actor]` impl block",
    note = "put `#[actor]` on the struct and on an `impl {Self}` block whose methods carry #[command], #[query] or #[reminder]"
)]
pub trait Actor: ActorState {
    /// The durable messages: one variant per `#[command]`, `#[reminder]` and `#[reply]`.
    type Message: Operations;
    /// The ordered reads: one variant per `#[query]`.
    type Query: Operations;
    /// What `turn.schedule(at, key)` returns: one method per reminder.
    type Schedule;
    /// What `turn.unschedule(key)` returns: one method per reminder.
    type Unschedule;
    /// What `turn.send::<Self>(id)` returns in another actor's turn: one method per command.
    type Sender;
    /// What `turn.reminder(key)` returns: one method per reminder, each telling when it is
    /// due.
    type ReminderLookup<'t>
    where
        Self: 't;
    /// What `turn.emit(effect).on_success()` and `.on_failure()` return: one method per
    /// `#[reply]` whose one argument is a `T`.
    type EffectReply<E: Effect, T>;

    /// Runs one message against the state.
    #[doc(hidden)]
    fn handle<'a>(
        &'a mut self,
        turn: &'a mut Turn<Self>,
        message: Self::Message,
    ) -> impl Future<Output = Handled> + Send + 'a;

    /// Answers one query from the state.
    #[doc(hidden)]
    fn answer<'a>(
        &'a self,
        turn: &'a Turn<Self>,
        query: Self::Query,
    ) -> impl Future<Output = Handled> + Send + 'a;

    /// Wraps a staged schedule in the actor's typed builder.
    #[doc(hidden)]
    fn schedule_builder(stage: ScheduleStage<Self>) -> Self::Schedule;

    /// Wraps a staged cancellation in the actor's typed builder.
    #[doc(hidden)]
    fn unschedule_builder(stage: UnscheduleStage<Self>) -> Self::Unschedule;

    /// Wraps a message staged for this actor in its typed sender.
    #[doc(hidden)]
    fn sender(stage: SendStage<Self>) -> Self::Sender;

    /// Wraps a reminder lookup in the actor's typed builder.
    #[doc(hidden)]
    fn reminder_lookup(stage: ReminderLookup<'_, Self>) -> Self::ReminderLookup<'_>;

    /// Wraps an effect's reply in the actor's typed builder.
    #[doc(hidden)]
    fn effect_reply<E: Effect, T>(stage: ReplyStage<Self, E, T>) -> Self::EffectReply<E, T>;

    /// Makes this actor type known to the runtime behind `registrar`, which commits a send
    /// to it, so that its workers run the message (`__private::register::<Self>`).
    #[doc(hidden)]
    fn register(registrar: &dyn Registrar) -> crate::error::Result<()>;

    /// The `#[migrate(from = n)]` step that reads a state stored at version `from` and
    /// writes version `from + 1`, if the actor has one.
    #[doc(hidden)]
    fn migration(from: u32) -> Option<crate::actor::migration::Migration> {
        let _ = from;
        None
    }
}
