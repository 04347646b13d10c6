//! `#[cfg(..)]` on an operation goes onto everything generated for it: under a cfg that is
//! off, the operation is gone from the reference, the messages and the builders, and the
//! actor compiles without it.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Lamp {
    on: bool,
}

#[actor]
impl Lamp {
    #[command]
    pub fn switch(&mut self, turn: &mut Turn<Self>, on: bool) {
        self.on = on;
        #[cfg(any())]
        turn.schedule(turn.now(), "off").switch_off();
        let _ = turn;
    }

    #[cfg(any())]
    #[command]
    pub fn debug_toggle(&mut self) {
        self.on = !self.on;
    }

    #[command]
    #[cfg(any())]
    pub fn debug_set(&mut self, on: bool) {
        self.on = on;
    }

    #[cfg(any())]
    #[query]
    pub fn debug_state(&self) -> bool {
        self.on
    }

    #[cfg(any())]
    #[reminder]
    fn switch_off(&mut self) {
        self.on = false;
    }

    #[cfg(all())]
    #[query]
    pub fn is_on(&self) -> bool {
        self.on
    }
}

async fn caller() {
    let lamp = Lamp::reference("l-1");
    let _ = lamp.switch(true).await;
    let _ = lamp.is_on().await;
}

fn main() {
    let _ = caller();
    assert_eq!(
        <LampMessage as solid_objects::Operations>::NAMES,
        ["switch"]
    );
}
