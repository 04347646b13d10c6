//! The statements of `solid_failed_attempts`: when each failed attempt at a message failed.
//!
//! A message row keeps only how many of its attempts failed and the last error; the operators'
//! charts of failures over time need each failure's time. The row is written by the
//! [message writes](super::MessageWrites) that record a failed attempt, in the same
//! transaction, and deleted by the retention task with the finished messages. The charts'
//! reads of it are in [`activity`](super::activity).

use super::activity_tallies::finish_stamp;
use super::dialect::{Dialect, PerDialect};

/// Records a failed attempt at message `$1` at `$2` (or at the fold mark, if later:
/// [`finish_stamp`]), under the message's actor.
pub(crate) fn record_failed_attempt(dialect: Dialect) -> &'static str {
    static RECORD_FAILED_ATTEMPT: PerDialect = PerDialect::new(|dialect| {
        format!(
            "INSERT INTO solid_failed_attempts (message_id, actor_type, actor_id, failed_at)
             SELECT id, actor_type, actor_id, {failed_at} FROM solid_messages WHERE id = $1",
            failed_at = finish_stamp(dialect, "$2"),
        )
    });
    RECORD_FAILED_ATTEMPT.get(dialect)
}

/// Deletes the failed attempts that failed before `$1`.
pub(crate) const PRUNE_FAILED_ATTEMPTS: &str =
    "DELETE FROM solid_failed_attempts WHERE failed_at < $1";
