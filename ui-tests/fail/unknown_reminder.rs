use solid_objects::prelude::*;

#[path = "../support/alarm.rs"]
mod alarm;

use alarm::Alarm;

#[actor]
impl Alarm {
    #[command]
    pub fn set(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now(), "alarm").rnig();
    }

    #[reminder]
    fn ring(&mut self) {
        self.rung += 1;
    }
}

fn main() {}
