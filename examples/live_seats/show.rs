//! One show's seat map: each seat free, held for a few minutes, or sold.

use solid_objects::prelude::*;

/// How long a hold keeps a seat before it is free again.
pub const HOLD_DURATION: TimeDelta = TimeDelta::minutes(2);

/// Where one seat stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Seat {
    #[default]
    Free,
    Held {
        hold_id: String,
        expires_at: i64,
    },
    Sold,
}

/// A show: its seats, by number from 0.
#[actor]
#[derive(Default)]
pub struct Show {
    seats: Vec<Seat>,
    /// Holds made so far: the next hold's number.
    holds_made: u64,
}

/// What a hold gave its buyer: the id to confirm it with, and until when it keeps the seat.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Hold {
    pub hold_id: String,
    pub expires_at: i64,
}

/// What the page shows of a seat: never a hold's id, which only its buyer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeatView {
    Free,
    Held,
    Sold,
}

/// What the page shows of a show.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SeatMap {
    pub seats_left: usize,
    pub seats: Vec<SeatView>,
}

#[actor]
impl Show {
    /// Opens the show with `seats` seats; a show already open stays as it is.
    #[command]
    pub fn open(&mut self, seats: u32) -> usize {
        if self.seats.is_empty() {
            self.seats = vec![Seat::Free; seats as usize];
        }
        self.seats.len()
    }

    /// Holds one free seat for [`HOLD_DURATION`].
    #[command]
    pub fn hold(&mut self, turn: &mut Turn<Self>, seat: u32) -> Result<Hold, Rejection> {
        let Some(place) = self.seats.get_mut(seat as usize) else {
            return Err(reject!(no_such_seat, "There is no seat {}", seat));
        };
        if *place != Seat::Free {
            return Err(reject!(seat_taken, "Seat {} is taken", seat));
        }
        self.holds_made += 1;
        let hold_id = format!("hold-{}", self.holds_made);
        let expires_at = (turn.now() + HOLD_DURATION).timestamp();
        *place = Seat::Held {
            hold_id: hold_id.clone(),
            expires_at,
        };
        let at = turn.now() + HOLD_DURATION;
        turn.schedule(at, &hold_id)
            .expire(hold_id.clone(), expires_at);
        Ok(Hold {
            hold_id,
            expires_at,
        })
    }

    /// Sells the seat a hold keeps, while the hold lasts; returns the seat.
    #[command]
    pub fn confirm(&mut self, turn: &mut Turn<Self>, hold_id: String) -> Result<u32, Rejection> {
        let Some(seat) = self.seat_held_by(&hold_id) else {
            return Err(reject!(
                no_such_hold,
                "The hold {} expired or never was",
                hold_id
            ));
        };
        self.seats[seat] = Seat::Sold;
        turn.unschedule(&hold_id).expire();
        Ok(seat as u32)
    }

    /// Frees a held seat when its hold runs out (a late delivery of an old hold changes
    /// nothing).
    #[reminder]
    fn expire(&mut self, hold_id: String, expires_at: i64) {
        if let Some(seat) = self.seat_held_by(&hold_id) {
            if self.seats[seat]
                == (Seat::Held {
                    hold_id,
                    expires_at,
                })
            {
                self.seats[seat] = Seat::Free;
            }
        }
    }
}

impl Show {
    fn seat_held_by(&self, hold_id: &str) -> Option<usize> {
        self.seats
            .iter()
            .position(|seat| matches!(seat, Seat::Held { hold_id: held, .. } if held == hold_id))
    }

    /// The seat map as the page shows it.
    pub fn view(&self) -> SeatMap {
        let seats: Vec<SeatView> = self
            .seats
            .iter()
            .map(|seat| match seat {
                Seat::Free => SeatView::Free,
                Seat::Held { .. } => SeatView::Held,
                Seat::Sold => SeatView::Sold,
            })
            .collect();
        SeatMap {
            seats_left: seats.iter().filter(|seat| **seat == SeatView::Free).count(),
            seats,
        }
    }
}
