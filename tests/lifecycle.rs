//! Actors that live for years: typed rejections, destroy and incarnations, state versions
//! and migrations, recurring reminders, and effects that report back to their actor.

mod support;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use support::Harness;

/// Why a hold is refused, as a caller can match on it.
#[derive(Debug, PartialEq, Rejection)]
enum HoldError {
    #[rejection(message = "Only {left} seats are left")]
    NotEnoughSeats {
        left: u32,
    },
    InvalidSeats,
    #[rejection(code = "sold_out")]
    Gone(String),
}

#[derive(Default, Serialize, Deserialize)]
struct Seats {
    left: u32,
}

#[actor]
#[derive(Default)]
struct Venue {
    seats: Seats,
}

#[actor]
impl Venue {
    #[command]
    fn open(&mut self, seats: u32) {
        self.seats.left = seats;
    }

    #[command]
    fn hold(&mut self, seats: i64) -> Result<u32, HoldError> {
        let seats = u32::try_from(seats).map_err(|_| HoldError::InvalidSeats)?;
        if self.seats.left == 0 {
            return Err(HoldError::Gone("the show is sold out".to_owned()));
        }
        if seats > self.seats.left {
            return Err(HoldError::NotEnoughSeats {
                left: self.seats.left,
            });
        }
        self.seats.left -= seats;
        Ok(self.seats.left)
    }
}

#[tokio::test]
async fn a_typed_rejection_reaches_the_caller_as_its_own_enum() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let venue = runtime.reference::<Venue>("v");
    venue.open(3).await.unwrap();

    let too_many = venue.hold(5).await.unwrap_err();
    let negative = venue.hold(-1).await.unwrap_err();
    let queued = venue.enqueue().hold(4).await.unwrap();
    queued.wait(TimeDelta::seconds(5)).await.unwrap_err();
    let later = queued.result().await.unwrap_err();
    venue.hold(3).await.unwrap();
    let gone = venue.hold(1).await.unwrap_err();

    assert_eq!(
        too_many.rejection::<HoldError>(),
        Some(HoldError::NotEnoughSeats { left: 3 })
    );
    assert_eq!(
        too_many.to_string(),
        "rejected: not_enough_seats: Only 3 seats are left"
    );
    assert_eq!(
        negative.rejection::<HoldError>(),
        Some(HoldError::InvalidSeats)
    );
    assert_eq!(
        later.rejection::<HoldError>(),
        Some(HoldError::NotEnoughSeats { left: 3 })
    );
    assert_eq!(
        gone.rejection::<HoldError>(),
        Some(HoldError::Gone("the show is sold out".to_owned()))
    );
    assert!(matches!(&gone, Error::Rejected(rejection) if rejection.code == "sold_out"));
    runtime.close().await;
}
