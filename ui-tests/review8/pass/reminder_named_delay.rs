//! review8: a reminder may be named `delay` (or `available_at`): nothing reserves these
//! names, yet the refused method generated for every reminder on `NameEnqueue` collides with
//! the enqueue builder's own `delay`/`available_at` (E0592, duplicate definitions).

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
