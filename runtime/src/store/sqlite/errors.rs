//! What SQLite's result codes mean to the runtime.

use crate::store::error_kind::Kind;

/// What a SQLite result code (a number, shorter than a SQLSTATE) means: `SQLITE_BUSY` (5)
/// and `SQLITE_LOCKED` (6) in the low byte of an extended code are a wait that ran out.
pub(crate) fn kind(code: &str) -> Option<Kind> {
    if code.len() >= 5 {
        return None;
    }
    let code = code.parse::<i32>().ok()?;
    matches!(code & 0xff, 5 | 6).then_some(Kind::Busy)
}
