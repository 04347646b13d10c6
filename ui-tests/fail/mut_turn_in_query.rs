use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[query]
    pub fn value(&self, turn: &mut Turn<Self>) -> u32 {
        let _ = turn.now();
        self.value
    }
}

fn main() {}
