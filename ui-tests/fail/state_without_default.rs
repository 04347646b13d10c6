//! An actor's state without `Default`: one error, which says to derive it.

use solid_objects::prelude::*;

#[actor]
pub struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[command]
    pub fn bump(&mut self) -> u32 {
        self.value += 1;
        self.value
    }

    #[query]
    pub fn value(&self) -> u32 {
        self.value
    }
}

fn main() {}
