use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Bag {
    items: Vec<String>,
}

#[actor]
impl Bag {
    #[command]
    pub fn put(&mut self, item: impl ToString) -> usize {
        self.items.push(item.to_string());
        self.items.len()
    }
}

fn main() {}
