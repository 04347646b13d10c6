use solid_objects::prelude::*;

#[path = "../support/ledger_at_version_2.rs"]
mod ledger_at_version_2;

use ledger_at_version_2::Ledger;

struct NotSerde;

#[actor]
impl Ledger {
    #[migrate(from = 1)]
    fn from_v1(old: NotSerde) -> Ledger {
        let _ = old;
        Ledger::default()
    }

    #[query]
    pub fn total(&self) -> u64 {
        self.total
    }
}

fn main() {}
