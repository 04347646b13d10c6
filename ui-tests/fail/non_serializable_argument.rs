use solid_objects::prelude::*;

#[path = "../support/vault.rs"]
mod vault;

use vault::Vault;

pub struct Secret(u32);

#[actor]
impl Vault {
    #[command]
    pub fn deposit(&mut self, secret: Secret) -> u32 {
        self.total += secret.0;
        self.total
    }
}

fn main() {}
