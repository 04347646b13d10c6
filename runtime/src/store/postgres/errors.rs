//! What PostgreSQL's own SQLSTATEs mean to the runtime (the SQL standard's classes are the
//! store's `errors.rs`).

use crate::store::error_kind::Kind;

/// What a PostgreSQL SQLSTATE means, if it is one of PostgreSQL's own.
pub(crate) fn kind(sqlstate: &str) -> Option<Kind> {
    match sqlstate {
        // deadlock_detected.
        "40P01" => Some(Kind::Conflict),
        // admin_shutdown, crash_shutdown, cannot_connect_now: the server is going away.
        "57P01" | "57P02" | "57P03" => Some(Kind::ConnectionLost),
        // read_only_sql_transaction: what a standby answers a write.
        "25006" => Some(Kind::ReadOnly),
        // lock_not_available (lock_timeout) and query_canceled (statement_timeout).
        "55P03" | "57014" => Some(Kind::Busy),
        _ => None,
    }
}
