//! A vault's state, for the cases whose mistake is in what `Vault`'s deposit takes or
//! returns.

use solid_objects::prelude::*;

/// A vault that keeps a total.
#[actor]
#[derive(Default)]
pub struct Vault {
    /// What was deposited so far.
    pub total: u32,
}
