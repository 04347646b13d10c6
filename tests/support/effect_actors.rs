//! The effect the cases emit when what they pin is the effect's bookkeeping (its attempts,
//! its lease, its handler, its failure) rather than what it carries: a charge tagged by the
//! case, and the till that emits one per call.

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// A charge at a payment provider, tagged by whoever rang it up.
#[derive(Serialize, Deserialize)]
pub struct Charge {
    /// What the case tells its handler: a gate's name, a number, a run to count.
    pub tag: String,
}

impl Effect for Charge {
    const NAME: &'static str = "charge";
    type Output = ();
}

/// Emits a [`Charge`] per call.
#[actor]
#[derive(Default)]
pub struct Till {}

#[actor]
impl Till {
    /// Emits a charge tagged `tag`.
    #[command]
    pub fn ring_up(&mut self, turn: &mut Turn<Self>, tag: String) {
        turn.emit(Charge { tag });
    }
}
