//! The guides' box office, as a simulated run works it: shows whose seat holds expire by
//! reminder unless confirmed, with a recurring tick, and tickets that lapse by reminder and
//! are voided by destroying them.

use std::collections::BTreeMap;

use solid_objects::prelude::*;

/// The shows the runs' holds are on.
pub(crate) const SHOWS: usize = 2;

/// The seats of a show.
pub(crate) const CAPACITY: u32 = 6;

/// How long a hold lasts unless confirmed.
const HOLD_FOR: TimeDelta = TimeDelta::seconds(5);

/// How often a show's recurring tick comes.
pub(crate) const TICK_EVERY: TimeDelta = TimeDelta::seconds(4);

/// The occurrences of a show's tick before it stops itself.
pub(crate) const TICKS: usize = 5;

/// How long after its issue a ticket lapses.
const LAPSE_AFTER: TimeDelta = TimeDelta::seconds(3);

/// A show: holds that expire unless confirmed, and the occurrences of its recurring tick
/// (by the time each was scheduled for, in seconds), which stops itself after [`TICKS`].
#[actor]
#[derive(Debug, Default)]
pub(crate) struct Show {
    pub(crate) holds: BTreeMap<u64, u32>,
    pub(crate) confirmed: BTreeMap<u64, u32>,
    pub(crate) expired: Vec<u64>,
    pub(crate) ticks: Vec<i64>,
}

impl Show {
    fn seats_taken(&self) -> u32 {
        self.holds.values().chain(self.confirmed.values()).sum()
    }
}

#[actor]
impl Show {
    /// Holds `seats` for `entry` until it expires; the show's first hold starts its tick.
    #[command]
    pub(crate) fn hold(
        &mut self,
        turn: &mut Turn<Self>,
        entry: u64,
        seats: u32,
    ) -> Result<u32, Rejection> {
        if self.seats_taken() + seats > CAPACITY {
            return Err(reject!(sold_out, "Not {seats} seats left"));
        }
        if self.holds.is_empty() && self.confirmed.is_empty() && self.expired.is_empty() {
            turn.schedule_every(TICK_EVERY, "tick").tick();
        }
        self.holds.insert(entry, seats);
        turn.schedule(turn.now() + HOLD_FOR, format!("h-{entry}"))
            .expire(entry);
        Ok(CAPACITY - self.seats_taken())
    }

    /// Confirms the hold `hold` before it expires.
    #[command]
    pub(crate) fn confirm(&mut self, turn: &mut Turn<Self>, hold: u64) -> Result<(), Rejection> {
        let Some(seats) = self.holds.remove(&hold) else {
            return Err(reject!(no_hold, "Hold {hold} expired or never was"));
        };
        self.confirmed.insert(hold, seats);
        turn.unschedule(format!("h-{hold}")).expire();
        Ok(())
    }

    /// A hold's time is up: it is let go unless it was confirmed.
    #[reminder]
    fn expire(&mut self, entry: u64) {
        if self.holds.remove(&entry).is_some() {
            self.expired.push(entry);
        }
    }

    /// One occurrence of the recurring tick; the last one unschedules it. An occurrence
    /// that fired before that turn is in the mailbox already, and the guard keeps it out.
    #[reminder]
    fn tick(&mut self, turn: &mut Turn<Self>) {
        if self.ticks.len() == TICKS {
            return;
        }
        let at = turn
            .scheduled_at()
            .unwrap_or_else(|| turn.now())
            .timestamp();
        self.ticks.push(at);
        if self.ticks.len() == TICKS {
            turn.unschedule("tick").tick();
        }
    }
}

/// A ticket: issued for an entry, lapsed by its reminder, voided by its destruction (which
/// ends its reminder with its incarnation).
#[actor]
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) issued: Option<u64>,
    pub(crate) lapsed: bool,
}

#[actor]
impl Ticket {
    #[command]
    pub(crate) fn issue(&mut self, turn: &mut Turn<Self>, entry: u64) {
        self.issued = Some(entry);
        turn.schedule(turn.now() + LAPSE_AFTER, "lapse").lapse();
    }

    #[reminder]
    fn lapse(&mut self) {
        self.lapsed = true;
    }

    /// Voids the ticket: its state and reminders end with this incarnation.
    #[command]
    pub(crate) fn void(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }
}

/// The show's id.
pub(crate) fn show(show: usize) -> String {
    format!("s-{show}")
}

/// The id of the ticket issued by operation `entry`.
pub(crate) fn ticket(entry: u64) -> String {
    format!("t-{entry}")
}
