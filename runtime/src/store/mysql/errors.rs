//! What MySQL's and MariaDB's error numbers mean to the runtime (their SQLSTATEs are the SQL
//! standard's, in the store's `errors.rs`).

use crate::store::error_kind::Kind;

/// What a MySQL or MariaDB error number means, if the number alone says.
pub(crate) fn kind(number: u16) -> Option<Kind> {
    match number {
        // ER_LOCK_WAIT_TIMEOUT, MariaDB's max_statement_time (ER_STATEMENT_TIMEOUT), MySQL's
        // max_execution_time (ER_QUERY_TIMEOUT).
        1205 | 1969 | 3024 => Some(Kind::Busy),
        // ER_SERVER_SHUTDOWN, MariaDB's ER_CONNECTION_KILLED: the server is going away.
        1053 | 1927 => Some(Kind::ConnectionLost),
        // ER_OPTION_PREVENTS_STATEMENT (`--read-only`), ER_READ_ONLY_MODE: a replica, or a
        // primary being switched away from.
        1290 | 1836 => Some(Kind::ReadOnly),
        _ => None,
    }
}

/// Whether a DDL statement's error says that its change is in place already: a duplicate
/// column (1060), key name (1061) or table (1050), or a column or key to drop that is gone
/// (1091).
pub(crate) fn is_already_done(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(database) = error else {
        return false;
    };
    database
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|mysql| matches!(mysql.number(), 1050 | 1060 | 1061 | 1091))
}
