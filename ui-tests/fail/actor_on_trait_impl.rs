use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Light {
    on: bool,
}

#[actor]
impl Clone for Light {
    fn clone(&self) -> Self {
        Self { on: self.on }
    }
}

fn main() {}
