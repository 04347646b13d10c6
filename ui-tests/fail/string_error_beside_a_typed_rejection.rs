//! `Result<_, String>` in a crate that derives a typed rejection: the error lists the
//! runtime's error types, not the crate's own enum as if the mistake were there.

use solid_objects::prelude::*;

#[derive(Debug, Rejection)]
pub enum ParseError {
    /// The input is not a number.
    NotANumber,
}

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

    #[command]
    pub fn parse_typed(&mut self, input: String) -> Result<u32, ParseError> {
        self.parsed = input.parse().map_err(|_| ParseError::NotANumber)?;
        Ok(self.parsed)
    }
}

fn main() {}
