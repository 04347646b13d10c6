//! [`Turn`]: what a handler sees of the runtime while it runs, and what it stages for commit.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};

use crate::actor::{Actor, Operations};
use crate::clock::IntoDuration;
use crate::codec::{store_operation, store_value, StoredOperation};
use crate::effect::Effect;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::Transaction;

/// The context of one turn: the actor's id, the turn's time, and the changes the handler
/// stages to commit with the state.
///
/// A command takes `turn: &mut Turn<Self>` to schedule reminders; a query takes
/// `turn: &Turn<Self>`, which can read but stage nothing. Everything staged commits in the
/// turn's transaction, or not at all (a rejection or a failure discards it).
pub struct Turn<A: Actor> {
    actor_id: String,
    now: DateTime<Utc>,
    message_id: Option<i64>,
    attempt: u32,
    /// Staged by builders that hold no borrow of the turn, so a builder's arguments may read
    /// it (`turn.send::<B>(id).outbid(turn.actor_id().to_owned())`).
    reminders: Staging<ReminderChange<A::Message>>,
    outbox: Staging<Outgoing>,
    effects: Vec<PendingEffect>,
    /// The turn's transaction while the handler runs (commands and reminders only). The
    /// mutex only makes `&Turn` shareable; access goes through `&mut self`, never locking.
    transaction: Mutex<Option<Box<dyn Transaction>>>,
    /// Whether the handler's own SQL started, behind a savepoint.
    savepoint: bool,
}

impl<A: Actor> Turn<A> {
    pub(crate) fn new(
        actor_id: &str,
        now: DateTime<Utc>,
        message_id: Option<i64>,
        attempt: u32,
    ) -> Self {
        Self {
            actor_id: actor_id.to_owned(),
            now,
            message_id,
            attempt,
            reminders: Staging::default(),
            outbox: Staging::default(),
            effects: Vec::new(),
            transaction: Mutex::new(None),
            savepoint: false,
        }
    }

    /// The id of the actor this turn runs for.
    pub fn actor_id(&self) -> &str {
        &self.actor_id
    }

    /// The time of this turn, read once from the runtime's clock when it started.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The id of the message this turn runs, once it is stored (`None` for a query, and for
    /// a synchronous call that runs at once: its message is stored with the turn).
    pub fn message_id(&self) -> Option<i64> {
        self.message_id
    }

