//! A ledger's state at version 2, for the cases whose mistake is in the migrations that
//! read its earlier versions.

use solid_objects::prelude::*;

/// A running total, stored at version 2.
#[actor(version = 2)]
#[derive(Default)]
pub struct Ledger {
    /// The total so far.
    pub total: u64,
}
