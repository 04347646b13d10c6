use solid_objects::prelude::*;

#[actor(table = "lights")]
#[derive(Default)]
pub struct Light {
    on: bool,
}

fn main() {}
