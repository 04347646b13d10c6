//! The seat inventory of one show: capacity, holds that expire, confirmed seats.
//!
//! The expiring-reservations guide's actor. The stored deadline is the rule: a hold past its
//! deadline no longer counts and cannot be confirmed or extended, whether or not its expiry
//! reminder has run; the reminder only cleans up, and only if its deadline still matches.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// How long a new hold lasts.
pub const HOLD_DURATION: TimeDelta = TimeDelta::minutes(15);
/// How much one extension adds.
pub const EXTENSION: TimeDelta = TimeDelta::minutes(5);
/// How many times a hold can be extended.
pub const MAX_EXTENSIONS: u32 = 2;

/// Seats held for a buyer until a deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub buyer: String,
    pub seats: u32,
    /// The deadline, in Unix seconds.
    pub expires_at: i64,
    pub extensions: u32,
}

/// Where a hold stands after `hold`, `extend_hold` or `confirm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum HoldStatus {
    /// The seats are held until `expires_at` (Unix seconds).
    Held { expires_at: i64 },
    /// The seats are sold.
    Confirmed,
}

/// Charge the buyer for a held hold: an effect, run after the turn that emits it commits.
/// Its handler passes `EffectContext::id()` to the payment provider as the idempotency key,
/// then confirms the hold (or refunds if the hold expired meanwhile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeHold {
    pub hold_id: String,
    pub buyer: String,
    pub seats: u32,
}

impl solid_objects::Effect for ChargeHold {
    const NAME: &'static str = "charge_hold";
    type Output = ();
}

/// One show's seats.
#[actor]
#[derive(Debug, Default)]
pub struct SeatInventory {
    pub capacity: u32,
    pub holds: BTreeMap<String, Hold>,
    pub confirmed: BTreeMap<String, u32>,
}

#[actor]
impl SeatInventory {
    /// Sets the capacity once; returns the seats available.
    #[command]
    pub fn open_show(&mut self, turn: &Turn<Self>, capacity: u32) -> u32 {
        if self.capacity == 0 {
            self.capacity = capacity;
        }
        self.seats_available(turn.now())
    }

    /// Holds `seats` for 15 minutes. A retry with the same `hold_id` returns the same hold.
    #[command]
    pub fn hold(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
        buyer: String,
        seats: i64,
    ) -> Result<HoldStatus, Rejection> {
        let Some(seats) = u32::try_from(seats).ok().filter(|seats| *seats > 0) else {
            return Err(reject!(invalid_seats, "Hold at least one seat"));
        };
        let now = turn.now();
        if let Some(hold) = self.active_hold(&hold_id, now) {
            return Ok(HoldStatus::Held {
                expires_at: hold.expires_at,
            });
        }
        if self.confirmed.contains_key(&hold_id) {
            return Ok(HoldStatus::Confirmed);
        }
        let available = self.seats_available(now);
        if seats > available {
            return Err(reject!(not_enough_seats, "Only {available} seats are left"));
        }
        let deadline = now + HOLD_DURATION;
        let expires_at = deadline.timestamp();
        self.holds.insert(
            hold_id.clone(),
            Hold {
                buyer,
                seats,
                expires_at,
                extensions: 0,
            },
        );
        turn.schedule(deadline, &hold_id)
            .expire(hold_id.clone(), expires_at);
        Ok(HoldStatus::Held { expires_at })
    }

    /// Adds 5 minutes to an active hold, at most twice; moves its expiry reminder.
    #[command]
    pub fn extend_hold(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
    ) -> Result<HoldStatus, Rejection> {
        let now = turn.now();
        let Some(hold) = self.active_hold(&hold_id, now) else {
            return Err(reject!(no_hold, "The hold expired or does not exist"));
        };
        if hold.extensions >= MAX_EXTENSIONS {
            return Err(reject!(
                extension_limit,
                "The hold cannot be extended again"
            ));
        }
        let deadline = seconds(hold.expires_at) + EXTENSION;
        let expires_at = deadline.timestamp();
        if let Some(hold) = self.holds.get_mut(&hold_id) {
            hold.expires_at = expires_at;
            hold.extensions += 1;
        }
        turn.schedule(deadline, &hold_id)
            .expire(hold_id.clone(), expires_at);
        Ok(HoldStatus::Held { expires_at })
    }

    /// Stages the payment of an active hold; the charge runs after this turn commits, and
    /// its handler confirms the hold.
    #[command]
    pub fn pay(&mut self, turn: &mut Turn<Self>, hold_id: String) -> Result<HoldStatus, Rejection> {
        if self.confirmed.contains_key(&hold_id) {
            return Ok(HoldStatus::Confirmed);
        }
        let Some(hold) = self.active_hold(&hold_id, turn.now()).cloned() else {
            return Err(reject!(no_hold, "The hold expired or does not exist"));
        };
        turn.emit(ChargeHold {
            hold_id,
            buyer: hold.buyer,
            seats: hold.seats,
        });
        Ok(HoldStatus::Held {
            expires_at: hold.expires_at,
        })
    }

    /// Sells an active hold's seats and cancels its expiry. A retry returns the same result.
    #[command]
    pub fn confirm(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
    ) -> Result<HoldStatus, Rejection> {
        if self.confirmed.contains_key(&hold_id) {
            return Ok(HoldStatus::Confirmed);
        }
        if self.active_hold(&hold_id, turn.now()).is_none() {
            return Err(reject!(no_hold, "The hold expired or does not exist"));
        }
        if let Some(hold) = self.holds.remove(&hold_id) {
            self.confirmed.insert(hold_id.clone(), hold.seats);
        }
        turn.unschedule(&hold_id).expire();
        Ok(HoldStatus::Confirmed)
    }

    /// Removes the hold if its stored deadline is still `expires_at`; a stale or duplicate
    /// delivery changes nothing. Returns the seats available.
    #[reminder]
    fn expire(&mut self, turn: &mut Turn<Self>, hold_id: String, expires_at: i64) -> u32 {
        if self
            .holds
            .get(&hold_id)
            .is_some_and(|hold| hold.expires_at == expires_at)
        {
            self.holds.remove(&hold_id);
        }
        self.seats_available(turn.now())
    }

    /// The seats neither confirmed nor held by an active hold.
    #[query]
    pub fn seats_left(&self, turn: &Turn<Self>) -> u32 {
        self.seats_available(turn.now())
    }

    fn active_hold(&self, hold_id: &str, now: DateTime<Utc>) -> Option<&Hold> {
        self.holds
            .get(hold_id)
            .filter(|hold| hold.expires_at > now.timestamp())
    }

    fn seats_available(&self, now: DateTime<Utc>) -> u32 {
        let held: u32 = self
            .holds
            .values()
            .filter(|hold| hold.expires_at > now.timestamp())
            .map(|hold| hold.seats)
            .sum();
        let confirmed: u32 = self.confirmed.values().sum();
        self.capacity.saturating_sub(held + confirmed)
    }
}

fn seconds(timestamp: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(timestamp, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
