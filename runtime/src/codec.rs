//! The JSON forms the runtime stores: operations (name + arguments), state and results.
//!
//! Serde impls are user code: every encode and decode here runs under `catch_unwind`, so a
//! panicking `Serialize` or `Deserialize` is an error, never a panic in the runtime. Values
//! are checked on the way in with the limit used on the way out (serde_json's nesting
//! limit), so nothing is committed that could not be read back.

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::actor::Operations;
use crate::error::{Error, Result};
use crate::handled::panic_text;

/// The deepest nesting of arrays and objects serde_json reads back (its recursion limit is
/// 128: the 128th level is refused).
pub(crate) const MAX_NESTING: usize = 127;

/// An operation split into the columns it is stored in.
#[derive(Debug)]
pub(crate) struct EncodedOperation {
    pub(crate) name: &'static str,
    pub(crate) arguments: Value,
}

/// Runs user serde code, turning a panic into [`Error::Panicked`].
fn guarded<T>(during: &str, what: &str, run: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(run)).map_err(|panic| Error::Panicked {
        during: format!("{during} the {what}"),
        message: panic_text(&*panic).to_owned(),
    })
}

/// Splits an operation into its name and its arguments object.
pub(crate) fn encode_operation<O: Operations>(operation: &O) -> Result<EncodedOperation> {
    let mut value = guarded("serialising", "arguments", || {
        serde_json::to_value(operation)
    })?
    .map_err(|source| Error::Encode {
        what: "arguments",
        source,
    })?;
    let arguments = value
        .get_mut("arguments")
        .map(Value::take)
        .unwrap_or_else(|| Value::Object(Default::default()));
    Ok(EncodedOperation {
        name: operation.name(),
        arguments,
    })
}

/// Rebuilds an operation from its stored name and arguments.
pub(crate) fn decode_operation<O: Operations>(
    actor_type: &str,
    actor_id: &str,
    name: &str,
    arguments: &str,
    message_id: i64,
) -> Result<O> {
    if !O::NAMES.contains(&name) {
        return Err(Error::UnknownOperation {
            actor_type: actor_type.to_owned(),
            operation: name.to_owned(),
            message_id,
        });
    }
    let name = serde_json::to_string(name).map_err(|source| Error::Encode {
        what: "operation name",
        source,
    })?;
    let tagged = format!(r#"{{"operation":{name},"arguments":{arguments}}}"#);
    guarded("deserialising", "arguments", || {
        serde_json::from_str(&tagged)
    })?
    .map_err(|source| Error::Decode {
        what: "arguments",
        actor_type: actor_type.to_owned(),
        actor_id: actor_id.to_owned(),
        source,
    })
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

/// How deeply arrays and objects nest in a JSON text (0 for a scalar), without parsing it:
/// brackets inside strings do not count.
pub(crate) fn nesting(json: &str) -> usize {
    let (mut depth, mut deepest) = (0_usize, 0_usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Checks that a stored value (state, result) reads back: `extra` levels are added around
/// it when it is read (1 for arguments, read inside their operation).
pub(crate) fn check_readable(
    what: &'static str,
    operation: &str,
    json: &str,
    extra: usize,
) -> Result<()> {
    let depth = nesting(json) + extra;
    if depth > MAX_NESTING {
        return Err(Error::UnreadablePayload {
            what,
            operation: operation.to_owned(),
            reason: format!(
                "it nests {depth} levels of arrays and objects deep; JSON is read back up to \
                 {MAX_NESTING}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn the_nesting_limit_is_serde_json_s() {
        assert!(serde_json::from_str::<Value>(&nested(MAX_NESTING)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(MAX_NESTING + 1)).is_err());
        assert!(check_readable("state", "op", &nested(MAX_NESTING), 0).is_ok());
        assert!(check_readable("state", "op", &nested(MAX_NESTING + 1), 0).is_err());
        assert!(check_readable("arguments", "op", &nested(MAX_NESTING), 1).is_err());
    }

    #[test]
    fn brackets_inside_strings_do_not_nest() {
        assert_eq!(nesting(r#"{"a": "[[[{{{\"]]]"}"#), 1);
        assert_eq!(nesting(r#"["\\", [1]]"#), 2);
        assert_eq!(nesting("42"), 0);
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
mod proptests {
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(tag = "operation", content = "arguments")]
    enum Operation {
        #[serde(rename = "hold")]
        Hold { hold_id: String, seats: u32 },
        #[serde(rename = "ping")]
        Ping {},
    }

    impl Operations for Operation {
        const NAMES: &'static [&'static str] = &["hold", "ping"];

        fn name(&self) -> &'static str {
            match self {
                Self::Hold { .. } => "hold",
                Self::Ping {} => "ping",
            }
        }
    }

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
    fn stored_text() -> impl Strategy<Value = String> {
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
        fn stored_arguments_never_panic(name in "hold|ping|.*", arguments in stored_text()) {
            let _ = decode_operation::<Operation>("Shows", "s-1", &name, &arguments, 1);
        }

        #[test]
        fn stored_state_never_panics(state in stored_text()) {
            let _ = from_json::<State>("state", "Shows", "s-1", &state);
        }

        #[test]
        fn nesting_agrees_with_serde_json(value in json()) {
            let text = value.to_string();
            let readable = check_readable("state", "op", &text, 0).is_ok();
            prop_assert_eq!(readable, serde_json::from_str::<Value>(&text).is_ok());
        }

        #[test]
        fn nesting_never_panics(text in stored_text()) {
            let _ = check_readable("state", "op", &text, 1);
        }
    }
}
