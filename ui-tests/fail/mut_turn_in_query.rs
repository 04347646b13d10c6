use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[query]
    pub fn value(&self, turn: &mut Turn<Self>) -> u32 {
        let _ = turn.now();
        self.value
    }
}

fn main() {}
