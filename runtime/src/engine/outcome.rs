//! What a caller sees of a message that has run.

use chrono::{DateTime, Utc};

use super::from_micros;
use crate::error::{Error, Rejection, Result};
use crate::store::{MessageRecord, StoredStatus};

/// How a message ended, or its latest failed attempt.
#[derive(Debug)]
pub(crate) enum Outcome {
    Completed(String),
    Rejected(Rejection),
    Failed {
        error: String,
        attempts: i64,
        /// When the next attempt runs; `None` once the message is a dead letter.
        retry_at: Option<DateTime<Utc>>,
    },
    /// Its actor was destroyed before it ran.
    Destroyed,
}

impl Outcome {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Completed(_) => "completed",
            Self::Rejected(_) => "rejected",
            Self::Failed { retry_at: None, .. } => "dead",
            Self::Failed { .. } => "failed",
            Self::Destroyed => "destroyed",
        }
    }

    /// Counts this end (or failed attempt) of a message of `operation` in the metrics; a
    /// message ended as destroyed counts nowhere.
    pub(crate) fn record(&self, actor_type: &str, operation: &str) {
        match self {
            Self::Completed(_) => crate::metrics::completed(actor_type, operation),
            Self::Rejected(_) => crate::metrics::rejected(actor_type, operation),
            Self::Failed { retry_at, .. } => {
                crate::metrics::failed(actor_type, operation, retry_at.is_none());
            }
            Self::Destroyed => {}
        }
    }

    /// The outcome stored in a message row: its end, or its last failed attempt, or `None`
    /// if it has not run yet.
    pub(crate) fn from_record(record: &MessageRecord) -> Option<Self> {
        match record.status {
            StoredStatus::Completed => Some(Self::Completed(
                record.result.clone().unwrap_or_else(|| "null".to_owned()),
            )),
            StoredStatus::Rejected => Some(Self::Rejected(stored_rejection(record))),
            StoredStatus::Dead => Some(Self::Failed {
                error: record.last_error.clone().unwrap_or_default(),
                attempts: record.attempts,
                retry_at: None,
            }),
            StoredStatus::Ready if record.attempts > 0 => Some(Self::Failed {
                error: record.last_error.clone().unwrap_or_default(),
                attempts: record.attempts,
                retry_at: Some(from_micros(record.available_at)),
            }),
            StoredStatus::Destroyed => Some(Self::Destroyed),
            StoredStatus::Ready => None,
        }
    }

    /// The caller's view: the result JSON, or the error; `request_id` is the call's
    /// message's (`None` for a query, which has none).
    pub(crate) fn into_result(
        self,
        actor_type: &'static str,
        actor_id: &str,
        operation: &'static str,
        request_id: Option<&str>,
    ) -> Result<String> {
        match self {
            Self::Completed(result) => Ok(result),
            Self::Rejected(rejection) => Err(Error::Rejected(rejection)),
            Self::Failed {
                error,
                attempts,
                retry_at,
            } => Err(Error::HandlerFailed {
                actor_type,
                actor_id: actor_id.to_owned(),
                operation,
                error,
                attempts,
                retry_at,
                request_id: request_id.map(|request_id| Box::new(request_id.to_owned())),
            }),
            Self::Destroyed => Err(Error::Destroyed {
                actor_type: actor_type.to_owned(),
                actor_id: actor_id.to_owned(),
            }),
        }
    }
}

/// The rejection stored as a rejected message's result.
pub(crate) fn stored_rejection(record: &MessageRecord) -> Rejection {
    record
        .result
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(|| Rejection::checked("rejected", "the handler rejected the message"))
}
