//! A command that needs neither the time nor reminders takes no turn.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Counter {
    value: u64,
}

#[actor]
impl Counter {
    #[command]
    pub fn add(&mut self, by: u64, note: String) -> u64 {
        let _ = note;
        self.value += by;
        self.value
    }
}

async fn caller(counter: CounterRef) -> Result<u64, Error> {
    counter.add(2, "a &str is accepted for a String argument").await
}

fn main() {
    let _ = caller(Counter::reference("c-1"));
}
