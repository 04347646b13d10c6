//! The registry: the actor types this runtime can run, by stored name, each with the runner
//! that runs a mailbox step of its messages when only the stored name is known.

use std::any::TypeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;

use super::effect_kinds::EffectKinds;
use super::one_turn::Turns;
use super::{Lock, Step};
use crate::actor::send::Registrar;
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};

/// The actor types a runtime registered, by stored name, and the effect kinds it handles
/// (which a type that declares its effects is checked against).
pub(crate) struct Registry {
    actors: RwLock<HashMap<&'static str, RegisteredActor>>,
    effect_kinds: Arc<EffectKinds>,
}

/// One registered actor type.
#[derive(Clone)]
struct RegisteredActor {
    type_id: TypeId,
    runner: Arc<dyn MailboxRunner>,
    /// The stored names of its messages' operations (commands and reminders).
    operations: &'static [&'static str],
    /// The kinds of effect it declares it emits.
    effects: &'static [&'static str],
}

impl Registry {
    /// No actor type yet; `effect_kinds` are the effects this runtime handles.
    pub(super) fn new(effect_kinds: Arc<EffectKinds>) -> Self {
        Self {
            actors: RwLock::default(),
            effect_kinds,
        }
    }

    /// Makes `A` known, so workers and the testing API can run its messages; another type
    /// under the same stored name is an error, and so, in a runtime that runs effects, is a
    /// type that declares an effect it has no handler for (the start refuses those of the
    /// types the builder named).
    pub(crate) fn register<A: Actor>(&self) -> Result<()> {
        let declared: Vec<_> = A::EFFECTS
            .iter()
            .map(|effect| (A::TYPE_NAME, *effect))
            .collect();
        self.effect_kinds.refuse_unhandled(&declared)?;
        let type_id = TypeId::of::<A>();
        if let Some(known) = self
            .actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(A::TYPE_NAME)
        {
            return duplicate_check(known, type_id, A::TYPE_NAME);
        }
        let mut actors = self.actors.write().unwrap_or_else(PoisonError::into_inner);
        let known = actors
            .entry(A::TYPE_NAME)
            .or_insert_with(|| RegisteredActor {
                type_id,
                runner: Arc::new(TypedRunner::<A>(PhantomData)),
                operations: <A::Message as Operations>::NAMES,
                effects: A::EFFECTS,
            });
        duplicate_check(known, type_id, A::TYPE_NAME)
    }

    /// The runner of a stored type name, if this runtime knows the type.
    pub(crate) fn runner(&self, actor_type: &str) -> Option<Arc<dyn MailboxRunner>> {
        self.actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(actor_type)
            .map(|known| Arc::clone(&known.runner))
    }

    /// The operations this runtime can run, as a JSON array of `"Type:operation"`: a
    /// message of another type, or of an operation a newer build added, is not its to claim.
    pub(super) fn known_operations(&self) -> String {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        let names: Vec<String> = actors
            .iter()
            .flat_map(|(actor_type, known)| {
                known
                    .operations
                    .iter()
                    .map(move |operation| format!("{actor_type}:{operation}"))
            })
            .collect();
        serde_json::Value::from(names).to_string()
    }

    /// Each kind of effect a known actor type declares, with that type, by type and kind.
    pub(crate) fn declared_effects(&self) -> Vec<(&'static str, &'static str)> {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        let mut declared: Vec<_> = actors
            .iter()
            .flat_map(|(name, known)| known.effects.iter().map(move |effect| (*name, *effect)))
            .collect();
        declared.sort_unstable();
        declared
    }

    /// The stored names of the actor types this runtime registered, sorted.
    pub(crate) fn registered_types(&self) -> Vec<String> {
        let mut names: Vec<String> = self.type_names().into_iter().map(str::to_owned).collect();
        names.sort();
        names
    }

    /// The stored names of the actor types this runtime knows, as a JSON array.
    pub(super) fn known_types(&self) -> String {
        serde_json::Value::from(self.type_names()).to_string()
    }

    /// The stored names of the actor types this runtime knows, in no order.
    pub(super) fn type_names(&self) -> Vec<&'static str> {
        let actors = self.actors.read().unwrap_or_else(PoisonError::into_inner);
        actors.keys().copied().collect()
    }
}

/// A turn's send registers its target type with the registry (see [`Registrar`]).
impl Registrar for Registry {
    fn runtime(&self) -> &dyn std::any::Any {
        self
    }
}

/// Runs the next message of an actor whose type is known only by its stored name.
#[async_trait]
pub(crate) trait MailboxRunner: Send + Sync {
    /// Runs one mailbox step of the actor `actor_id`, taking its lock as `lock` says.
    async fn run_next(&self, turns: Turns<'_>, actor_id: &str, lock: Lock) -> Result<Step>;

    /// Whether a message about to be stored names one of the actor's commands and its
    /// arguments read back as that command's.
    fn check_command(&self, operation: &str, arguments: &str) -> Result<()>;

    /// Whether a stored message or reminder of this actor (any operation) decodes as one
    /// of this build's operations; the error says why not.
    fn check_stored(&self, actor_id: &str, operation: &str, arguments: &str) -> Result<()>;
}

/// The runner of the actor type `A`.
struct TypedRunner<A>(PhantomData<fn() -> A>);

#[async_trait]
impl<A: Actor> MailboxRunner for TypedRunner<A> {
    async fn run_next(&self, turns: Turns<'_>, actor_id: &str, lock: Lock) -> Result<Step> {
        turns.run_next::<A>(actor_id, lock).await
    }

    fn check_command(&self, operation: &str, arguments: &str) -> Result<()> {
        if <A::Message as Operations>::REMINDERS.contains(&operation) {
            return Err(Error::Config(format!(
                "`{operation}` is a reminder of {}, not a command",
                A::TYPE_NAME
            )));
        }
        self.check_stored("", operation, arguments)
    }

    fn check_stored(&self, actor_id: &str, operation: &str, arguments: &str) -> Result<()> {
        crate::actor::operation_codec::decode_operation::<A::Message>(
            A::TYPE_NAME,
            actor_id,
            operation,
            arguments,
            0,
        )
        .map(drop)
    }
}

/// Whether a type registered under `name` is the type registering now.
fn duplicate_check(known: &RegisteredActor, type_id: TypeId, name: &str) -> Result<()> {
    if known.type_id == type_id {
        Ok(())
    } else {
        Err(Error::DuplicateActorName {
            name: name.to_owned(),
        })
    }
}
