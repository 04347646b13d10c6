//! review8: the builders hold no borrow of the turn, yet `turn.send::<Self>(turn.actor_id())`
//! (sending to this actor, which `Turn::send` documents) still fails with E0502: `send`
//! takes `&mut self` while its own argument borrows the turn.

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
            turn.send::<Self>(turn.actor_id()).tick();
        }
    }
}

fn main() {
    let _ = Countdown::reference("c-1");
}
