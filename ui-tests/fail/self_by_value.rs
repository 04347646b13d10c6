use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[command]
    pub fn consume(self) -> u32 {
        self.value
    }
}

fn main() {}
