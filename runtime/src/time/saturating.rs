//! Time arithmetic that saturates at the ends of chrono's range instead of overflowing.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// `at + by`, saturating at the latest time chrono represents.
pub(crate) fn later(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(by)
        .ok()
        .and_then(|by| at.checked_add_signed(by))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - by`, saturating at the earliest time chrono represents.
pub(crate) fn earlier(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(by)
        .ok()
        .and_then(|by| at.checked_sub_signed(by))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
