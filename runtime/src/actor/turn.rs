//! [`Turn`]: what a handler sees of the runtime while it runs, and what it stages for commit.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};

use crate::actor::effect::Effect;
use crate::actor::reply::{Emitted, PendingEffect};
use crate::actor::schedule::{Missed, ReminderChange, ScheduleStage, UnscheduleStage};
use crate::actor::send::{Outgoing, SendStage};
use crate::actor::staging::Staging;
use crate::actor::Actor;
use crate::codec::store_value;
use crate::error::{Error, Result};
use crate::store::{ActorKey, Transaction};
use crate::time::clock::IntoDuration;
use crate::validate::validate_key;

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
    incarnation: i64,
    scheduled_at: Option<DateTime<Utc>>,
    /// Whether the handler asked to destroy the actor when the turn commits.
    destroy: bool,
    /// Staged by builders that hold no borrow of the turn, so a builder's arguments may read
    /// it (`turn.send::<B>(id).outbid(turn.actor_id().to_owned())`).
    reminders: Staging<ReminderChange<A::Message>>,
    outbox: Staging<Outgoing>,
    effects: Staging<PendingEffect>,
    /// The turn's transaction while the handler runs (commands and reminders only). The
    /// mutex only makes `&Turn` shareable; access goes through `&mut self`, never locking.
    transaction: Mutex<Option<Box<dyn Transaction>>>,
    /// Whether the handler's own SQL started, behind a savepoint.
    savepoint: bool,
}

/// What the engine tells a turn about itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnFacts<'a> {
    pub(crate) actor_id: &'a str,
    pub(crate) now: DateTime<Utc>,
    pub(crate) message_id: Option<i64>,
    pub(crate) attempt: u32,
    pub(crate) incarnation: i64,
    pub(crate) scheduled_at: Option<DateTime<Utc>>,
}

