use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[command]
    pub fn consume(self) -> u32 {
        self.value
    }
}

fn main() {}
