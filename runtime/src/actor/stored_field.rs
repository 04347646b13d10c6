//! The bounds the generated code puts on each field it stores as JSON (a state's fields, a
//! typed rejection's details), so a field without serde impls is one error at that field
//! that says what it needs, rather than errors inside serde's generated code.
//!
//! Each trait is implemented for every serde type, and that impl is not offered as the
//! fix (`#[diagnostic::do_not_recommend]`): rustc reports the trait itself, with its
//! message.

use serde::de::DeserializeOwned;
use serde::{Deserializer, Serialize, Serializer};

/// A type a field of an actor's state can have: it is stored as JSON.
#[diagnostic::on_unimplemented(
    message = "this field of the actor's state has the type `{Self}`, which has no serde impls: the state is stored as JSON",
    label = "`{Self}` needs `Serialize` and `Deserialize`",
    note = "add `#[derive(serde::Serialize, serde::Deserialize)]` to `{Self}` (for a type of another crate, enable its `serde` feature or store a type of your own); a field that is not part of the stored state takes `#[serde(skip)]` and starts from its default"
)]
pub trait StateField: Serialize + DeserializeOwned {}

#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> StateField for T {}

/// A type a field of a `#[derive(Rejection)]` variant can have: it is stored as the
/// rejection's details.
#[diagnostic::on_unimplemented(
    message = "this field of the rejection has the type `{Self}`, which has no serde impls: a rejection's fields are its stored details",
    label = "`{Self}` needs `Serialize` and `Deserialize`",
    note = "add `#[derive(serde::Serialize, serde::Deserialize)]` to `{Self}`, or keep a serialisable form of it (such as its id or its text) in the variant"
)]
pub trait RejectionDetail: Serialize + DeserializeOwned {}

#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> RejectionDetail for T {}

/// The serde `with` module `#[actor]` puts on each field of the state: serde's own form of
/// the field, under the bound [`StateField`].
pub mod state_field {
    use super::{Deserializer, Serializer, StateField};

    /// Serialises the field as serde would.
    pub fn serialize<T: StateField, S: Serializer>(
        value: &T,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    /// Deserialises the field as serde would.
    pub fn deserialize<'de, T: StateField, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<T, D::Error> {
        T::deserialize(deserializer)
    }
}

/// A rejection field as its stored details.
pub fn detail_to_value<T: RejectionDetail>(
    value: &T,
) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(value)
}

/// A rejection field read back from its stored details.
pub fn detail_from_value<T: RejectionDetail>(
    value: serde_json::Value,
) -> Result<T, serde_json::Error> {
    serde_json::from_value(value)
}