impl<A: Actor> Turn<A> {
    pub(crate) fn new(facts: TurnFacts<'_>) -> Self {
        Self {
            actor_id: facts.actor_id.to_owned(),
            now: facts.now,
            message_id: facts.message_id,
            attempt: facts.attempt,
            incarnation: facts.incarnation,
            scheduled_at: facts.scheduled_at,
            destroy: false,
            reminders: Staging::default(),
            outbox: Staging::default(),
            effects: Staging::default(),
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

    /// Which life of the actor this is: 1 at first, one more after each
    /// [`destroy`](Turn::destroy). A reminder of an earlier incarnation never runs on a later
    /// one.
    pub fn incarnation(&self) -> u64 {
        u64::try_from(self.incarnation).unwrap_or_default()
    }

    /// For a reminder's turn, the time its occurrence was scheduled for (a recurring
    /// reminder that caught up after downtime runs each occurrence with its own time).
    pub fn scheduled_at(&self) -> Option<DateTime<Utc>> {
        self.scheduled_at
    }

    /// Destroys the actor when this turn commits (and not at all if it rejects or fails):
    /// its state, its reminders and its unfinished messages go (callers waiting on them get
    /// [`Error::Destroyed`]), and its next message starts a new incarnation from the default
    /// state. This turn's effects and sends still happen.
    pub fn destroy(&mut self) {
        self.destroy = true;
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
        A::schedule_builder(ScheduleStage::new(
            self.reminders.clone(),
            at,
            key.into(),
            None,
        ))
    }

    /// Schedules one of this actor's reminders every `interval` (a `Duration` or a
    /// `TimeDelta`), the first time one interval from now, under `key`; scheduling the same
    /// reminder and key again replaces it, `turn.unschedule(key).<reminder>()` stops it. Each
    /// occurrence is an ordinary message, in order with the others, and
    /// [`scheduled_at`](Turn::scheduled_at) tells it its time.
    ///
    /// Occurrences missed while no runtime ran fire once, as the latest
    /// ([`Missed::Latest`], the default), or each in order with `.missed(Missed::All)`, up
    /// to [`Missed::CATCH_UP`] of the most recent.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Account {
    ///     statements: u32,
    /// }
    ///
    /// #[actor]
    /// impl Account {
    ///     #[command]
    ///     pub fn open(&mut self, turn: &mut Turn<Self>) {
    ///         turn.schedule_every(TimeDelta::days(1), "statement")
    ///             .missed(Missed::All)
    ///             .send_statement();
    ///     }
    ///
    ///     #[reminder]
    ///     fn send_statement(&mut self) {
    ///         self.statements += 1;
    ///     }
    /// }
    /// ```
    pub fn schedule_every(
        &mut self,
        interval: impl IntoDuration,
        key: impl Into<String>,
    ) -> A::Schedule {
        let interval = interval
            .into_duration()
            .max(std::time::Duration::from_millis(1));
        A::schedule_builder(ScheduleStage::new(
            self.reminders.clone(),
            crate::time::saturating::later(self.now, interval),
            key.into(),
            Some((interval, Missed::Latest)),
        ))
    }

    /// Cancels one of this actor's reminders under `key`; the builder has one method per
    /// `#[reminder]`: `turn.unschedule(&hold_id).expire()`.
    ///
    /// It cancels what has not fired yet. An occurrence that already fired is a message in
    /// the mailbox and still runs: one that fell due together with this turn's own reminder,
    /// say, or the rest of a recurring reminder's caught-up occurrences.
    pub fn unschedule(&mut self, key: impl Into<String>) -> A::Unschedule {
        A::unschedule_builder(UnscheduleStage::new(
            self.reminders.clone(),
            Some(key.into()),
        ))
    }

    /// Looks up one of this actor's reminders under `key`: the builder has one method per
    /// `#[reminder]`, which says when it is due next (`None` if it is not scheduled),
    /// counting what this turn has staged so far.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Hold {
    ///     extended: u32,
    /// }
    ///
    /// #[actor]
    /// impl Hold {
    ///     /// Pushes the expiry back by ten minutes, once it is scheduled.
    ///     #[command]
    ///     pub async fn extend(&mut self, turn: &mut Turn<Self>) -> Result<bool, TurnError> {
    ///         let Some(due) = turn.reminder("hold").expire().await? else {
    ///             return Ok(false);
    ///         };
    ///         turn.schedule(due + TimeDelta::minutes(10), "hold").expire();
    ///         self.extended += 1;
    ///         Ok(true)
    ///     }
    ///
    ///     #[reminder]
    ///     fn expire(&mut self) {}
    /// }
    /// ```
    pub fn reminder(&mut self, key: impl Into<String>) -> A::ReminderLookup<'_> {
        A::reminder_lookup(ReminderLookup::new(self, key.into()))
    }

    /// When this actor's reminder `name` is due under `key`: what the turn staged last for
    /// it, or else what is stored.
    pub(crate) async fn reminder_due(
        &mut self,
        name: &'static str,
        key: &str,
    ) -> Result<Option<DateTime<Utc>>> {
        // Checked before the key reaches SQL: a key PostgreSQL refuses would abort the
        // turn's transaction, an error the handler could not recover from.
        validate_key("reminder key", key)?;
        if self.destroy {
            // The actor goes when this turn commits, and its reminders with it.
            return Ok(None);
        }
        if let Some(staged) = self.reminders.latest(name, key) {
            return Ok(staged);
        }
        let transaction = lent(&mut self.transaction)?;
        let actor = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id: &self.actor_id,
        };
        let due = transaction.reminder_due(actor, name, key).await?;
        Ok(due.map(crate::time::micros::from_micros))
    }

    /// Cancels one of this actor's reminders under every key:
    /// `turn.unschedule_all().expire()`.
    pub fn unschedule_all(&mut self) -> A::Unschedule {
        A::unschedule_builder(UnscheduleStage::new(self.reminders.clone(), None))
    }

