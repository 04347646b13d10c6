use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u32,
}

impl Counter {
    #[command]
    pub fn bump(&mut self) -> u32 {
        self.value += 1;
        self.value
    }
}

fn main() {}
