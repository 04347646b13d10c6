//! A counter's state, for the cases whose mistake is in a handler of `Counter`.

use solid_objects::prelude::*;

/// A count that commands raise and queries read.
#[actor]
#[derive(Default)]
pub struct Counter {
    /// The count so far.
    pub value: u32,
}
