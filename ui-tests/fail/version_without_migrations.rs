// `#[actor(version = 2)]` with no `#[migrate]` at all: every state stored before (version 1,
// the default of every row written before versions existed) is read by no migration, so
// its messages wait for ever. A chain that stops short of the version is a compile error
// (migration_chain_short_of_version.rs); an empty chain must be one too.
use solid_objects::prelude::*;

#[path = "../support/ledger_at_version_2.rs"]
mod ledger_at_version_2;

use ledger_at_version_2::Ledger;

#[actor]
impl Ledger {
    #[query]
    pub fn total(&self) -> u64 {
        self.total
    }
}

fn main() {}
