use solid_objects::prelude::*;

fn main() {
    let _ = reject!(NotEnoughSeats, "Only {} seats are left", 2);
}
