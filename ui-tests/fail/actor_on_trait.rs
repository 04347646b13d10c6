use solid_objects::prelude::*;

#[actor]
pub trait Switch {
    fn flip(&mut self);
}

fn main() {}
