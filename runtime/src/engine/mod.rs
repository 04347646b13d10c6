//! The turn: enqueue, pick the next message, run the handler, commit. No SQL text here.
//!
//! `call` holds the synchronous paths (calls, queries, snapshots, enqueues), `turn` one turn
//! from message to commit, `outcome` what a caller sees of a finished message, and
//! `background` the work of workers (reminders, ready mailboxes, retention, dead letters).

mod background;
mod call;
mod effects;
mod outcome;
mod turn;

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::actor::Actor;
use crate::clock::Clock;
use crate::effect::EffectRunner;
use crate::error::{Error, Result};
use crate::limits::{Limits, RetryPolicy};
use crate::store::{ActorKey, MessageProgress, NewMessage, Store, Transaction};

pub(crate) use background::TurnErrors;
pub(crate) use call::{CallOptions, EnqueueOptions, Enqueued};
pub(crate) use outcome::{stored_rejection, Outcome};

/// Runs turns against a store.
pub(crate) struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    retry: RetryPolicy,
    /// Woken after every commit that adds or finishes messages.
    wake: Notify,
    /// The actor types this runtime can run, by stored name.
    actors: RwLock<HashMap<&'static str, RegisteredActor>>,
    /// Actors a worker of this process is running now, so two workers do not take the same one.
    claims: Mutex<HashSet<(String, String)>>,
    /// Stored type names already reported as unknown, so the log says it once.
    unknown_types: Mutex<HashSet<String>>,
    /// Actors whose last turn failed with an error, and until when workers skip them.
    stalled: Mutex<HashMap<(String, String), tokio::time::Instant>>,
    /// The effect handlers, by effect name.
    effects: RwLock<HashMap<&'static str, Arc<dyn EffectRunner>>>,
}

#[derive(Clone)]
struct RegisteredActor {
    type_id: TypeId,
    runner: Arc<dyn MailboxRunner>,
}

/// What one turn did.
#[derive(Debug)]
pub(crate) struct TurnReport {
    pub(crate) message_id: i64,
    pub(crate) outcome: Outcome,
}

/// What asking an actor to run its next message did.
#[derive(Debug)]
pub(crate) enum Step {
    /// A turn ran.
    Ran(TurnReport),
    /// The mailbox has nothing ready.
    Idle,
    /// The head of the mailbox waits for a retry at this time (strict order holds the rest).
    Blocked { sequence: i64, until: DateTime<Utc> },
    /// Another turn (in another task or process) held the actor until the caller's deadline.
    Busy,
}

impl Engine {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
        retry: RetryPolicy,
    ) -> Self {
        Self {
            store,
            clock,
            limits,
            retry,
            wake: Notify::new(),
            actors: RwLock::default(),
            claims: Mutex::default(),
            unknown_types: Mutex::default(),
            stalled: Mutex::default(),
            effects: RwLock::default(),
        }
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Wakes every task waiting for work or for a message to finish.
    pub(crate) fn wake(&self) {
        self.wake.notify_waiters();
    }

    /// Waits until woken or until `timeout` passes.
    pub(crate) async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// Makes `A` known to this engine, so workers and the testing API can run its messages.
    pub(crate) fn register<A: Actor>(&self) -> Result<()> {
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
}

/// Runs the next message of an actor whose type is known only by its stored name.
#[async_trait]
pub(crate) trait MailboxRunner: Send + Sync {
    async fn run_next(&self, engine: &Engine, actor_id: &str) -> Result<Step>;
}

struct TypedRunner<A>(PhantomData<fn() -> A>);

#[async_trait]
impl<A: Actor> MailboxRunner for TypedRunner<A> {
    async fn run_next(&self, engine: &Engine, actor_id: &str) -> Result<Step> {
        engine.run_next::<A>(actor_id).await
    }
}

fn duplicate_check(known: &RegisteredActor, type_id: TypeId, name: &str) -> Result<()> {
    if known.type_id == type_id {
        Ok(())
    } else {
        Err(Error::DuplicateActorName {
            name: name.to_owned(),
        })
    }
}

/// Appends a ready message to the actor's mailbox inside `tx`; returns its id.
pub(crate) async fn append(
    tx: &mut dyn Transaction,
    key: ActorKey<'_, '_>,
    operation: &str,
    arguments: &str,
    now: i64,
) -> Result<i64> {
    let sequence = tx.allocate_sequence(key, now).await?;
    let request_id = uuid::Uuid::new_v4().to_string();
    tx.insert_message(
        key,
        &NewMessage {
            sequence,
            operation,
            arguments,
            request_id: &request_id,
            idempotency_key: None,
            created_at: now,
            progress: MessageProgress::ready(0, now),
        },
    )
    .await
}

/// Microseconds since the Unix epoch, as stored.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The time a stored microsecond count stands for.
pub(crate) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
