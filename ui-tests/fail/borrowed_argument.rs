use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Greeter {
    names: Vec<String>,
}

#[actor]
impl Greeter {
    #[command]
    pub fn greet(&mut self, name: &str) -> usize {
        self.names.push(name.to_owned());
        self.names.len()
    }
}

fn main() {}
