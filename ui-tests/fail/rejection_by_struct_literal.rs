//! A rejection's code is always snake_case: it cannot be built by hand around the checks.
use solid_objects::prelude::*;

fn refuse() -> Rejection {
    Rejection {
        code: "room not found".to_owned(),
        message: "No room 12".to_owned(),
        details: None,
    }
}

fn main() {
    let _ = refuse();
}
