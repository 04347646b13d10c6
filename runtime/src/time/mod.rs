//! Time: the runtime's clock and the durations it reads.
//!
//! A leaf: nothing here imports from another module of the crate but the other leaves.

pub(crate) mod clock;
pub(crate) mod micros;
pub(crate) mod saturating;
