use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[query]
    pub fn value(&mut self) -> u32 {
        self.value
    }
}

fn main() {}
