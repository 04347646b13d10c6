use solid_objects::prelude::*;

#[path = "../support/alarm.rs"]
mod alarm;

use alarm::Alarm;

#[actor]
impl Alarm {
    #[reminder]
    pub fn ring(&mut self) {
        self.rung += 1;
    }
}

async fn caller() {
    let _ = Alarm::reference("a-1").enqueue().ring().await;
}

fn main() {
    let _ = caller();
}
