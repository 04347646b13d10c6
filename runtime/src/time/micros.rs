//! Times as they are stored: microseconds since the Unix epoch.

use chrono::{DateTime, Utc};

/// Microseconds since the Unix epoch, as stored.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The time a stored microsecond count stands for.
pub(crate) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
