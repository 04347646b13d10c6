use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
#[derive(Default)]
pub struct Other {}

#[actor]
impl Other {
    #[command]
    pub fn noop(&mut self) {}
}

#[actor]
impl Counter {
    #[command]
    pub fn bump(&mut self, turn: &mut Turn<Other>) -> u32 {
        let _ = turn.now();
        self.value += 1;
        self.value
    }
}

fn main() {}
