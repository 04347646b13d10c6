use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Parser {
    parsed: u32,
}

#[actor]
impl Parser {
    #[command]
    pub fn parse(&mut self, input: String) -> Result<u32, String> {
        self.parsed = input.parse().map_err(|_| format!("not a number: {input}"))?;
        Ok(self.parsed)
    }
}

fn main() {}
