use solid_objects::prelude::*;

#[path = "../support/order.rs"]
mod order;

use order::{ChargeCard, Charged, Order};

#[actor]
impl Order {
    #[command]
    pub fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
        // `paid` is a command, not a reply: a caller could send it.
        turn.emit(ChargeCard { cents }).on_success().paid();
    }

    #[command]
    pub fn paid(&mut self, receipt: Charged) {
        let _ = receipt.charge_id;
        self.paid = true;
    }

    // A reply receives the outcome as its one argument.
    #[reply]
    pub fn charged(&mut self, charge_id: String, cents: i64) {
        let _ = (charge_id, cents);
    }
}

fn main() {}
