use solid_objects::prelude::*;

#[path = "../support/order.rs"]
mod order;

use order::{ChargeCard, Charged, Order};

#[actor]
impl Order {
    #[command]
    pub fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
        turn.emit(ChargeCard { cents }).on_success().charged();
    }

    #[reply]
    pub fn charged(&mut self, receipt: Charged) {
        let _ = receipt.charge_id;
        self.paid = true;
    }
}

#[actor]
#[derive(Default)]
pub struct Till {}

#[actor]
impl Till {
    #[command]
    pub fn forge(&mut self, turn: &mut Turn<Self>) {
        // Another actor cannot send it either.
        turn.send::<Order>("o-1").charged(Charged {
            charge_id: "forged".to_owned(),
        });
    }
}

async fn caller() {
    let forged = || Charged {
        charge_id: "forged".to_owned(),
    };
    let order = Order::reference("o-1");
    let _ = order.charged(forged()).await;
    let _ = order.enqueue().charged(forged()).await;
}

fn main() {
    let _ = caller();
}
