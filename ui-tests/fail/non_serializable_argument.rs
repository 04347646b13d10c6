use solid_objects::prelude::*;

pub struct Secret(u32);

#[actor]
#[derive(Default)]
pub struct Vault {
    total: u32,
}

#[actor]
impl Vault {
    #[command]
    pub fn deposit(&mut self, secret: Secret) -> u32 {
        self.total += secret.0;
        self.total
    }
}

fn main() {}
