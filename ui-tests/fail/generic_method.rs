use solid_objects::prelude::*;

#[path = "../support/bag.rs"]
mod bag;

use bag::Bag;

#[actor]
impl Bag {
    #[command]
    pub fn put<T: ToString>(&mut self, item: T) -> usize {
        self.items.push(item.to_string());
        self.items.len()
    }
}

fn main() {}
