//! A query that schedules: the error says that a query cannot, and that a command can.

use solid_objects::prelude::*;

#[path = "../support/alarm.rs"]
mod alarm;

use alarm::Alarm;

#[actor]
impl Alarm {
    #[query]
    pub fn rung(&self, turn: &Turn<Self>) -> u32 {
        turn.schedule(turn.now(), "again").ring();
        self.rung
    }

    #[reminder]
    fn ring(&mut self) {
        self.rung += 1;
    }
}

fn main() {}
