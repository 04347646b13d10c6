//! A command that needs neither the time nor reminders takes no turn.

use solid_objects::prelude::*;

#[path = "../support/counter.rs"]
mod counter;

use counter::Counter;

#[actor]
impl Counter {
    #[command]
    pub fn add(&mut self, by: u32, note: String) -> u32 {
        let _ = note;
        self.value += by;
        self.value
    }
}

async fn caller(counter: CounterRef) -> Result<u32, Error> {
    counter.add(2, "a &str is accepted for a String argument").await
}

fn main() {
    let _ = caller(Counter::reference("c-1"));
}
