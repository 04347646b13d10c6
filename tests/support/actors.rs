//! Actors and an effect that cases of several files call alike: a tally that counts (and
//! waits at gates, refuses, reminds and notes), and a ledger that keeps its entries (and
//! fails, and forwards to a sink, on demand).

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Effect;

use super::gates::gate;

/// A count that each call adds to, with the names of the reminders it fired.
#[actor]
#[derive(Default)]
pub struct Tally {
    pub count: i64,
    pub fired: Vec<String>,
}

#[actor]
impl Tally {
    /// Adds one; returns the count after it.
    #[command]
    pub fn add(&mut self) -> i64 {
        self.count += 1;
        self.count
    }

    /// Adds one after waiting at the gate `at` (holding the actor's lock meanwhile).
    #[command]
    pub async fn add_at(&mut self, at: String) -> i64 {
        gate(&at).pass().await;
        self.add()
    }

    /// Refuses after waiting at the gate `at`.
    #[command]
    pub async fn refuse_at(&mut self, at: String) -> Result<i64, Rejection> {
        gate(&at).pass().await;
        Err(reject!(refused, "Refused at {at}"))
    }

    /// Schedules `name` to fire a minute from now.
    #[command]
    pub fn remind(&mut self, turn: &mut Turn<Self>, name: String) {
        turn.schedule(turn.now() + TimeDelta::minutes(1), name.clone())
            .fire(name);
    }

    /// Holds the actor's row lock forever: a turn that never ends.
    #[command]
    pub async fn stall(&mut self) {
        std::future::pending::<()>().await;
    }

    /// Emits the effect `Noted` named `name`.
    #[command]
    pub fn note(&mut self, turn: &mut Turn<Self>, name: String) {
        turn.emit(Noted { name });
    }

    #[reminder]
    pub fn fire(&mut self, name: String) {
        self.fired.push(name);
    }
}

/// An effect whose runs a case counts, by name.
#[derive(Serialize, Deserialize)]
pub struct Noted {
    pub name: String,
}

impl Effect for Noted {
    const NAME: &'static str = "noted";
    type Output = ();
}

/// Keeps every entry it is given.
#[actor]
#[derive(Default)]
pub struct Ledger {
    pub entries: Vec<String>,
}

#[actor]
impl Ledger {
    /// Appends `entry`; returns how many entries there are.
    #[command]
    pub fn record(&mut self, entry: String) -> usize {
        self.entries.push(entry);
        self.entries.len()
    }

    /// Fails for good, saying `why`.
    #[command]
    pub fn fragile(&mut self, why: String) -> Result<(), Failure> {
        Err(Failure::permanent(why))
    }

    /// Sends `take("once")` to the sink "target" under the idempotency key `key`.
    #[command]
    pub fn forward(&mut self, turn: &mut Turn<Self>, key: String) {
        turn.send::<Sink>("target")
            .idempotency_key(key)
            .take("once");
    }

    #[query]
    pub fn count(&self) -> usize {
        self.entries.len()
    }
}

/// Takes what a ledger forwards.
#[actor]
#[derive(Default)]
pub struct Sink {
    taken: Vec<String>,
}

#[actor]
impl Sink {
    /// Keeps `what`; returns how much it took.
    #[command]
    pub fn take(&mut self, what: String) -> usize {
        self.taken.push(what);
        self.taken.len()
    }
}