    /// Which attempt at this message this turn is: 1 the first time, 2 after one failure...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Schedules one of this actor's reminders at `at` under `key`.
    ///
    /// There is one alarm per reminder and key: scheduling the same reminder and key again
    /// moves it. The builder has one method per `#[reminder]`, with its exact arguments:
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Hold {
    ///     expires_at: i64,
    /// }
    ///
    /// #[actor]
    /// impl Hold {
    ///     #[command]
    ///     pub fn place(&mut self, turn: &mut Turn<Self>, hold_id: String) -> i64 {
    ///         let deadline = turn.now() + TimeDelta::minutes(15);
    ///         self.expires_at = deadline.timestamp();
    ///         turn.schedule(deadline, &hold_id).expire(hold_id.clone(), self.expires_at);
    ///         self.expires_at
    ///     }
    ///
    ///     #[command]
    ///     pub fn confirm(&mut self, turn: &mut Turn<Self>, hold_id: String) {
    ///         turn.unschedule(&hold_id).expire();
    ///     }
    ///
    ///     #[reminder]
    ///     fn expire(&mut self, hold_id: String, expires_at: i64) {
    ///         if self.expires_at == expires_at {
    ///             self.expires_at = 0;
    ///         }
    ///     }
    /// }
    /// ```
    pub fn schedule(&mut self, at: DateTime<Utc>, key: impl Into<String>) -> A::Schedule {
        A::schedule_builder(ScheduleStage {
            reminders: self.reminders.clone(),
            at,
            key: key.into(),
        })
    }

    /// Cancels one of this actor's reminders under `key`; the builder has one method per
    /// `#[reminder]`: `turn.unschedule(&hold_id).expire()`.
    pub fn unschedule(&mut self, key: impl Into<String>) -> A::Unschedule {
        A::unschedule_builder(UnscheduleStage {
            reminders: self.reminders.clone(),
            key: key.into(),
        })
    }

    /// Sends a command to another actor (or to this one): the message joins the tail of
    /// that actor's mailbox when this turn commits, and not at all if it rejects or fails.
    /// The builder has one method per `#[command]` of the target, with its exact arguments:
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Stock {
    ///     reserved: u32,
    /// }
    ///
    /// #[actor]
    /// impl Stock {
    ///     #[command]
    ///     pub fn reserve(&mut self, quantity: u32) {
    ///         self.reserved += quantity;
    ///     }
    /// }
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Order {
    ///     placed: bool,
    /// }
    ///
    /// #[actor]
    /// impl Order {
    ///     #[command]
    ///     pub fn place(&mut self, turn: &mut Turn<Self>, sku: String, quantity: u32) {
    ///         turn.send::<Stock>(sku).reserve(quantity);
    ///         self.placed = true;
    ///     }
    /// }
    /// ```
    ///
    /// Messages sent by one turn to one actor arrive in the order they were sent. There is
    /// no reply: the target answers by sending back, and the policy is not asked (the
    /// sender is the application's own code).
    pub fn send<B: Actor>(&mut self, actor_id: impl Into<String>) -> B::Sender {
        B::sender(SendStage {
            outbox: self.outbox.clone(),
            actor_id: actor_id.into(),
            options: SendOptions::default(),
            target: PhantomData,
        })
    }

    /// Emits an effect: work outside the database that runs after this turn commits (and
    /// never if it rejects or fails), at least once, by the handler registered with
    /// [`Builder::effect`](crate::Builder::effect). See [`effect`](crate::effect).
    pub fn emit<E: Effect>(&mut self, effect: E) {
        self.effects.push(PendingEffect {
            name: E::NAME,
            payload: store_value("effect", E::NAME, &effect),
        });
    }

    /// The turn's SQLite connection, inside the turn's transaction: the application's own
    /// rows written here commit with the state, or not at all (a rejection or a failure
    /// rolls them back). Handlers that use it are `async fn`.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Account {
    ///     balance: i64,
    /// }
    ///
    /// #[actor]
    /// impl Account {
    ///     #[command]
    ///     pub async fn deposit(&mut self, turn: &mut Turn<Self>, entry_id: String, cents: i64)
    ///         -> Result<i64, TurnError>
    ///     {
    ///         let account = turn.actor_id().to_owned();
    ///         sqlx::query("INSERT INTO entries (account, entry_id, cents) VALUES (?1, ?2, ?3)")
    ///             .bind(account)
    ///             .bind(entry_id)
    ///             .bind(cents)
    ///             .execute(turn.sqlite().await?)
    ///             .await?;
    ///         self.balance += cents;
    ///         Ok(self.balance)
    ///     }
    /// }
    /// ```
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub async fn sqlite(&mut self) -> Result<&mut sqlx::SqliteConnection> {
        self.behind_savepoint().await?.sqlite().ok_or_else(|| {
            Error::Config(
                "this runtime keeps its actors in PostgreSQL: use turn.postgres()".to_owned(),
            )
        })
    }

    /// The turn's PostgreSQL connection, inside the turn's transaction; see
    /// [`sqlite`](Turn::sqlite).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn postgres(&mut self) -> Result<&mut sqlx::PgConnection> {
        self.behind_savepoint().await?.postgres().ok_or_else(|| {
            Error::Config("this runtime keeps its actors in SQLite: use turn.sqlite()".to_owned())
        })
    }

    /// The turn's transaction, with a savepoint taken before the handler's first own write.
    async fn behind_savepoint(&mut self) -> Result<&mut Box<dyn Transaction>> {
        let needs_savepoint = !self.savepoint;
        let transaction = self
            .transaction
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .ok_or_else(|| {
                Error::Config("only commands and reminders run in a transaction".to_owned())
            })?;
        if needs_savepoint {
            transaction.savepoint().await?;
            self.savepoint = true;
        }
        Ok(transaction)
    }

    /// Lends the turn's transaction to the handler.
    pub(crate) fn attach(&mut self, transaction: Box<dyn Transaction>) {
        *self
            .transaction
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = Some(transaction);
    }

    /// Marks the lent transaction as in an unknown state (its handler was abandoned in the
    /// middle): its connection is closed, not reused.
    pub(crate) fn poison(&mut self) {
        if let Some(transaction) = self
            .transaction
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            transaction.poison();
        }
    }

    /// Takes the transaction back; true if the handler wrote behind a savepoint.
    pub(crate) fn detach(&mut self) -> Option<(Box<dyn Transaction>, bool)> {
        let transaction = self
            .transaction
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some((transaction, std::mem::take(&mut self.savepoint)))
    }

    pub(crate) fn take_effects(&mut self) -> Vec<PendingEffect> {
        std::mem::take(&mut self.effects)
    }

    pub(crate) fn take_outbox(&mut self) -> Vec<Outgoing> {
        self.outbox.take()
    }

    pub(crate) fn take_reminders(&mut self) -> Vec<ReminderChange<A::Message>> {
        self.reminders.take()
    }
}

impl<A: Actor> Drop for Turn<A> {
    /// A turn dropped while it still holds its transaction was cancelled in the middle of
    /// its handler (its caller's future was dropped): nothing knows what the handler's own
    /// SQL left on the connection, so it is closed rather than reused.
    fn drop(&mut self) {
        self.poison();
    }
}

impl<A: Actor> fmt::Debug for Turn<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("actor_type", &A::TYPE_NAME)
            .field("actor_id", &self.actor_id)
            .field("now", &self.now)
            .field("message_id", &self.message_id)
            .field("attempt", &self.attempt)
            .field("staged_reminders", &self.reminders.len())
            .field("staged_messages", &self.outbox.len())
            .field("staged_effects", &self.effects.len())
            .finish()
    }
}

