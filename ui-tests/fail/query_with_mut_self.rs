use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[query]
    pub fn value(&mut self) -> u32 {
        self.value
    }
}

fn main() {}
