use solid_objects::prelude::*;

#[path = "../support/ledger_at_version_3.rs"]
mod ledger_at_version_3;

use ledger_at_version_3::Ledger;

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
