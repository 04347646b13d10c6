//! Time as the runtime keeps it: a leaf every layer may use, which imports nothing of the
//! crate. Each file holds one way of telling time (stored microseconds in `micros.rs`).

mod micros;

pub(crate) use self::micros::{from_micros, micros};
