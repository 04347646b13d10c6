//! [`Kind`]: what a database error means to the runtime, as each backend's `errors.rs`
//! decides it and the store's `errors.rs` reads it.

/// What a database error means to the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A deadlock or a serialization failure: another transaction won, and running the
    /// whole transaction again resolves it.
    Conflict,
    /// A wait that ran out: for a lock, a statement's time limit, or a pooled connection.
    Busy,
    /// The connection is gone (closed by the server, reset, the server shutting down):
    /// nothing more runs on it.
    ConnectionLost,
    /// The session takes no writes (a primary turned standby): only servers say so.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    ReadOnly,
    /// Anything else.
    Other,
}
