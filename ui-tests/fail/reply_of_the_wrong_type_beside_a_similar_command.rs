//! A reply whose argument is not the effect's outcome, beside a command of a similar name:
//! the error names the types, not the command.

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[derive(Serialize, Deserialize)]
pub struct Count {
    by: u32,
}

impl Effect for Count {
    const NAME: &'static str = "count";
    type Output = u32;
}

#[actor]
impl Counter {
    #[command]
    pub fn bump(&mut self, turn: &mut Turn<Self>, by: u32) {
        turn.emit(Count { by }).on_success().bumped();
    }

    #[reply]
    pub fn bumped(&mut self, total: String) {
        self.value = total.len() as u32;
    }
}

fn main() {}
