//! Doc comments and other attributes stay on the methods; helpers stay ordinary methods;
//! the stored name can be set.

#![deny(missing_docs)]

use solid_objects::prelude::*;

/// A thermostat.
#[actor(name = "thermostat")]
#[derive(Debug, Default)]
pub struct Thermostat {
    celsius: i32,
}

#[actor]
impl Thermostat {
    /// Sets the temperature.
    #[command]
    #[inline]
    pub fn set(&mut self, celsius: i32) -> i32 {
        self.celsius = Self::clamp(celsius);
        self.celsius
    }

    /// Reads the temperature.
    #[query]
    #[must_use]
    pub fn celsius(&self) -> i32 {
        self.celsius
    }

    fn clamp(celsius: i32) -> i32 {
        celsius.clamp(5, 30)
    }
}

fn main() {
    assert_eq!(<Thermostat as solid_objects::ActorState>::TYPE_NAME, "thermostat");
    assert_eq!(Thermostat::clamp(40), 30);
}
