//! An order's state and the card charge its handlers emit, for the cases whose mistake is in
//! how an effect's outcome reaches `Order`.

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// Charges `cents` to the buyer's card.
#[derive(Serialize, Deserialize)]
pub struct ChargeCard {
    /// How much to charge.
    pub cents: i64,
}

/// A charge that went through.
#[derive(Serialize, Deserialize)]
pub struct Charged {
    /// The payment provider's id of the charge.
    pub charge_id: String,
}

impl Effect for ChargeCard {
    const NAME: &'static str = "charge_card";
    type Output = Charged;
}

/// An order, paid once its charge went through.
#[actor]
#[derive(Default)]
pub struct Order {
    /// Whether the charge went through.
    pub paid: bool,
}