/// A reminder change staged by a turn.
pub(crate) enum ReminderChange<M> {
    Schedule {
        key: String,
        at: DateTime<Utc>,
        message: M,
    },
    Cancel {
        name: &'static str,
        key: String,
    },
}

impl<M: Operations> ReminderChange<M> {
    /// The identity of the alarm this change touches: (reminder name, key).
    pub(crate) fn alarm(&self) -> (&'static str, &str) {
        match self {
            Self::Schedule { key, message, .. } => (message.name(), key),
            Self::Cancel { name, key } => (name, key),
        }
    }
}

/// What builders stage for their turn: shared with the turn, not borrowed from it.
pub(crate) struct Staging<T>(Arc<Mutex<Vec<T>>>);

impl<T> Default for Staging<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T> Clone for Staging<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Staging<T> {
    fn push(&self, item: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(item);
    }

    fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// A schedule in the making; the generated builder turns it into a typed reminder call.
#[doc(hidden)]
pub struct ScheduleStage<A: Actor> {
    reminders: Staging<ReminderChange<A::Message>>,
    at: DateTime<Utc>,
    key: String,
}

impl<A: Actor> ScheduleStage<A> {
    /// Stages the reminder message.
    pub fn stage(self, message: A::Message) {
        self.reminders.push(ReminderChange::Schedule {
            key: self.key,
            at: self.at,
            message,
        });
    }
}

/// A cancellation in the making; the generated builder names the reminder.
#[doc(hidden)]
pub struct UnscheduleStage<A: Actor> {
    reminders: Staging<ReminderChange<A::Message>>,
    key: String,
}

impl<A: Actor> UnscheduleStage<A> {
    /// Stages the cancellation of the reminder `name`.
    pub fn stage(self, name: &'static str) {
        self.reminders.push(ReminderChange::Cancel {
            name,
            key: self.key,
        });
    }
}

/// An effect a turn emits, serialised when staged.
pub(crate) struct PendingEffect {
    pub(crate) name: &'static str,
    pub(crate) payload: Result<String>,
}

/// A message a turn sends to an actor, encoded when staged.
pub(crate) struct Outgoing {
    pub(crate) actor_type: &'static str,
    pub(crate) actor_id: String,
    pub(crate) message: Result<StoredOperation>,
    pub(crate) options: SendOptions,
    /// Makes the target's type known to this runtime, so its workers can run the message.
    pub(crate) register: fn(&Engine) -> Result<()>,
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
            register: Engine::register::<B>,
        });
    }
}
