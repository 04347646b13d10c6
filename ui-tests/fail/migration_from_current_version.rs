use solid_objects::prelude::*;

#[path = "../support/ledger_at_version_2.rs"]
mod ledger_at_version_2;

use ledger_at_version_2::Ledger;

#[actor]
impl Ledger {
    #[migrate(from = 1)]
    fn from_v1(old: serde_json::Value) -> serde_json::Value {
        old
    }

    #[migrate(from = 2)]
    fn from_v2(old: serde_json::Value) -> serde_json::Value {
        old
    }

    #[query]
    pub fn total(&self) -> u64 {
        self.total
    }
}

fn main() {}
