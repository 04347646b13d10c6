//! A ledger's state at version 3, for the cases whose mistake is in the migrations that
//! read its earlier versions.

use solid_objects::prelude::*;

/// A running total, stored at version 3.
#[actor(version = 3)]
#[derive(Default)]
pub struct Ledger {
    /// The total so far.
    pub total: u64,
}
