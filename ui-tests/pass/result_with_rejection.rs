//! `Result<T, Rejection>` is unwrapped: the caller gets `T`, or `Error::Rejected`.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Wallet {
    cents: i64,
}

#[actor]
impl Wallet {
    #[command]
    pub fn spend(&mut self, cents: i64) -> Result<i64, Rejection> {
        if cents > self.cents {
            return Err(reject!(insufficient_funds, "Only {} cents left", self.cents));
        }
        self.cents -= cents;
        Ok(self.cents)
    }
}

async fn caller() -> Option<i64> {
    match Wallet::reference("w-1").spend(5).await {
        Ok(left) => Some(left),
        Err(Error::Rejected(rejection)) => {
            let _: &str = rejection.code();
            None
        }
        Err(_) => None,
    }
}

fn main() {
    let _ = caller();
}
