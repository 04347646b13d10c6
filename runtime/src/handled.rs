//! What a handler produced, in the form the engine stores.

use serde::Serialize;

use crate::error::Rejection;

/// The outcome of one handler run, produced by the generated dispatch.
#[doc(hidden)]
#[derive(Debug)]
pub enum Handled {
    /// The handler returned a value, serialised as JSON.
    Value(String),
    /// The handler rejected the request.
    Rejected(Rejection),
    /// The handler's value could not be serialised.
    Unserializable(String),
}

impl Handled {
    /// The outcome of a handler that returns `T`.
    pub fn value<T: Serialize>(value: &T) -> Self {
        match serde_json::to_string(value) {
            Ok(json) => Self::Value(json),
            Err(error) => Self::Unserializable(error.to_string()),
        }
    }

    /// The outcome of a handler that returns `Result<T, Rejection>`.
    pub fn result<T: Serialize>(result: Result<T, Rejection>) -> Self {
        match result {
            Ok(value) => Self::value(&value),
            Err(rejection) => Self::Rejected(rejection),
        }
    }
}
