//! What a database error means to the runtime: a conflict with another transaction, a wait
//! that ran out, a connection that is gone, a session that takes no writes, or anything
//! else. Each backend decides for its own errors (`sqlite/errors.rs`, `postgres/errors.rs`,
//! `mysql/errors.rs`); the few classes the SQL standard fixes for every server are here.
//! The engine and the client ask through [`ErrorKinds`]; no other layer reads a database's
//! codes.

use sqlx::error::{DatabaseError, ErrorKind};

pub(crate) use super::error_kind::Kind;
use crate::error::Error;

/// What `error` means to the runtime.
pub(crate) fn kind(error: &sqlx::Error) -> Kind {
    match error {
        sqlx::Error::Io(_) => Kind::ConnectionLost,
        sqlx::Error::PoolTimedOut => Kind::Busy,
        sqlx::Error::Database(database) => database_kind(&**database),
        _ => Kind::Other,
    }
}

/// What a server's (or SQLite's) own error means, as the backend that raised it says.
fn database_kind(database: &dyn DatabaseError) -> Kind {
    #[cfg(feature = "mysql")]
    if let Some(mysql) = database.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return super::mysql::errors::kind(mysql.number())
            .unwrap_or_else(|| standard(mysql.code().unwrap_or_default()));
    }
    let Some(code) = database.code() else {
        return Kind::Other;
    };
    #[cfg(feature = "postgres")]
    if let Some(kind) = super::postgres::errors::kind(&code) {
        return kind;
    }
    #[cfg(feature = "sqlite")]
    if let Some(kind) = super::sqlite::errors::kind(&code) {
        return kind;
    }
    standard(&code)
}

/// The classes of SQLSTATE the SQL standard fixes: `40001` (a serialization failure, as
/// servers report a deadlock too) and class `08` (connection exceptions).
fn standard(sqlstate: &str) -> Kind {
    match sqlstate {
        "40001" => Kind::Conflict,
        code if code.starts_with("08") => Kind::ConnectionLost,
        _ => Kind::Other,
    }
}

/// Whether a database error is a deadlock or a serialization failure: transient, and
/// resolved by running the whole transaction again.
pub(crate) fn is_transient(error: &sqlx::Error) -> bool {
    kind(error) == Kind::Conflict
}

/// Whether a database error says the connection is gone: a statement that had not been sent
/// yet can run on another connection.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    kind(error) == Kind::ConnectionLost
}

/// Whether a database error is a wait that ran out.
pub(crate) fn is_busy(error: &sqlx::Error) -> bool {
    kind(error) == Kind::Busy
}

/// What a runtime error means, where the database decided it.
pub(crate) trait ErrorKinds {
    /// A conflict with another transaction that running the whole turn again resolves: a
    /// deadlock or serialization failure (another application's locks), a key taken by a
    /// concurrent writer, or a transaction the server (or its group commit) ended.
    fn is_conflict(&self) -> bool;

    /// A connection to the database that is gone, a session that no longer accepts writes
    /// (a primary turned standby), or no host accepting writes: the runtime reconnects, and
    /// whatever the lost transaction did is known only by reading it back.
    fn is_connection_lost(&self) -> bool;

    /// A wait that ran out: for a connection, for another process's write lock on a SQLite
    /// file, or for an actor's row lock on a server.
    fn is_busy(&self) -> bool;
}

impl ErrorKinds for Error {
    fn is_conflict(&self) -> bool {
        match self {
            Self::Database(error) => {
                is_transient(error)
                    || matches!(error, sqlx::Error::Database(database)
                        if database.kind() == ErrorKind::UniqueViolation)
            }
            Self::GroupRolledBack { .. } | Self::TransactionAborted { .. } => true,
            _ => false,
        }
    }

    fn is_connection_lost(&self) -> bool {
        match self {
            Self::Database(error) => matches!(kind(error), Kind::ConnectionLost | Kind::ReadOnly),
            Self::DatabaseUnavailable { .. } => true,
            _ => false,
        }
    }

    fn is_busy(&self) -> bool {
        match self {
            Self::Database(error) => is_busy(error),
            _ => false,
        }
    }
}
