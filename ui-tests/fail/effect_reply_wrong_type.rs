use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

#[derive(Serialize, Deserialize)]
pub struct ChargeCard {
    cents: i64,
}

#[derive(Serialize, Deserialize)]
pub struct Charged {
    charge_id: String,
}

impl Effect for ChargeCard {
    const NAME: &'static str = "charge_card";
    type Output = Charged;
}

#[actor]
#[derive(Default)]
pub struct Order {
    paid: bool,
}

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
