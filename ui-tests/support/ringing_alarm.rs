//! `Alarm` with its reminder, for the cases whose mistake is in how a caller reaches that
//! reminder.

use solid_objects::prelude::*;

#[path = "alarm.rs"]
mod alarm;

pub use alarm::Alarm;

#[actor]
impl Alarm {
    /// Rings once more.
    #[reminder]
    pub fn ring(&mut self) {
        self.rung += 1;
    }
}
