use solid_objects::prelude::*;

#[path = "../support/alarm.rs"]
mod alarm;

use alarm::Alarm;

#[actor]
impl Alarm {
    #[command]
    pub fn set(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now(), "alarm").ring("loud");
    }

    #[reminder]
    fn ring(&mut self, times: u32) {
        self.rung += times;
    }
}

fn main() {}
