use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Light {
    on: bool,
}

#[actor]
impl Light {
    #[query]
    pub fn snapshot(&self) -> bool {
        self.on
    }
}

fn main() {}
