//! Effect outcomes back to the actor: `turn.emit(effect).on_success().<reply>()` and
//! `.on_failure().<reply>()` name a `#[reply]` of the emitting actor that receives the
//! effect's output, or its [`EffectFailure`] (which carries the effect), as its one argument.
//! The reply is enqueued in the transaction that records the effect's outcome, so it arrives
//! once per outcome, and never for an effect whose turn did not commit.
//!
//! Only the runtime delivers a reply, so no caller can forge an outcome such as "paid": a
//! reply called through a reference, its `enqueue()` or another actor's `turn.send` is a
//! compile error, and a reply message passed to the untyped [`Reference`](crate::Reference)
//! is refused at the door with [`Error::ReplyNotCallable`](crate::Error::ReplyNotCallable),
//! before anything is written. Tests deliver one with
//! [`Testing::deliver`](crate::Testing::deliver).

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::actor::effect::{Effect, EffectFailure};
use crate::actor::staging::Staging;
use crate::actor::Actor;
use crate::codec::to_json;
use crate::error::Result;

/// An effect a turn emitted; name the replies its outcome is delivered to, or drop it.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use solid_objects::prelude::*;
/// use solid_objects::EffectFailure;
///
/// #[derive(Serialize, Deserialize)]
/// pub struct ChargeCard {
///     cents: i64,
/// }
///
/// #[derive(Serialize, Deserialize)]
/// pub struct Charged {
///     charge_id: String,
/// }
///
/// impl Effect for ChargeCard {
///     const NAME: &'static str = "charge_card";
///     type Output = Charged;
/// }
///
/// #[actor]
/// #[derive(Default)]
/// pub struct Order {
///     status: String,
/// }
///
/// #[actor]
/// impl Order {
///     #[command]
///     pub fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
///         self.status = "charging".to_owned();
///         turn.emit(ChargeCard { cents })
///             .on_success()
///             .charged()
///             .on_failure()
///             .charge_failed();
///     }
///
///     #[reply]
///     pub fn charged(&mut self, receipt: Charged) {
///         self.status = format!("paid by {}", receipt.charge_id);
///     }
///
///     #[reply]
///     pub fn charge_failed(&mut self, failure: EffectFailure<ChargeCard>) {
///         self.status = format!("{} cents unpaid: {}", failure.effect.cents, failure.error);
///     }
/// }
/// ```
pub struct Emitted<A: Actor, E: Effect> {
    stage: ReplyTarget,
    kinds: PhantomData<fn() -> (A, E)>,
}

impl<A: Actor, E: Effect> Emitted<A, E> {
    pub(crate) fn new(effects: Staging<PendingEffect>, index: usize, effect_id: String) -> Self {
        Self {
            stage: ReplyTarget {
                effects,
                index,
                effect_id,
            },
            kinds: PhantomData,
        }
    }

    /// The effect's id: the [`EffectContext::id`](crate::EffectContext::id) its handler
    /// gets and the [`EffectFailure::effect_id`] its failure reply carries, for the actor to
    /// keep (which of its effects is which). It exists once the turn commits.
    pub fn id(&self) -> &str {
        &self.stage.effect_id
    }

    /// Names the `#[reply]` of this actor that receives the effect's
    /// [`Output`](Effect::Output) once its handler succeeds: the builder has one method per
    /// reply whose one argument has that type.
    pub fn on_success(self) -> A::EffectReply<E, E::Output> {
        A::effect_reply(ReplyStage {
            target: self.stage,
            outcome: Outcome::Success,
            kinds: PhantomData,
        })
    }

    /// Names the `#[reply]` of this actor that receives an [`EffectFailure<E>`] once the
    /// effect failed for good (a permanent failure, or its last attempt): the builder has
    /// one method per reply whose one argument is an `EffectFailure<E>`, which carries the
    /// effect itself.
    pub fn on_failure(self) -> A::EffectReply<E, EffectFailure<E>> {
        A::effect_reply(ReplyStage {
            target: self.stage,
            outcome: Outcome::Failure,
            kinds: PhantomData,
        })
    }
}

/// The staged effect a reply is attached to.
struct ReplyTarget {
    effects: Staging<PendingEffect>,
    index: usize,
    effect_id: String,
}

/// The types a reply stage is for, without owning any of them.
type Kinds<A, E, T> = PhantomData<fn() -> (A, E, T)>;

#[derive(Clone, Copy)]
enum Outcome {
    Success,
    Failure,
}

/// A reply in the making; the generated builder names the `#[reply]` (whose one argument is
/// a `T`).
#[doc(hidden)]
pub struct ReplyStage<A: Actor, E: Effect, T> {
    target: ReplyTarget,
    outcome: Outcome,
    kinds: Kinds<A, E, T>,
}

impl<A: Actor, E: Effect, T> ReplyStage<A, E, T> {
    /// Delivers the outcome to `operation`, as its argument `argument`; returns the effect
    /// for the other outcome's command.
    pub fn stage(self, operation: &'static str, argument: &'static str) -> Emitted<A, E> {
        let reply = StoredReply {
            operation: operation.to_owned(),
            argument: argument.to_owned(),
        };
        let outcome = self.outcome;
        self.target
            .effects
            .update(self.target.index, |effect| match outcome {
                Outcome::Success => effect.on_success = Some(reply),
                Outcome::Failure => effect.on_failure = Some(reply),
            });
        Emitted {
            stage: self.target,
            kinds: PhantomData,
        }
    }
}

/// A reply as stored with its effect: the command, and the name of its one argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredReply {
    pub(crate) operation: String,
    pub(crate) argument: String,
}

impl StoredReply {
    pub(crate) fn to_stored(&self) -> Result<String> {
        to_json("effect reply", self)
    }

    /// The command's arguments: `{"<argument>": value}`.
    pub(crate) fn arguments(&self, value: serde_json::Value) -> Result<String> {
        let mut arguments = serde_json::Map::new();
        arguments.insert(self.argument.clone(), value);
        to_json("effect reply arguments", &arguments)
    }
}

/// An effect a turn emits, serialised when staged, and the commands its outcome goes to.
pub(crate) struct PendingEffect {
    /// The effect's id ([`EffectContext::id`](crate::EffectContext::id)), chosen when it is
    /// emitted.
    pub(crate) effect_id: String,
    pub(crate) name: &'static str,
    pub(crate) payload: Result<String>,
    pub(crate) on_success: Option<StoredReply>,
    pub(crate) on_failure: Option<StoredReply>,
}
