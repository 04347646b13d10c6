use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub enum Light {
    #[default]
    Off,
    On,
}

fn main() {}
