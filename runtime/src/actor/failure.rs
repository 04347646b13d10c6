//! The errors a handler may return, and what each means to the runtime.

use std::fmt;

use crate::actor::handled::{Handled, HandlerError};
use crate::error::{Error, Rejection, TypedRejection};
use crate::store::errors::is_transient;

/// A handler's failure: the turn rolls back, the attempt is recorded, and the message is
/// retried with backoff (or becomes a dead letter at once, if permanent).
///
/// `?` converts database errors into retryable failures:
///
/// ```
/// use solid_objects::Failure;
///
/// fn parse(input: &str) -> Result<u32, Failure> {
///     input.parse().map_err(Failure::permanent)
/// }
/// assert!(!parse("x").unwrap_err().is_retryable());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
    retryable: bool,
    /// A deadlock or serialization failure in the handler's own SQL: the runtime runs the
    /// turn again at once instead of counting an attempt.
    transient: bool,
}

impl Failure {
    /// A failure that may pass on a later attempt (a timeout, a busy database).
    pub fn retryable(error: impl fmt::Display) -> Self {
        Self {
            message: error.to_string(),
            retryable: true,
            transient: false,
        }
    }

    /// A failure no retry can fix: the message becomes a dead letter at once.
    pub fn permanent(error: impl fmt::Display) -> Self {
        Self {
            message: error.to_string(),
            retryable: false,
            transient: false,
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the runtime retries the message.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<sqlx::Error> for Failure {
    /// Retryable; a deadlock or serialization failure (another application's locks) makes
    /// the runtime run the turn again at once, without counting an attempt.
    fn from(error: sqlx::Error) -> Self {
        Self {
            transient: is_transient(&error),
            ..Self::retryable(error)
        }
    }
}

impl From<Error> for Failure {
    /// Retryable, except the mistakes the same handler makes again on every attempt, which
    /// are permanent (a dead letter at once): a rejection code that is not snake_case, a
    /// synchronous call from inside a handler, and a call of an operation no caller may call
    /// (a reminder or an effect reply).
    fn from(error: Error) -> Self {
        match error {
            Error::Database(error) => error.into(),
            error @ (Error::InvalidRejectionCode { .. }
            | Error::CalledFromHandler { .. }
            | Error::NotCallable { .. }
            | Error::ReplyNotCallable { .. }) => Self::permanent(error),
            other => Self::retryable(other),
        }
    }
}

/// The error of a handler that can both reject and fail: `?` works on rejections, failures,
/// database errors and runtime errors alike.
#[derive(Debug)]
#[non_exhaustive]
pub enum TurnError {
    /// A business refusal: committed as rejected, never retried.
    Rejected(Rejection),
    /// A failure: rolled back and retried (or dead, if permanent).
    Failed(Failure),
}

impl From<Rejection> for TurnError {
    fn from(rejection: Rejection) -> Self {
        Self::Rejected(rejection)
    }
}

impl From<Failure> for TurnError {
    fn from(failure: Failure) -> Self {
        Self::Failed(failure)
    }
}

impl From<sqlx::Error> for TurnError {
    fn from(error: sqlx::Error) -> Self {
        Self::Failed(error.into())
    }
}

impl From<Error> for TurnError {
    fn from(error: Error) -> Self {
        Self::Failed(error.into())
    }
}

impl HandlerError for Rejection {
    fn into_handled(self) -> Handled {
        Handled::Rejected(self)
    }
}

impl HandlerError for Failure {
    fn into_handled(self) -> Handled {
        if self.transient {
            return Handled::Transient(self.message);
        }
        Handled::Failed {
            error: self.message,
            retryable: self.retryable,
        }
    }
}

/// Every typed rejection (`#[derive(Rejection)]`) rejects; one impl for all of them, so a
/// compile error about another type lists the runtime's error types, not the application's
/// own enums as if the mistake were there.
#[diagnostic::do_not_recommend]
impl<T: TypedRejection> HandlerError for T {
    fn into_handled(self) -> Handled {
        Handled::Rejected(self.into_rejection())
    }
}

impl HandlerError for TurnError {
    fn into_handled(self) -> Handled {
        match self {
            Self::Rejected(rejection) => rejection.into_handled(),
            Self::Failed(failure) => failure.into_handled(),
        }
    }
}
