use solid_objects::prelude::*;

#[derive(Debug, Rejection)]
enum HoldError {
    #[rejection(status = 200)]
    Taken,
    #[rejection(status = 503)]
    Closed,
}

fn main() {}
