use solid_objects::prelude::*;

/// Not serialisable: a rejection's fields are its stored details.
#[derive(Debug)]
pub struct Seat(u32);

#[derive(Debug, Rejection)]
enum HoldError {
    Taken { seat: Seat },
}

fn main() {}
