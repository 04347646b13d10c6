use solid_objects::prelude::*;

#[path = "../support/order.rs"]
mod order;

use order::{ChargeCard, Charged, Order};

#[actor]
impl Order {
    #[command]
    pub fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
        // `refunded` takes cents, not the charge's output.
        turn.emit(ChargeCard { cents }).on_success().refunded();
        // `charged` takes the output, not an `EffectFailure`.
        turn.emit(ChargeCard { cents }).on_failure().charged();
    }

    #[reply]
    pub fn charged(&mut self, receipt: Charged) {
        let _ = receipt.charge_id;
        self.paid = true;
    }

    #[reply]
    pub fn refunded(&mut self, cents: i64) {
        let _ = cents;
        self.paid = false;
    }
}

fn main() {}
