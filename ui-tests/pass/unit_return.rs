//! A command with no return value returns `()` to its caller.

use solid_objects::prelude::*;

#[path = "../support/light.rs"]
mod light;

use light::Light;

#[actor]
impl Light {
    #[command]
    pub fn switch_on(&mut self) {
        self.on = true;
    }
}

async fn caller() -> Result<(), Error> {
    Light::reference("hall").switch_on().await
}

fn main() {
    let _ = caller();
}
