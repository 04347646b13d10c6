//! A reminder may be named `delay` (or `available_at`): the enqueue builder keeps its own
//! method of that name, and the reference refuses the reminder.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Train {
    late_by: u32,
}

#[actor]
impl Train {
    #[command]
    pub fn depart(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now() + TimeDelta::minutes(5), "d")
            .delay(5);
    }

    #[reminder]
    fn delay(&mut self, minutes: u32) {
        self.late_by += minutes;
    }
}

fn main() {
    let _ = Train::reference("t-1");
}
