//! What a handler produced, in the form the engine stores.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{panic_text, store_value};
use crate::error::{Error, Rejection};

/// The outcome of one handler run, produced by the generated dispatch.
#[doc(hidden)]
#[derive(Debug)]
pub enum Handled {
    /// The handler returned a value, serialised as JSON.
    Value(String),
    /// The handler rejected the request.
    Rejected(Rejection),
    /// The handler failed (or panicked, or its value could not be serialised).
    Failed {
        /// What went wrong.
        error: String,
        /// Whether another attempt may succeed.
        retryable: bool,
    },
    /// The handler's own SQL hit a deadlock or serialization failure: the turn runs again.
    Transient(String),
}

impl Handled {
    /// The outcome of a handler that returns `T`: its result as it will be read back (a
    /// result that would not read back, such as a float that is not a number, fails the
    /// turn instead of completing it).
    pub fn value<T: Serialize + DeserializeOwned>(value: &T) -> Self {
        match store_value("result", "the handler", value) {
            Ok(json) => Self::Value(json),
            Err(error) => Self::Failed {
                retryable: matches!(error, Error::Panicked { .. }),
                error: error.to_string(),
            },
        }
    }

    /// The outcome of a handler that returns `Result<T, E>`.
    pub fn result<T: Serialize + DeserializeOwned, E: HandlerError>(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Self::value(&value),
            Err(error) => error.into_handled(),
        }
    }

    /// The outcome of a handler that panicked.
    pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> Self {
        Self::Failed {
            error: format!("the handler panicked: {}", panic_text(panic)),
            retryable: true,
        }
    }
}

/// An error type a handler may return in `Result<T, E>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error of an actor operation",
    label = "the runtime does not know whether this error rejects or fails",
    note = "return Result<T, Rejection> to refuse, Result<T, Failure> to fail and retry, or \
            Result<T, TurnError> for both; to send a Result to the caller as a value, wrap it \
            in a struct"
)]
pub trait HandlerError {
    /// What the runtime does with it.
    #[doc(hidden)]
    fn into_handled(self) -> Handled;
}
