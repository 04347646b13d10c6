//! [`Workers`]: how many workers [`Runtime::run`](crate::Runtime::run) starts, and how they
//! poll, hold effects and stop.

use std::time::Duration;

use crate::time::clock::IntoDuration;

/// The idle poll interval of a worker starts here and doubles up to [`Workers::idle_poll`].
pub(crate) const IDLE_POLL_MIN: Duration = Duration::from_millis(100);

/// The workers [`Runtime::run`](crate::Runtime::run) starts: how many, how often idle ones
/// look for work, how long they hold an effect, and how long a shutdown waits for them.
///
/// A count converts into one with the other defaults, so `.workers(4)` is the common form:
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # fn configure() -> solid_objects::Builder {
/// use std::time::Duration;
/// use solid_objects::{Runtime, Workers};
///
/// Runtime::builder().sqlite("shows.db").workers(
///     Workers::new(4)
///         .idle_poll(Duration::from_millis(500))
///         .effect_timeout(Duration::from_secs(30)),
/// )
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workers {
    pub(crate) count: usize,
    pub(crate) idle_poll: Duration,
    pub(crate) effect_lease: Duration,
    pub(crate) effect_timeout: Duration,
    pub(crate) shutdown_deadline: Duration,
}

impl Default for Workers {
    fn default() -> Self {
        Self::new(2)
    }
}

impl Workers {
    /// `count` workers (at least 1), with the other settings at their defaults. Each takes
    /// actors no other worker of this runtime is running.
    pub fn new(count: usize) -> Self {
        Self {
            count: count.max(1),
            idle_poll: Duration::from_secs(1),
            effect_lease: Duration::from_secs(30),
            effect_timeout: Duration::from_secs(300),
            shutdown_deadline: Duration::from_secs(30),
        }
    }

    /// The longest an idle worker sleeps before it looks for work again (default 1 s, at
    /// least 100 ms; it starts at 100 ms and doubles while there is none; idle workers take
    /// turns, so a runtime polls once per interval however many it runs). A commit in this
    /// process wakes idle workers at once, and on PostgreSQL and MySQL so does a commit in any
    /// process ([`Builder::listen`](crate::Builder::listen)): polling is the fallback that
    /// finds work whose time came (a reminder, a delayed message, a retry).
    #[must_use]
    pub fn idle_poll(mut self, interval: impl IntoDuration) -> Self {
        self.idle_poll = interval.into_duration().max(IDLE_POLL_MIN);
        self
    }

    /// How long a claimed effect belongs to the worker running it without a renewal
    /// (default 30 s). While its handler runs, the worker renews the lease every third of
    /// it, so live work is not run twice; a worker that dies mid-effect (killed, out of
    /// memory) renews nothing, and its effect is claimed again, as its next attempt, once the
    /// lease runs out. A worker that finishes after its lease ran out records nothing (the
    /// effect's new runner does). On PostgreSQL and MySQL the lease runs on the database
    /// server's clock. Workers run up to 16 effects at once, each in a task of its own.
    #[must_use]
    pub fn effect_lease(mut self, lease: impl IntoDuration) -> Self {
        self.effect_lease = lease.into_duration().max(Duration::from_millis(1));
        self
    }

    /// How long an effect handler may run (default 5 min): one still running then is
    /// abandoned and its attempt counted as failed (and retried), so a handler that hangs
    /// (a network call without a timeout) does not hold its lease and a worker's place for
    /// ever.
    #[must_use]
    pub fn effect_timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.effect_timeout = timeout.into_duration().max(Duration::from_millis(1));
        self
    }

    /// How long [`Runtime::run_until_signal`](crate::Runtime::run_until_signal) lets the
    /// work in flight finish after a signal before it abandons it (default 30 s); see
    /// [`Runtime::shutdown_with_deadline`](crate::Runtime::shutdown_with_deadline).
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: impl IntoDuration) -> Self {
        self.shutdown_deadline = deadline.into_duration();
        self
    }
}

impl From<usize> for Workers {
    fn from(count: usize) -> Self {
        Self::new(count)
    }
}
