use solid_objects::prelude::*;

/// A struct that is not an effect: it does not implement `Effect`.
pub struct Invoice {
    pub total: u64,
}

#[actor(effects(Invoice))]
#[derive(Default)]
pub struct Billing {
    sent: u32,
}

fn main() {}
