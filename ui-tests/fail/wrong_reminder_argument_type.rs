use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Alarm {
    rung: u32,
}

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
