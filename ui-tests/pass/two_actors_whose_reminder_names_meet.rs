//! Two actors in one module whose names and reminders meet: `Order` with the reminder
//! `line_expire` and `OrderLine` with the reminder `expire` (what the macros generate for
//! each stays apart).

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Order {
    lines: u32,
}

#[actor]
impl Order {
    #[command]
    pub fn add_line(&mut self) {
        self.lines += 1;
    }

    #[reminder]
    fn line_expire(&mut self) {
        self.lines = self.lines.saturating_sub(1);
    }
}

#[actor]
#[derive(Default)]
pub struct OrderLine {
    expired: bool,
}

#[actor]
impl OrderLine {
    #[command]
    pub fn open(&mut self) {}

    #[reminder]
    fn expire(&mut self) {
        self.expired = true;
    }
}

fn main() {
    let _ = (Order::reference("o-1"), OrderLine::reference("l-1"));
}
