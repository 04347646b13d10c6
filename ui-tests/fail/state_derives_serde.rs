use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

#[actor]
#[derive(Default, Serialize, Deserialize)]
pub struct Counter {
    count: u32,
}

fn main() {}
