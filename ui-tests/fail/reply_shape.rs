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
