use solid_objects::prelude::*;

#[actor(version = 3)]
#[derive(Default)]
pub struct Ledger {
    total: u64,
}

#[actor]
impl Ledger {
    #[migrate(from = 1)]
    fn from_v1(old: serde_json::Value) -> serde_json::Value {
        old
    }

    #[query]
    pub fn total(&self) -> u64 {
        self.total
    }
}

fn main() {}
