use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[command]
    pub fn peek(&self) -> u32 {
        self.value
    }
}

fn main() {}
