use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[command]
    pub fn create(value: u32) -> u32 {
        value
    }
}

fn main() {}
