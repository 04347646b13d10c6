//! Ids and keys are checked before anything is written, with the same rules on every
//! backend: a value a database would refuse (PostgreSQL stores no NUL byte in text) is a
//! typed error at the door, never a database error halfway through a turn.

use crate::error::{Error, Result};

/// The longest actor id, in bytes.
pub const MAX_ACTOR_ID_BYTES: usize = 255;

/// The longest idempotency key or reminder key, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// Checks that an actor id is non-empty, at most [`MAX_ACTOR_ID_BYTES`] long and free of NUL.
pub(crate) fn validate_id(id: &str) -> Result<()> {
    check(
        id,
        MAX_ACTOR_ID_BYTES,
        "give every actor a non-empty id",
        "use a shorter key (a hash or a database id)",
    )
    .map_err(|reason| Error::InvalidActorId { reason })
}

/// Checks that an idempotency key or a reminder key is non-empty, at most [`MAX_KEY_BYTES`]
/// long and free of NUL.
pub(crate) fn validate_key(what: &'static str, key: &str) -> Result<()> {
    check(
        key,
        MAX_KEY_BYTES,
        "use a non-empty key",
        "use a shorter key (a hash of it, say)",
    )
    .map_err(|reason| Error::InvalidKey { what, reason })
}

fn check(value: &str, limit: usize, when_empty: &str, when_long: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("it is empty; {when_empty}"));
    }
    if value.len() > limit {
        return Err(format!(
            "it is {} bytes, over the limit of {limit}; {when_long}",
            value.len()
        ));
    }
    if let Some(at) = value.find('\0') {
        return Err(format!(
            "it holds a NUL byte (at byte {at}), which databases do not store in text; remove it"
        ));
    }
    Ok(())
}
