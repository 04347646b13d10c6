use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Light {
    on: bool,
}

#[actor]
impl Light {
    #[command(retries = 3)]
    pub fn flip(&mut self) -> bool {
        self.on = !self.on;
        self.on
    }
}

fn main() {}
