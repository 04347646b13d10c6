//! The testing API: drive reminders and queued messages by hand in a user's tests.
//!
//! With a [`ManualClock`](crate::ManualClock), a test moves time, fires what is due, drains
//! the mailboxes, and delivers messages directly (as a late or duplicate delivery would),
//! without workers and without sleeping.

#[cfg(all(feature = "test-support", any(feature = "postgres", feature = "mysql")))]
mod database;

use std::collections::HashSet;

use crate::actor::operation_codec::encode_operation;
use crate::actor::Actor;
use crate::client::effect::UnhandledEffects;
use crate::client::shared::Runtime;
use crate::codec::to_json;
use crate::engine::{Outcome, Pass, TurnErrors};
use crate::error::{Error, Result};
use crate::store::MessageLookup;
use crate::validate::validate_id;

#[cfg(all(feature = "test-support", any(feature = "postgres", feature = "mysql")))]
pub use database::TestDatabase;

/// How many reminders one firing pass takes, how many actors one drain pass visits, and how
/// many effects of each kind one pass runs.
const BATCH: i64 = 1000;
/// Turns one actor gets per drain pass before the others get theirs.
const TURNS_PER_ACTOR: usize = 1000;

/// What [`Testing::run_due_reminders`] or [`Testing::drain`] ran: the reminder occurrences
/// it fired, the turns, every turn that did not complete, and the effects left that no
/// handler of this runtime runs.
///
/// A turn that fails is not an error of the testing call: it is counted here, in
/// [`failed`](Drained::failed) while it waits for its retry and in [`dead`](Drained::dead)
/// once it is a dead letter. Assert on them (or on [`is_clean`](Drained::is_clean)) so a
/// test does not pass over a handler that broke, or over an effect kind whose handler the
/// runtime was never given ([`unhandled_effects`](Drained::unhandled_effects)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// Reminder occurrences fired as mailbox messages: one per occurrence, so a recurring
    /// reminder that catches up on three missed occurrences counts three (0 for a drain).
    pub occurrences_fired: usize,
    /// Turns that ran, whatever their outcome: completed, rejected, destroyed, failed and
    /// dead add up to it.
    pub turns: usize,
    /// Turns whose handler returned a result.
    pub completed: usize,
    /// Turns whose handler rejected the message.
    pub rejected: usize,
    /// Messages ended as destroyed because their actor was destroyed before they ran (no
    /// handler ran).
    pub destroyed: usize,
    /// Failed attempts whose message waits for its retry.
    pub failed: Vec<FailedTurn>,
    /// Failed attempts after which the message became a dead letter.
    pub dead: Vec<FailedTurn>,
    /// Effects waiting to run, after the drain, whose kind has no handler in this runtime
    /// ([`Builder::effect`](crate::Builder::effect)), by kind: unless another process runs
    /// them, they never run and their replies never come.
    pub unhandled_effects: Vec<UnhandledEffects>,
}

impl Drained {
    /// Whether no turn failed (nothing waits for a retry, nothing became a dead letter) and
    /// no effect waits for a handler this runtime lacks.
    pub fn is_clean(&self) -> bool {
        self.failed.is_empty() && self.dead.is_empty() && self.unhandled_effects.is_empty()
    }

    fn add(&mut self, other: Drained) {
        self.occurrences_fired += other.occurrences_fired;
        self.turns += other.turns;
        self.completed += other.completed;
        self.rejected += other.rejected;
        self.destroyed += other.destroyed;
        self.failed.extend(other.failed);
        self.dead.extend(other.dead);
    }
}

/// One failed attempt of a turn the testing API ran, in [`Drained::failed`] or [`Drained::dead`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedTurn {
    /// The actor's stored type name.
    pub actor_type: String,
    /// The actor's id.
    pub actor_id: String,
    /// The message's operation (a reminder's name for a fired reminder).
    pub operation: String,
    /// The message's id, for [`Admin::retry_dead_letter`](crate::admin::Admin::retry_dead_letter).
    pub message_id: i64,
    /// Its failed attempts so far, this one included.
    pub attempts: i64,
    /// What failed: the handler's error or panic, or arguments that do not decode.
    pub error: String,
}

/// The testing API of a runtime, from [`Runtime::testing`].
#[derive(Debug)]
pub struct Testing<'r> {
    runtime: &'r Runtime,
}

