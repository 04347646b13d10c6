//! The desk the administration cases run on, on every backend: it counts, rings a reminder,
//! emits a notification, and fails when told to.

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// A notification that a desk planned a ring.
#[derive(Serialize, Deserialize)]
pub struct Notify {
    /// The desk that emitted it.
    pub desk: String,
}

impl Effect for Notify {
    const NAME: &'static str = "notify";
    type Output = ();
}

/// A desk that counts, rings reminders, notifies, and breaks on demand.
#[actor]
#[derive(Default)]
pub struct Desk {
    /// What was added.
    pub total: i64,
    /// How often the `ring` reminder rang.
    pub rings: u32,
    /// Whether `fragile` and `flaky` fail.
    pub broken: bool,
}

#[actor]
impl Desk {
    /// Adds `n`; answers the total.
    #[command]
    pub fn add(&mut self, n: i64) -> i64 {
        self.total += n;
        self.total
    }

    /// Schedules a ring in `minutes` and emits a notification.
    #[command]
    pub fn plan(&mut self, turn: &mut Turn<Self>, minutes: i64) {
        turn.schedule(turn.now() + TimeDelta::minutes(minutes), "ring")
            .ring();
        turn.emit(Notify {
            desk: turn.actor_id().to_owned(),
        });
    }

    /// Emits a notification for `desk`, whatever text it is.
    #[command]
    pub fn notify(&mut self, turn: &mut Turn<Self>, desk: String) {
        turn.emit(Notify { desk });
    }

    /// Breaks the desk, or mends it.
    #[command]
    pub fn set_broken(&mut self, broken: bool) {
        self.broken = broken;
    }

    /// Fails for good while the desk is broken, with `why` as the error.
    #[command]
    pub fn fragile(&mut self, why: String) -> Result<i64, Failure> {
        if self.broken {
            return Err(Failure::permanent(why));
        }
        self.total += 1;
        Ok(self.total)
    }

    /// Fails and retries (backoff) while the desk is broken.
    #[command]
    pub fn flaky(&mut self) -> Result<(), Failure> {
        if self.broken {
            return Err(Failure::retryable("the printer is jammed"));
        }
        Ok(())
    }

    #[reminder]
    fn ring(&mut self) {
        self.rings += 1;
    }

    /// What was added.
    #[query]
    pub fn total(&self) -> i64 {
        self.total
    }

    /// How often the `ring` reminder rang.
    #[query]
    pub fn rings(&self) -> u32 {
        self.rings
    }
}
