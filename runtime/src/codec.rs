//! The JSON forms the runtime stores: states, results, arguments and effects (an actor's
//! operations are encoded on top of this, in `actor/operation_codec.rs`).
//!
//! Serde impls are user code: every encode and decode here runs under `catch_unwind`, so a
//! panicking `Serialize` or `Deserialize` is an error, never a panic in the runtime. What is
//! stored is read back first, as it will be read later (`store_value`),
//! so nothing is committed that could not be read: JSON nested deeper than serde_json's
//! limit, a float that is not a number (written as `null`), a `Deserialize` that refuses
//! what `Serialize` wrote.

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// Runs user serde code, turning a panic into [`Error::Panicked`].
pub(crate) fn guarded<T>(during: &str, what: &str, run: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(run)).map_err(|panic| Error::Panicked {
        during: format!("{during} the {what}"),
        message: panic_text(&*panic).to_owned(),
    })
}

/// Whether stored arguments read back as JSON in the form an operation is decoded from
/// (within serde_json's nesting limit), for a message whose actor type is not known here.
pub(crate) fn check_readable(operation: &str, arguments: &str) -> Result<()> {
    serde_json::from_str::<serde_json::Value>(&tagged(operation, arguments)?)
        .map(drop)
        .map_err(|source| Error::Encode {
            what: "arguments",
            source,
        })
}

/// An operation's stored name and arguments in the form its enum deserialises from.
pub(crate) fn tagged(operation: &str, arguments: &str) -> Result<String> {
    let name = serde_json::to_string(operation).map_err(|source| Error::Encode {
        what: "operation name",
        source,
    })?;
    Ok(format!(r#"{{"operation":{name},"arguments":{arguments}}}"#))
}

/// Serialises a value to the JSON text stored in a row.
pub(crate) fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String> {
    guarded("serialising", what, || serde_json::to_string(value))?
        .map_err(|source| Error::Encode { what, source })
}

/// Deserialises a stored JSON text.
pub(crate) fn from_json<T: DeserializeOwned>(
    what: &'static str,
    actor_type: &str,
    actor_id: &str,
    json: &str,
) -> Result<T> {
    guarded("deserialising", what, || serde_json::from_str(json))?.map_err(|source| Error::Decode {
        what,
        actor_type: actor_type.to_owned(),
        actor_id: actor_id.to_owned(),
        source,
    })
}

/// Encodes a value for storage (a state, a result, an effect) and checks that it reads back.
pub(crate) fn store_value<T: Serialize + DeserializeOwned>(
    what: &'static str,
    operation: &str,
    value: &T,
) -> Result<String> {
    store_and_read_back(what, operation, value).map(|(json, _)| json)
}

/// [`store_value`], returning the value read back from the text beside the text: what a
/// later decode of that text gives.
pub(crate) fn store_and_read_back<T: Serialize + DeserializeOwned>(
    what: &'static str,
    operation: &str,
    value: &T,
) -> Result<(String, T)> {
    let json = to_json(what, value)?;
    let read_back =
        from_json::<T>(what, "", "", &json).map_err(|error| unreadable(what, operation, &error))?;
    Ok((json, read_back))
}

/// The error of a value that would not read back; a panic stays a panic (it may pass).
pub(crate) fn unreadable(what: &'static str, operation: &str, error: &Error) -> Error {
    match error {
        Error::Panicked { during, message } => Error::Panicked {
            during: during.clone(),
            message: message.clone(),
        },
        Error::Decode { source, .. } => Error::UnreadablePayload {
            what,
            operation: operation.to_owned(),
            reason: source.to_string(),
        },
        other => Error::UnreadablePayload {
            what,
            operation: operation.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// The message of a caught panic.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The deepest nesting of arrays and objects serde_json reads back (its recursion limit
    /// is 128: the 128th level is refused).
    const MAX_NESTING: usize = 127;

    fn nested(depth: usize) -> Value {
        (1..depth).fold(Value::Array(Vec::new()), |inner, _| {
            Value::Array(vec![inner])
        })
    }

    #[test]
    fn the_nesting_limit_is_serde_json_s() {
        assert!(store_value("state", "op", &nested(MAX_NESTING)).is_ok());
        assert!(matches!(
            store_value("state", "op", &nested(MAX_NESTING + 1)),
            Err(Error::UnreadablePayload { what: "state", .. })
        ));
    }

    #[test]
    fn a_float_that_is_not_a_number_does_not_read_back() {
        assert!(matches!(
            store_value("result", "op", &f64::NAN),
            Err(Error::UnreadablePayload { what: "result", .. })
        ));
        assert_eq!(store_value("result", "op", &1.5_f64).unwrap(), "1.5");
    }

    #[test]
    fn a_panicking_serialize_is_an_error() {
        struct Bomb;
        impl Serialize for Bomb {
            fn serialize<S: serde::Serializer>(
                &self,
                _: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                panic!("boom")
            }
        }
        let error = to_json("state", &Bomb).unwrap_err();
        assert!(
            matches!(&error, Error::Panicked { message, .. } if message == "boom"),
            "{error}"
        );
    }
}
/// Arbitrary stored text and JSON fed to every decoder of stored rows and arguments: an
/// error, never a panic.
#[cfg(test)]
pub(crate) mod proptests {
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use serde_json::Value;

    use super::*;

    #[derive(Debug, Default, Serialize, Deserialize)]
    #[serde(default)]
    struct State {
        seats: u32,
        holds: std::collections::BTreeMap<String, i64>,
    }

    /// Arbitrary JSON values, a few levels deep.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".*".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map(".*", inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Stored text: arbitrary JSON, arbitrary bytes, or brackets nested past the limit.
    pub(crate) fn stored_text() -> impl Strategy<Value = String> {
        prop_oneof![
            json().prop_map(|value| value.to_string()),
            prop::collection::vec(any::<u8>(), 0..64)
                .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            (100_usize..300).prop_map(|depth| "[".repeat(depth)),
            (100_usize..300).prop_map(|depth| format!("{{\"seats\":{}", "[".repeat(depth))),
        ]
    }

    proptest! {
        #[test]
        fn stored_state_never_panics(state in stored_text()) {
            let _ = from_json::<State>("state", "Shows", "s-1", &state);
        }

        #[test]
        fn what_is_stored_reads_back(value in json()) {
            if let Ok(stored) = store_value("state", "op", &value) {
                prop_assert!(serde_json::from_str::<Value>(&stored).is_ok());
            }
        }
    }
}