impl<'r> Testing<'r> {
    pub(crate) fn new(runtime: &'r Runtime) -> Self {
        Self { runtime }
    }

    /// Fires every reminder due at the clock's now as a mailbox message, then drains the
    /// mailboxes; returns the occurrences fired and what the drain ran, with the turns that
    /// failed or became dead letters. A stored reminder that cannot be fired
    /// ([`Error::UnreadableReminder`](crate::Error::UnreadableReminder)) is left as it is
    /// and returned as the error, after the others fired and ran.
    ///
    /// # Errors
    ///
    /// An unreadable reminder, as above; the database's errors; and those of
    /// [`drain`](Testing::drain).
    pub async fn run_due_reminders(&self) -> Result<Drained> {
        let engine = self.runtime.engine();
        let mut fired = 0;
        let (mut first_unreadable, mut unreadable_ids) = (None, HashSet::new());
        loop {
            let batch = engine.reminders().fire_due_reminders(BATCH).await?;
            fired += batch.count;
            let mut more_unreadable = false;
            for error in batch.unreadable {
                if let Error::UnreadableReminder { id, .. } = error {
                    more_unreadable |= unreadable_ids.insert(id);
                }
                first_unreadable.get_or_insert(error);
            }
            if batch.count == 0 && !more_unreadable {
                break;
            }
        }
        let mut ran = self.drain().await?;
        ran.occurrences_fired = fired;
        match first_unreadable {
            Some(error) => Err(error),
            None => Ok(ran),
        }
    }

    /// Runs queued messages that are due at the clock's now until none is left; returns the
    /// turns that ran and how they ended: a failed attempt (its retry waits for its backoff)
    /// is in [`Drained::failed`], a message that became a dead letter (arguments that no longer
    /// decode become one at once) in [`Drained::dead`]. Messages of actor types this runtime
    /// does not know stay queued.
    ///
    /// # Errors
    ///
    /// A turn that could not be attempted at all (an operation this build does not know,
    /// state from a newer build), and the database's errors.
    pub async fn drain(&self) -> Result<Drained> {
        let engine = self.runtime.engine();
        let mut ran = Drained::default();
        loop {
            let pass = engine
                .worker_pass()
                .run_ready(BATCH, TURNS_PER_ACTOR, TurnErrors::Return, &|| false)
                .await?;
            if pass.turns == 0 {
                let pending = engine.effects().unhandled_effects().await?;
                ran.unhandled_effects = pending.into_iter().map(UnhandledEffects::new).collect();
                return Ok(ran);
            }
            ran.add(self.ran(pass).await?);
        }
    }

    /// What one pass of the engine ran, with each failed turn's operation.
    async fn ran(&self, pass: Pass) -> Result<Drained> {
        let mut ran = Drained {
            turns: pass.turns,
            completed: pass.turns - pass.uncompleted.len(),
            ..Drained::default()
        };
        for (actor_type, actor_id, report) in pass.uncompleted {
            let (error, attempts, retry_at) = match report.outcome {
                Outcome::Completed(_) => {
                    ran.completed += 1;
                    continue;
                }
                Outcome::Rejected(_) => {
                    ran.rejected += 1;
                    continue;
                }
                Outcome::Destroyed => {
                    ran.destroyed += 1;
                    continue;
                }
                Outcome::Failed {
                    error,
                    attempts,
                    retry_at,
                } => (error, attempts, retry_at),
            };
            // A failed attempt always keeps its message's row; only a rejection may not.
            let Some(message_id) = report.message_id else {
                continue;
            };
            let operation = self
                .runtime
                .engine()
                .reads()
                .message(MessageLookup::Id(message_id))
                .await?
                .map(|record| record.operation)
                .unwrap_or_default();
            let failed = FailedTurn {
                actor_type,
                actor_id,
                operation,
                message_id,
                attempts,
                error,
            };
            match retry_at {
                Some(_) => ran.failed.push(failed),
                None => ran.dead.push(failed),
            }
        }
        Ok(ran)
    }

