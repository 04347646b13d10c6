use solid_objects::prelude::*;

#[path = "../support/alarm.rs"]
mod alarm;

use alarm::Alarm;

#[actor]
impl Alarm {
    #[command]
    pub fn set(&mut self) {}

    #[reminder]
    fn ring(&mut self) {
        self.rung += 1;
    }
}

#[actor]
#[derive(Default)]
pub struct Clock {}

#[actor]
impl Clock {
    #[command]
    pub fn tick(&mut self, turn: &mut Turn<Self>) {
        turn.send::<Alarm>("a-1").ring();
    }
}

fn main() {}
