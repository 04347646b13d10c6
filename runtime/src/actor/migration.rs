//! State versions: reading a state stored by an older build through the actor's
//! `#[migrate(from = n)]` functions.
//!
//! `#[actor(version = 3)]` on the struct makes 3 the version every committed turn stores
//! beside the state. When a turn, a query or a snapshot reads a state stored at version 1, the
//! runtime runs the migration from 1 (to 2), then the one from 2 (to 3), in memory, and
//! deserialises the result; the next committed turn stores it as version 3. A state stored
//! by a newer build is never touched (see [`Error::StateFromNewerBuild`](crate::Error)).
//!
//! ```
//! use solid_objects::prelude::*;
//! use solid_objects::MigrationError;
//!
//! /// Version 1 stored `price` in whole euros; version 2 stores cents.
//! #[actor(version = 2)]
//! #[derive(Default)]
//! pub struct Listing {
//!     price_cents: u64,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct ListingV1 {
//!     price: u64,
//! }
//!
//! #[actor]
//! impl Listing {
//!     #[migrate(from = 1)]
//!     fn from_v1(old: ListingV1) -> Result<Listing, MigrationError> {
//!         let price_cents = old
//!             .price
//!             .checked_mul(100)
//!             .ok_or_else(|| MigrationError::new("the price overflows in cents"))?;
//!         Ok(Listing { price_cents })
//!     }
//!
//!     #[query]
//!     pub fn price_cents(&self) -> u64 {
//!         self.price_cents
//!     }
//! }
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::actor::Actor;
use crate::codec::panic_text;
use crate::error::{Error, Result};

/// Why a migration could not bring a stored state to the next version.
///
/// A migration returns it in its `Err`; the message's attempt then counts as failed (and
/// retries, and becomes a dead letter after the actor's attempts), and nothing is stored.
/// Build one from a message, or let `?` convert a `serde_json::Error`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct MigrationError {
    message: String,
}

impl MigrationError {
    /// A migration error that says what is wrong with the stored state.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// What is wrong with the stored state.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<serde_json::Error> for MigrationError {
    fn from(error: serde_json::Error) -> Self {
        Self::new(error.to_string())
    }
}

impl From<String> for MigrationError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for MigrationError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// One generated step: the stored JSON of version n in, version n + 1 out.
#[doc(hidden)]
pub type Migration = fn(Value) -> std::result::Result<Value, MigrationError>;

/// Runs a `#[migrate]` function that returns a `Result`: reads its old type from the JSON and
/// writes what it returns back to JSON.
#[doc(hidden)]
pub fn fallible<Old, New, E>(
    state: Value,
    migrate: impl FnOnce(Old) -> std::result::Result<New, E>,
) -> std::result::Result<Value, MigrationError>
where
    Old: DeserializeOwned,
    New: Serialize,
    E: Into<MigrationError>,
{
    let old = serde_json::from_value(state).map_err(|error| {
        MigrationError::new(format!(
            "the stored state does not read as the migration's argument: {error}"
        ))
    })?;
    let new = migrate(old).map_err(Into::into)?;
    Ok(serde_json::to_value(new)?)
}

/// Runs a `#[migrate]` function that cannot fail.
#[doc(hidden)]
pub fn infallible<Old, New>(
    state: Value,
    migrate: impl FnOnce(Old) -> New,
) -> std::result::Result<Value, MigrationError>
where
    Old: DeserializeOwned,
    New: Serialize,
{
    fallible(state, |old| Ok::<_, MigrationError>(migrate(old)))
}

/// Brings a state stored at `stored_version` to `A::VERSION`, or refuses: a newer version or
/// one no migration starts from is left for a build that reads it; a migration that fails or
/// panics is an error of this attempt.
pub(crate) fn to_current<A: Actor>(actor_id: &str, stored_version: i64, json: &str) -> Result<A> {
    let current = i64::from(A::VERSION);
    if stored_version == current {
        return crate::codec::from_json("state", A::TYPE_NAME, actor_id, json);
    }
    if stored_version > current {
        return Err(Error::StateFromNewerBuild {
            actor_type: A::TYPE_NAME.to_owned(),
            actor_id: actor_id.to_owned(),
            stored: stored_version,
            current: A::VERSION,
        });
    }
    let mut state: Value = crate::codec::from_json("state", A::TYPE_NAME, actor_id, json)?;
    for from in stored_version..current {
        let missing = || Error::NoMigration {
            actor_type: A::TYPE_NAME.to_owned(),
            actor_id: actor_id.to_owned(),
            stored: stored_version,
            from,
            current: A::VERSION,
        };
        let step = u32::try_from(from)
            .ok()
            .and_then(A::migration)
            .ok_or_else(missing)?;
        let failed = |message: String| Error::MigrationFailed {
            actor_type: A::TYPE_NAME.to_owned(),
            actor_id: actor_id.to_owned(),
            from,
            message,
        };
        state = catch_unwind(AssertUnwindSafe(|| step(state)))
            .map_err(|panic| failed(format!("it panicked: {}", panic_text(&*panic))))?
            .map_err(|error| failed(error.to_string()))?;
    }
    catch_unwind(AssertUnwindSafe(|| serde_json::from_value(state)))
        .map_err(|panic| Error::Panicked {
            during: format!("deserialising the migrated state of {}", A::TYPE_NAME),
            message: panic_text(&*panic).to_owned(),
        })?
        .map_err(|source| Error::Decode {
            what: "migrated state",
            actor_type: A::TYPE_NAME.to_owned(),
            actor_id: actor_id.to_owned(),
            source,
        })
}