    /// Runs the effects due at the clock's now with their handlers until none is left (a
    /// failed attempt waits for its backoff); returns how many attempts ran.
    pub async fn run_effects(&self) -> Result<usize> {
        let mut ran = 0;
        loop {
            let batch = crate::client::effect::run_due(self.runtime, BATCH as usize).await?;
            if batch == 0 {
                return Ok(ran);
            }
            ran += batch;
        }
    }

    /// How the database plans each statement of the charts, for the three windows' shapes
    /// (15 and 60 slices of a minute, 48 of half an hour, ending with the slice under way)
    /// and the page of the actor `actor_type`/`actor_id`: each statement, named after its
    /// window (`15m activity_tallies`), with the steps of its plan, one a line. For tests
    /// that pin the charts' plans on a server; not a stable API.
    #[doc(hidden)]
    pub async fn activity_plans(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<(String, Vec<String>)>> {
        const MINUTE: i64 = 60_000_000;
        let now = crate::time::micros::micros(self.runtime.engine().core().now());
        let actor = crate::store::ActorKey {
            actor_type,
            actor_id,
        };
        let mut plans = Vec::new();
        for (window, width, slices) in [
            ("15m", MINUTE, 15),
            ("1h", MINUTE, 60),
            ("24h", 30 * MINUTE, 48),
        ] {
            let until = now - now.rem_euclid(width) + width;
            let span = crate::store::activity::Span {
                from: until - slices * width,
                until,
                width,
                now,
            };
            let reads = self.runtime.engine().reads();
            for (name, steps) in reads.activity_plans(actor, span).await? {
                plans.push((format!("{window} {name}"), steps));
            }
        }
        Ok(plans)
    }

    /// Does the workers' hourly upkeep now: folds the charts' tallies of the minutes that
    /// ended two minutes ago or more (which the workers also do every minute), prunes what
    /// is past its retention, warns (once per kind) about effects that waited over a minute
    /// with no handler in this runtime, and notes on messages whose operation this build
    /// does not know why they wait.
    pub async fn upkeep(&self) -> Result<()> {
        self.runtime.engine().upkeep().run().await
    }

    /// Delivers a message (a reminder's, say) to an actor as if it came from the mailbox,
    /// bypassing the policy, and runs it; returns the handler's result as JSON.
    ///
    /// Use it to prove that a late or duplicate delivery changes nothing:
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Door {
    ///     closes_at: i64,
    ///     open: bool,
    /// }
    ///
    /// #[actor]
    /// impl Door {
    ///     #[command]
    ///     pub fn open(&mut self, turn: &mut Turn<Self>) -> i64 {
    ///         let at = turn.now() + TimeDelta::minutes(1);
    ///         (self.open, self.closes_at) = (true, at.timestamp());
    ///         turn.schedule(at, "close").close(self.closes_at);
    ///         self.closes_at
    ///     }
    ///
    ///     #[reminder]
    ///     fn close(&mut self, closes_at: i64) {
    ///         if closes_at == self.closes_at {
    ///             self.open = false;
    ///         }
    ///     }
    /// }
    ///
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let runtime = Runtime::builder()
    ///     .sqlite(dir.path().join("doors.db"))
    ///     .clock(ManualClock::starting_now())
    ///     .policy(AllowAll)
    ///     .start()
    ///     .await?;
    /// let door = runtime.reference::<Door>("front");
    /// let first = door.open().await?;
    /// let stale = DoorMessage::Close { closes_at: first - 60 };
    /// runtime.testing().deliver::<Door>("front", stale).await?;
    /// assert!(door.snapshot().await?.open, "a stale close changes nothing");
    /// # Ok(()) }
    /// ```
    pub async fn deliver<A: Actor>(
        &self,
        actor_id: &str,
        message: A::Message,
    ) -> Result<serde_json::Value> {
        let engine = self.runtime.engine();
        engine.register::<A>()?;
        validate_id(actor_id)?;
        let arguments = to_json("arguments", &encode_operation(&message)?.arguments)?;
        let options = crate::engine::CallOptions {
            timeout: self.runtime.sync_timeout(),
            idempotency_key: None,
        };
        let result = engine
            .calls()
            .call::<A>(actor_id, message, arguments, options)
            .await?;
        serde_json::from_str(&result).map_err(|source| crate::Error::Decode {
            what: "result",
            actor_type: A::TYPE_NAME.to_owned(),
            actor_id: actor_id.to_owned(),
            source,
        })
    }
}
