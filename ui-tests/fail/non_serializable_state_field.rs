use solid_objects::prelude::*;

#[derive(Default)]
pub struct Handle(u32);

#[actor]
#[derive(Default)]
pub struct Vault {
    handle: Handle,
}

fn main() {}