    /// Sends a command to another actor (or to this one, with
    /// [`send_to_self`](Turn::send_to_self)): the message joins the tail of that actor's
    /// mailbox when this turn commits, and not at all if it rejects or fails. The builder has
    /// one method per `#[command]` of the target, with its exact arguments, and takes
    /// `.delay(d)`, `.available_at(at)` and `.idempotency_key(k)` before it:
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
        B::sender(SendStage::new(self.outbox.clone(), actor_id.into()))
    }

    /// Sends a command to this actor: it joins the tail of its own mailbox when this turn
    /// commits (`turn.send_to_self().tick()`).
    pub fn send_to_self(&mut self) -> A::Sender {
        let actor_id = self.actor_id.clone();
        self.send::<A>(actor_id)
    }

    /// Emits an effect: work outside the database that runs after this turn commits (and
    /// never if it rejects or fails), at least once, by the handler registered with
    /// [`Builder::effect`](crate::Builder::effect). See [`effect`](crate::effect).
    ///
    /// Its outcome can come back to this actor as a `#[reply]`: `turn.emit(charge)
    /// .on_success().charged().on_failure().charge_failed()` (see [`Emitted`]), and
    /// [`Emitted::id`] is the effect's id, to keep (the failure reply names it).
    pub fn emit<E: Effect>(&mut self, effect: E) -> Emitted<A, E> {
        let effect_id = crate::ids::new_request_id();
        let index = self.effects.push(PendingEffect {
            effect_id: effect_id.clone(),
            name: E::NAME,
            payload: store_value("effect", E::NAME, &effect),
            on_success: None,
            on_failure: None,
        });
        Emitted::new(self.effects.clone(), index, effect_id)
    }

    /// The turn's SQLite connection, inside the turn's transaction: the application's own
    /// rows written here commit with the state, or not at all (a rejection or a failure
    /// rolls them back). Handlers that use it are `async fn`.
    ///
    /// Never end the transaction from here (`COMMIT`, `ROLLBACK`, `RELEASE`): the turn then
    /// fails, and on SQLite the transaction may be shared with other turns (group commit),
    /// whose callers must read back what was kept. A `COMMIT` here keeps this turn's rows
    /// although the turn fails and runs again.
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
                "this runtime does not keep its actors in SQLite: use turn.postgres() or \
                 turn.mysql()"
                    .to_owned(),
            )
        })
    }

    /// The turn's PostgreSQL connection, inside the turn's transaction: the application's
    /// own rows written here commit with the state, or not at all (a rejection or a failure
    /// rolls them back). Handlers that use it are `async fn`.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn postgres(&mut self) -> Result<&mut sqlx::PgConnection> {
        self.behind_savepoint().await?.postgres().ok_or_else(|| {
            Error::Config(
                "this runtime does not keep its actors in PostgreSQL: use turn.sqlite() or \
                 turn.mysql()"
                    .to_owned(),
            )
        })
    }

    /// The turn's MySQL (or MariaDB) connection, inside the turn's transaction: the
    /// application's own rows written here commit with the state, or not at all. Handlers
    /// that use it are `async fn`.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub async fn mysql(&mut self) -> Result<&mut sqlx::MySqlConnection> {
        self.behind_savepoint().await?.mysql().ok_or_else(|| {
            Error::Config(
                "this runtime does not keep its actors in MySQL: use turn.sqlite() or \
                 turn.postgres()"
                    .to_owned(),
            )
        })
    }

    /// The turn's transaction, with a savepoint taken before the handler's first own write.
    async fn behind_savepoint(&mut self) -> Result<&mut Box<dyn Transaction>> {
        let needs_savepoint = !self.savepoint;
        let transaction = lent(&mut self.transaction)?;
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

    /// What the handler staged, closing the builders it may still hold.
    pub(crate) fn close_staging(&mut self) -> Staged<A> {
        Staged {
            reminders: self.reminders.close(),
            outbox: self.outbox.close(),
            effects: self.effects.close(),
            destroy: self.destroy,
        }
    }
}

impl<A: Actor> Drop for Turn<A> {
    /// A turn dropped while it still holds its transaction was cancelled in the middle of
    /// its handler (its caller's future was dropped): nothing knows what the handler's own
    /// SQL left on the connection, so it is closed rather than reused.
    fn drop(&mut self) {
        self.poison();
        self.reminders.close();
        self.outbox.close();
        self.effects.close();
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

/// The transaction lent to a turn's handler: commands and reminders have one, queries none.
fn lent(
    transaction: &mut Mutex<Option<Box<dyn Transaction>>>,
) -> Result<&mut Box<dyn Transaction>> {
    transaction
        .get_mut()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
        .ok_or_else(|| Error::Config("only commands and reminders run in a transaction".to_owned()))
}

/// What a handler staged, taken from its turn once it returned.
pub(crate) struct Staged<A: Actor> {
    pub(crate) reminders: Vec<ReminderChange<A::Message>>,
    pub(crate) outbox: Vec<Outgoing>,
    pub(crate) effects: Vec<PendingEffect>,
    /// Whether the handler asked to destroy the actor when the turn commits.
    pub(crate) destroy: bool,
}

/// A lookup in the making; the generated builder names the reminder.
#[doc(hidden)]
pub struct ReminderLookup<'t, A: Actor> {
    turn: &'t mut Turn<A>,
    key: String,
}

impl<'t, A: Actor> ReminderLookup<'t, A> {
    pub(crate) fn new(turn: &'t mut Turn<A>, key: String) -> Self {
        Self { turn, key }
    }

    /// When the reminder `name` under this lookup's key is due, if it is scheduled.
    pub async fn due(self, name: &'static str) -> Result<Option<DateTime<Utc>>> {
        self.turn.reminder_due(name, &self.key).await
    }
}
