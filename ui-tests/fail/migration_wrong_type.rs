use solid_objects::prelude::*;

#[actor(version = 2)]
#[derive(Default)]
pub struct Ledger {
    total: u64,
}

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
