use std::borrow::Cow;

use solid_objects::prelude::*;

#[path = "../support/bag.rs"]
mod bag;

use bag::Bag;

#[actor]
impl Bag {
    #[command]
    pub fn put(&mut self, item: Cow<'static, str>, label: Cow<'_, str>) -> usize {
        self.items.push(format!("{item}{label}"));
        self.items.len()
    }
}

fn main() {}
