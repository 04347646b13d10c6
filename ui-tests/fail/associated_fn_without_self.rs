use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u32,
}

#[actor]
impl Counter {
    #[command]
    pub fn create(value: u32) -> u32 {
        value
    }
}

fn main() {}
