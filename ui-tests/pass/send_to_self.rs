//! An actor sends to itself with `turn.send_to_self()` (`turn.send::<Self>(turn.actor_id())`
//! cannot compile: `send` takes the turn mutably while its argument borrows it).

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Countdown {
    left: u32,
}

#[actor]
impl Countdown {
    #[command]
    pub fn tick(&mut self, turn: &mut Turn<Self>) {
        if self.left > 0 {
            self.left -= 1;
            turn.send_to_self().tick();
        }
    }
}

fn main() {
    let _ = Countdown::reference("c-1");
}
