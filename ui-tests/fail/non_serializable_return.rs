use solid_objects::prelude::*;

#[path = "../support/vault.rs"]
mod vault;

use vault::Vault;

pub struct Receipt(u32);

#[actor]
impl Vault {
    #[command]
    pub fn deposit(&mut self, amount: u32) -> Receipt {
        self.total += amount;
        Receipt(self.total)
    }
}

fn main() {}
