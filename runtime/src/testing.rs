//! The testing API: drive reminders and queued messages by hand in a user's tests.
//!
//! With a [`ManualClock`](crate::ManualClock), a test moves time, fires what is due, drains
//! the mailboxes, and delivers messages directly (as a late or duplicate delivery would),
//! without workers and without sleeping.

use std::collections::HashSet;

use crate::actor::Actor;
use crate::codec::{encode_operation, to_json};
use crate::engine::TurnErrors;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::validate::validate_id;

/// How many reminders one firing pass takes, how many actors one drain pass visits, and how
/// many effects of each kind one pass runs.
const BATCH: i64 = 1000;
/// Turns one actor gets per drain pass before the others get theirs.
const TURNS_PER_ACTOR: usize = 1000;

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
    /// mailboxes; returns how many reminders fired. A stored reminder that cannot be fired
    /// ([`Error::UnreadableReminder`](crate::Error::UnreadableReminder)) is left as it is
    /// and returned as the error, after the others fired and ran.
    pub async fn run_due_reminders(&self) -> Result<usize> {
        let engine = self.runtime.engine();
        let mut fired = 0;
        let (mut first_unreadable, mut unreadable_ids) = (None, HashSet::new());
        loop {
            let batch = engine.fire_due_reminders(BATCH).await?;
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
        self.drain().await?;
        match first_unreadable {
            Some(error) => Err(error),
            None => Ok(fired),
        }
    }

    /// Runs queued messages that are due at the clock's now until none is left; returns how
    /// many turns ran. Messages of actor types this runtime does not know stay queued; a turn
    /// that fails with an error (a stored message that does not decode, say) is returned.
    pub async fn drain(&self) -> Result<usize> {
        let engine = self.runtime.engine();
        let mut turns = 0;
        loop {
            let ran = engine
                .run_ready(BATCH, TURNS_PER_ACTOR, TurnErrors::Return, &|| false)
                .await?;
            if ran == 0 {
                return Ok(turns);
            }
            turns += ran;
        }
    }

    /// Runs the effects due at the clock's now with their handlers until none is left (a
    /// failed attempt waits for its backoff); returns how many attempts ran.
    pub async fn run_effects(&self) -> Result<usize> {
        let mut ran = 0;
        loop {
            let batch = crate::effect::run_due(self.runtime, BATCH as usize).await?;
            if batch == 0 {
                return Ok(ran);
            }
            ran += batch;
        }
    }

    /// Does the workers' hourly upkeep now: prunes what is past its retention, warns (once
    /// per kind) about effects that waited over a minute with no handler in this runtime,
    /// and notes on messages whose operation this build does not know why they wait.
    pub async fn upkeep(&self) -> Result<()> {
        self.runtime.engine().upkeep().await
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
