//! A light's state, for the cases whose operations on `Light` are named or marked.

use solid_objects::prelude::*;

/// A light, on or off.
#[actor]
#[derive(Default)]
pub struct Light {
    /// Whether it is on.
    pub on: bool,
}
