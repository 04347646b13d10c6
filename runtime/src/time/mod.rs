//! Time as the runtime keeps it: the clock, stored microseconds and saturating arithmetic
//! on instants.
//!
//! A leaf: nothing here imports from another module of the crate but the other leaves.

pub(crate) mod clock;
pub(crate) mod micros;
pub(crate) mod saturating;

pub(crate) use self::micros::{from_micros, micros};
