use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Ledger {
    total: i64,
}

#[actor]
impl Ledger {
    #[command]
    pub fn add(&mut self, cents: i64) -> i64 {
        self.total += cents;
        self.total
    }

    #[query]
    pub fn total(&self, turn: &Turn<Self>) -> i64 {
        turn.send::<Ledger>("audit").add(self.total);
        self.total
    }
}

fn main() {}
