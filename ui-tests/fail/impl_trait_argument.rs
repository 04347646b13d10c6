use solid_objects::prelude::*;

#[path = "../support/bag.rs"]
mod bag;

use bag::Bag;

#[actor]
impl Bag {
    #[command]
    pub fn put(&mut self, item: impl ToString) -> usize {
        self.items.push(item.to_string());
        self.items.len()
    }
}

fn main() {}
