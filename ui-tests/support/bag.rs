//! A bag's state, for the cases whose mistake is in the arguments of `Bag`'s command.

use solid_objects::prelude::*;

/// A bag of items put in by a command.
#[actor]
#[derive(Default)]
pub struct Bag {
    /// The items, in the order they were put in.
    pub items: Vec<String>,
}
