//! An alarm's state, for the cases whose mistake is in how `Alarm`'s reminder is named,
//! scheduled or reached.

use solid_objects::prelude::*;

/// An alarm that counts how often its reminder rang.
#[actor]
#[derive(Default)]
pub struct Alarm {
    /// How often it rang.
    pub rung: u32,
}
