use solid_objects::prelude::*;

#[derive(Debug, Rejection)]
enum HoldError {
    #[rejection(code = "NotEnough")]
    NotEnoughSeats { left: u32 },
    InvalidSeats,
}

fn main() {}
