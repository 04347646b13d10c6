//! Bounds on payloads, the retry schedule of failed messages, and how turns share commits.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::time::clock::IntoDuration;
use crate::time::saturating::later;

/// The largest payloads the runtime accepts. Over a limit, a call gets
/// [`Error::PayloadTooLarge`] before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The largest arguments of one operation, as JSON bytes (default 1 MiB); an emitted
    /// effect is held to it too, with 512 bytes left over if it names a failure reply (which
    /// carries the effect back).
    pub max_arguments_bytes: usize,
    /// The largest result of one operation, as JSON bytes (default 1 MiB).
    pub max_result_bytes: usize,
    /// The largest state of one actor, as JSON bytes (default 5 MiB).
    pub max_state_bytes: usize,
    /// The most unfinished messages one actor's mailbox holds (default 10,000). Callers
    /// that enqueue at the same moment may pass it by a few; messages from other actors and
    /// fired reminders are not held back by it.
    pub max_unfinished: i64,
    /// How long finished messages and done effects are kept before the retention task
    /// prunes them (default 30 days). Each actor's newest 64 finished messages with an
    /// idempotency key are kept regardless, so their keys stay answerable.
    pub retention: Duration,
    /// How long dead letters and dead effects are kept for operators before the retention
    /// task prunes them (default 30 days; zero keeps them until an operator acts).
    pub dead_retention: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_arguments_bytes: 1 << 20,
            max_result_bytes: 1 << 20,
            max_state_bytes: 5 << 20,
            max_unfinished: 10_000,
            retention: Duration::from_secs(30 * 24 * 3600),
            dead_retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl Limits {
    /// The defaults, to change with the methods below:
    /// `Limits::new().max_state_bytes(1 << 20).retention(TimeDelta::days(7))`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The largest arguments of one operation, as JSON bytes.
    pub fn max_arguments_bytes(mut self, bytes: usize) -> Self {
        self.max_arguments_bytes = bytes;
        self
    }

    /// The largest result of one operation, as JSON bytes.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// The largest state of one actor, as JSON bytes.
    pub fn max_state_bytes(mut self, bytes: usize) -> Self {
        self.max_state_bytes = bytes;
        self
    }

    /// The most unfinished messages one actor's mailbox holds.
    pub fn max_unfinished(mut self, messages: i64) -> Self {
        self.max_unfinished = messages;
        self
    }

    /// How long finished messages and done effects are kept.
    pub fn retention(mut self, retention: impl IntoDuration) -> Self {
        self.retention = retention.into_duration();
        self
    }

    /// How long dead letters and dead effects are kept (zero keeps them).
    pub fn dead_retention(mut self, retention: impl IntoDuration) -> Self {
        self.dead_retention = retention.into_duration();
        self
    }
}

/// The payloads that [`Limits`] bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload {
    Arguments,
    Result,
    State,
}

impl Limits {
    /// Checks one payload against its limit.
    pub(crate) fn check(&self, payload: Payload, operation: &str, size: usize) -> Result<()> {
        let (what, limit) = match payload {
            Payload::Arguments => ("arguments", self.max_arguments_bytes),
            Payload::Result => ("result", self.max_result_bytes),
            Payload::State => ("state", self.max_state_bytes),
        };
        if size > limit {
            return Err(Error::PayloadTooLarge {
                what,
                operation: operation.to_owned(),
                size,
                limit,
            });
        }
        Ok(())
    }
}

/// When a failed message runs again.
///
/// Attempt `n` that fails waits `min(base * 2^(n-1), max_delay)`; after `max_attempts`
/// attempts the message becomes a dead letter and the actor's later messages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts before a message becomes a dead letter (default 5).
    pub max_attempts: i64,
    /// The wait after the first failed attempt (default 1 s).
    pub base_delay: Duration,
    /// The longest wait between attempts (default 60 s).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The defaults, to change with the methods below:
    /// `RetryPolicy::new().max_attempts(3).base_delay(TimeDelta::seconds(2))`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attempts before a message becomes a dead letter (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = i64::from(attempts.max(1));
        self
    }

    /// The wait after the first failed attempt.
    pub fn base_delay(mut self, delay: impl IntoDuration) -> Self {
        self.base_delay = delay.into_duration();
        self
    }

    /// The longest wait between attempts.
    pub fn max_delay(mut self, delay: impl IntoDuration) -> Self {
        self.max_delay = delay.into_duration();
        self
    }

    /// When the attempt after `attempts` failed ones runs, or `None` if none of
    /// `max_attempts` is left.
    pub(crate) fn next_attempt_at(
        &self,
        now: DateTime<Utc>,
        attempts: i64,
        max_attempts: i64,
    ) -> Option<DateTime<Utc>> {
        if attempts >= max_attempts {
            return None;
        }
        let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 31)).unwrap_or(31);
        let delay = self
            .base_delay
            .checked_mul(1 << doublings)
            .map_or(self.max_delay, |delay| delay.min(self.max_delay));
        Some(later(now, delay))
    }
}

/// A timeout a caller gave, if it is long enough to wait for anything (1 ms).
pub(crate) fn check_timeout(timeout: Duration) -> Result<Duration> {
    if timeout < Duration::from_millis(1) {
        return Err(Error::InvalidTimeout { timeout });
    }
    Ok(timeout)
}

/// `now + by` for a deadline, saturating a century ahead (tokio's `Instant` cannot hold
/// much more).
pub(crate) fn deadline_after(by: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    tokio::time::Instant::now() + by.min(CENTURY)
}

/// How turns that arrive together share one transaction and one commit: see
/// [`Builder::group_commit`](crate::Builder::group_commit).
///
/// A lone caller never waits for a group: a group takes only the turns that are already
/// waiting when its own work is done. The bounds cap how long a busy group stays open.
///
/// ```
/// use std::time::Duration;
/// use solid_objects::GroupCommit;
///
/// let grouping = GroupCommit::default()
///     .max_turns(32)
///     .max_wait(Duration::from_micros(500));
/// assert_eq!(grouping.turns(), 32);
/// assert_eq!(GroupCommit::off().turns(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCommit {
    max_turns: usize,
    max_wait: Duration,
}

impl Default for GroupCommit {
    /// At most 64 turns (32 on a server), and at most 1 ms of taking turns in.
    fn default() -> Self {
        Self {
            max_turns: 64,
            max_wait: Duration::from_millis(1),
        }
    }
}

impl GroupCommit {
    /// One transaction per commit: no grouping.
    pub fn off() -> Self {
        Self::default().max_turns(1)
    }

    /// The most turns one commit carries (at least 1; 1 turns grouping off).
    #[must_use]
    pub fn max_turns(mut self, turns: usize) -> Self {
        self.max_turns = turns.max(1);
        self
    }

    /// How long a group goes on taking in turns that wait to join it.
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The most turns one commit carries.
    pub fn turns(&self) -> usize {
        self.max_turns
    }

    /// How long a group takes in turns.
    pub fn wait(&self) -> Duration {
        self.max_wait
    }

    /// Whether turns share commits at all.
    pub(crate) fn is_on(&self) -> bool {
        self.max_turns > 1
    }
}
