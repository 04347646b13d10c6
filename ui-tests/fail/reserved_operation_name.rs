use solid_objects::prelude::*;

#[path = "../support/light.rs"]
mod light;

use light::Light;

#[actor]
impl Light {
    #[query]
    pub fn snapshot(&self) -> bool {
        self.on
    }
}

fn main() {}
