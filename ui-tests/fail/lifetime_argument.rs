use std::borrow::Cow;

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Bag {
    items: Vec<String>,
}

#[actor]
impl Bag {
    #[command]
    pub fn put(&mut self, item: Cow<'static, str>, label: Cow<'_, str>) -> usize {
        self.items.push(format!("{item}{label}"));
        self.items.len()
    }
}

fn main() {}
