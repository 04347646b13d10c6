//! A counter's state, for the cases about a handler of `Counter`: most pin a mistake in one.

use solid_objects::prelude::*;

/// A count that commands raise and queries read.
#[actor]
#[derive(Default)]
pub struct Counter {
    /// The count so far.
    pub value: u32,
}
