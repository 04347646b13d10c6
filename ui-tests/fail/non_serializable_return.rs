use solid_objects::prelude::*;

pub struct Receipt(u32);

#[actor]
#[derive(Default)]
pub struct Vault {
    total: u32,
}

#[actor]
impl Vault {
    #[command]
    pub fn deposit(&mut self, amount: u32) -> Receipt {
        self.total += amount;
        Receipt(self.total)
    }
}

fn main() {}
