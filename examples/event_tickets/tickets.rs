//! Ticket holds for one event: the race-conditions guide's actor.
//!
//! Each buyer holds at most one seat for 10 minutes. Every path (hold, confirm, the expiry
//! reminder, a client's retry) runs in the event's mailbox, one at a time, so none of them
//! needs a lock; each checks the stored deadline, so late or duplicate deliveries are harmless.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// How long a hold lasts.
pub const HOLD_DURATION: TimeDelta = TimeDelta::minutes(10);

/// One buyer's hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketHold {
    pub hold_id: String,
    /// The deadline, in Unix seconds.
    pub expires_at: i64,
}

/// The answer to a hold request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "held", rename_all = "snake_case")]
pub enum HoldOutcome {
    /// The buyer holds a seat under `hold_id`.
    Held { hold_id: String },
    /// The buyer already holds a seat under another hold id.
    AlreadyHeld,
    /// No seat is left.
    SoldOut,
}

/// One event's seats and holds.
#[actor]
#[derive(Debug, Default)]
pub struct EventTickets {
    pub opened: bool,
    pub seats_available: u32,
    /// Holds by buyer.
    pub holds: BTreeMap<String, TicketHold>,
    pub sold: Vec<String>,
    pub title: String,
    pub revision: u64,
}

#[actor]
impl EventTickets {
    /// Opens sales with `seats` seats, once; returns the seats available.
    #[command]
    pub fn open_sales(&mut self, seats: u32) -> u32 {
        if !self.opened {
            self.opened = true;
            self.seats_available = seats;
        }
        self.seats_available
    }

    /// Holds one seat for `buyer`. A retry with the same ids returns the same hold.
    #[command]
    pub fn hold(&mut self, turn: &mut Turn<Self>, buyer: String, hold_id: String) -> HoldOutcome {
        self.release_expired_holds(turn.now());
        match self.holds.get(&buyer) {
            Some(hold) if hold.hold_id == hold_id => return HoldOutcome::Held { hold_id },
            Some(_) => return HoldOutcome::AlreadyHeld,
            None if self.seats_available == 0 => return HoldOutcome::SoldOut,
            None => {}
        }
        let deadline = turn.now() + HOLD_DURATION;
        let expires_at = deadline.timestamp();
        self.seats_available -= 1;
        self.holds.insert(
            buyer.clone(),
            TicketHold {
                hold_id: hold_id.clone(),
                expires_at,
            },
        );
        turn.schedule(deadline, &buyer)
            .expire(buyer.clone(), hold_id.clone(), expires_at);
        HoldOutcome::Held { hold_id }
    }

    /// Sells the buyer's hold. A retry after the sale returns the same result.
    #[command]
    pub fn confirm(
        &mut self,
        turn: &mut Turn<Self>,
        buyer: String,
        hold_id: String,
    ) -> Result<(), Rejection> {
        if self.sold.contains(&hold_id) {
            return Ok(());
        }
        self.release_expired_holds(turn.now());
        if self.holds.get(&buyer).map(|hold| &hold.hold_id) != Some(&hold_id) {
            return Err(reject!(no_hold, "The hold expired or does not exist"));
        }
        self.holds.remove(&buyer);
        self.sold.push(hold_id);
        turn.unschedule(&buyer).expire();
        Ok(())
    }

    /// Releases the hold only if both its id and its deadline still match.
    #[reminder]
    fn expire(&mut self, buyer: String, hold_id: String, expires_at: i64) -> u32 {
        let expected = TicketHold {
            hold_id,
            expires_at,
        };
        if self.holds.get(&buyer) == Some(&expected) {
            self.holds.remove(&buyer);
            self.seats_available += 1;
        }
        self.seats_available
    }

    /// Changes the title if the form was loaded at the current revision.
    #[command]
    pub fn update_details(&mut self, title: String, base_revision: u64) -> Result<u64, Rejection> {
        if base_revision != self.revision {
            return Err(reject!(stale_revision, "Reload the event and try again"));
        }
        self.title = title;
        self.revision += 1;
        Ok(self.revision)
    }

    /// The seats neither held nor sold, as last committed.
    #[query]
    pub fn seats_available(&self) -> u32 {
        self.seats_available
    }

    fn release_expired_holds(&mut self, now: DateTime<Utc>) {
        let before = self.holds.len();
        self.holds
            .retain(|_, hold| hold.expires_at > now.timestamp());
        self.seats_available += u32::try_from(before - self.holds.len()).unwrap_or(u32::MAX);
    }
}
