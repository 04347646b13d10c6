use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Effect;

#[derive(Serialize, Deserialize)]
pub struct Ping {}

impl Effect for Ping {
    const NAME: &'static str = "ping";
    type Output = ();
}

#[actor]
#[derive(Default)]
pub struct Pinger {
    pings: u32,
}

#[actor]
impl Pinger {
    #[query]
    pub fn pings(&self, turn: &Turn<Self>) -> u32 {
        turn.emit(Ping {});
        self.pings
    }
}

fn main() {}
