//! Where the runtime's time comes from: the system clock, or a manual clock in tests.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A length of time, as the runtime's API takes it: a `std::time::Duration` or a
/// `chrono::TimeDelta` alike (a negative `TimeDelta` counts as zero), so timeouts, delays
/// and the manual clock read the same as the deadlines a handler computes with
/// `turn.now() + TimeDelta::minutes(15)`.
///
/// ```
/// use std::time::Duration;
/// use solid_objects::{chrono::TimeDelta, IntoDuration};
///
/// assert_eq!(TimeDelta::minutes(1).into_duration(), Duration::from_secs(60));
/// assert_eq!(TimeDelta::minutes(-1).into_duration(), Duration::ZERO);
/// ```
pub trait IntoDuration {
    /// The length as a `std::time::Duration`.
    fn into_duration(self) -> Duration;
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Duration {
        self
    }
}

impl IntoDuration for chrono::TimeDelta {
    fn into_duration(self) -> Duration {
        self.to_std().unwrap_or(Duration::ZERO)
    }
}

/// A source of the current time.
///
/// The runtime reads it at the start of every turn ([`Turn::now`](crate::Turn::now)), when it
/// fires reminders and when it schedules retries, and passes it to SQL as a parameter, so a
/// test that moves a [`ManualClock`] moves every deadline with it.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The operating system's clock; the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to: for tests.
///
/// Clones share one time, so a test keeps a clone and hands another to the runtime.
///
/// ```
/// use std::time::Duration;
/// use solid_objects::ManualClock;
///
/// let clock = ManualClock::starting_now();
/// let start = clock.now();
/// clock.advance(Duration::from_secs(16 * 60));
/// assert_eq!((clock.now() - start).num_minutes(), 16);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// A clock stopped at the current system time, to the microsecond (the precision the
    /// runtime stores times with, so stored times compare equal to the clock's).
    pub fn starting_now() -> Self {
        let now = Utc::now();
        Self::new(DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now))
    }

    /// The time the clock shows.
    pub fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the clock forward (by a `std::time::Duration` or a `chrono::TimeDelta`),
    /// saturating at the latest time it represents.
    pub fn advance(&self, by: impl IntoDuration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = crate::time::saturating::later(*now, by.into_duration());
    }

    /// Sets the clock to `at` (forward or back).
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        ManualClock::now(self)
    }
}
