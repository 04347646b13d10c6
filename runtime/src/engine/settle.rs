//! Settling a turn: what its handler produced (a value with its staged writes, a rejection,
//! a failure) becomes what the turn commits, and the message row and outcome that follow.

use chrono::{DateTime, Utc};

use super::turn_writes::{Completed, Writes};
use super::{from_micros, micros, Outcome};
use crate::actor::handled::Handled;
use crate::actor::Actor;
use crate::codec::to_json;
use crate::error::{Error, Rejection};
use crate::limits::{Limits, RetryPolicy};
use crate::store::{MessageProgress, StoredStatus};

/// What a turn commits, before the message row's fields are worked out.
pub(super) struct Settled {
    kind: SettledKind,
    attempts: i64,
    /// A completed turn's writes; `None` for any other end.
    pub(super) writes: Option<Writes>,
}

/// How a settled turn ends.
enum SettledKind {
    Completed(String),
    Rejected { rejection: Rejection, json: String },
    Failed { error: String, retryable: bool },
}

impl Settled {
    /// Turns what the handler produced into what the turn commits.
    pub(super) fn of<A: Actor>(
        limits: &Limits,
        completed: Completed<'_, A>,
        handled: Handled,
        operation: &str,
        attempts: i64,
    ) -> Settled {
        let kind = match handled {
            Handled::Value(result) => match Writes::of(limits, completed, &result, operation) {
                Ok(writes) => {
                    return Self {
                        kind: SettledKind::Completed(result),
                        attempts,
                        writes: Some(writes),
                    };
                }
                // What the turn would commit cannot be stored and read back: the same
                // message on the same state does the same again, unless user code panicked.
                Err(error) => SettledKind::Failed {
                    retryable: matches!(error, Error::Panicked { .. }),
                    error: error.to_string(),
                },
            },
            Handled::Rejected(rejection) => match to_json("rejection", &rejection) {
                Ok(json) => SettledKind::Rejected { rejection, json },
                Err(error) => SettledKind::Failed {
                    error: error.to_string(),
                    retryable: false,
                },
            },
            Handled::Failed { error, retryable } => SettledKind::Failed { error, retryable },
            Handled::Transient(error) => SettledKind::Failed {
                error,
                retryable: true,
            },
        };
        Self {
            kind,
            attempts,
            writes: None,
        }
    }

    /// Whether the turn completed (its handler's changes are kept).
    pub(super) fn completed(&self) -> bool {
        matches!(self.kind, SettledKind::Completed(_))
    }

    /// Whether the handler rejected the message.
    pub(super) fn rejected(&self) -> bool {
        matches!(self.kind, SettledKind::Rejected { .. })
    }

    /// The message row after this turn.
    pub(super) fn progress(
        &self,
        now: DateTime<Utc>,
        retry: &RetryPolicy,
        max_attempts: i64,
    ) -> MessageProgress<'_> {
        let now_us = micros(now);
        let finished = |status, result, last_error| MessageProgress {
            status,
            attempts: self.attempts,
            available_at: now_us,
            result,
            last_error,
            finished_at: Some(now_us),
            failed_at: None,
        };
        match &self.kind {
            SettledKind::Completed(result) => {
                finished(StoredStatus::Completed, Some(result.as_str()), None)
            }
            SettledKind::Rejected { json, .. } => {
                finished(StoredStatus::Rejected, Some(json.as_str()), None)
            }
            SettledKind::Failed { error, retryable } => {
                failed_progress(now, self.attempts, max_attempts, *retryable, error, retry)
            }
        }
    }

    /// What the caller sees of the committed turn.
    pub(super) fn into_outcome(self, available_at: i64, finished: bool) -> Outcome {
        match self.kind {
            SettledKind::Completed(result) => Outcome::Completed(result),
            SettledKind::Rejected { rejection, .. } => Outcome::Rejected(rejection),
            SettledKind::Failed { error, .. } => Outcome::Failed {
                error,
                attempts: self.attempts,
                retry_at: (!finished).then(|| from_micros(available_at)),
            },
        }
    }
}

/// The message row after a failed attempt: waiting for its retry, or dead.
pub(super) fn failed_progress<'a>(
    now: DateTime<Utc>,
    attempts: i64,
    max_attempts: i64,
    retryable: bool,
    error: &'a str,
    retry: &RetryPolicy,
) -> MessageProgress<'a> {
    let retry_from = retry_on_host_clock().unwrap_or(now);
    let retry_at = retryable
        .then(|| retry.next_attempt_at(retry_from, attempts, max_attempts))
        .flatten();
    match retry_at {
        Some(at) => MessageProgress {
            last_error: Some(error),
            failed_at: Some(micros(now)),
            ..MessageProgress::ready(attempts, micros(at))
        },
        None => MessageProgress {
            status: StoredStatus::Dead,
            attempts,
            available_at: micros(now),
            result: None,
            last_error: Some(error),
            finished_at: Some(micros(now)),
            failed_at: Some(micros(now)),
        },
    }
}

/// The host's clock, if a simulation put back
/// [`Defect::RetryOnHostClock`](crate::simulation::Defect::RetryOnHostClock); never elsewhere.
fn retry_on_host_clock() -> Option<DateTime<Utc>> {
    #[cfg(feature = "simulation")]
    if crate::simulation::reintroduced(crate::simulation::Defect::RetryOnHostClock) {
        return Some(Utc::now());
    }
    None
}
