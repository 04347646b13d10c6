use solid_objects::prelude::*;

#[path = "../support/light.rs"]
mod light;

use light::Light;

#[actor]
impl Light {
    #[command(retries = 3)]
    pub fn flip(&mut self) -> bool {
        self.on = !self.on;
        self.on
    }
}

fn main() {}
