//! An actor's operations in the JSON form the runtime stores: the name and the arguments
//! object, checked to read back as they will be read when the operation runs.
//!
//! The generic half (values, states, results, panics in user serde code) is the leaf
//! `codec`; this half needs the [`Operations`] contract the macros implement.

use serde_json::Value;

use crate::actor::Operations;
use crate::codec::{guarded, tagged, to_json, unreadable};
use crate::error::{Error, Result};

/// An operation split into the columns it is stored in.
#[derive(Debug)]
pub(crate) struct EncodedOperation {
    pub(crate) name: &'static str,
    pub(crate) arguments: Value,
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
    let tagged = tagged(name, arguments)?;
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

/// An operation as it is stored: its name, its arguments as JSON (for a policy to read)
/// and as the text stored.
#[derive(Debug)]
pub(crate) struct StoredOperation {
    pub(crate) name: &'static str,
    pub(crate) value: Value,
    pub(crate) arguments: String,
}

/// Encodes an operation for storage, and reads it back as it will be read when it runs:
/// nothing is stored that could not be (JSON nested deeper than serde_json reads, a float
/// that is not a number, a `Deserialize` that refuses what `Serialize` wrote). Returns the
/// stored form and the operation as read back.
pub(crate) fn store_operation<O: Operations>(operation: &O) -> Result<(StoredOperation, O)> {
    let encoded = encode_operation(operation)?;
    let arguments = to_json("arguments", &encoded.arguments)?;
    let read_back = decode_operation::<O>("", "", encoded.name, &arguments, 0)
        .map_err(|error| unreadable("arguments", encoded.name, &error))?;
    let stored = StoredOperation {
        name: encoded.name,
        value: encoded.arguments,
        arguments,
    };
    Ok((stored, read_back))
}

/// Arbitrary stored arguments fed to the operation decoder: an error, never a panic.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::codec::proptests::stored_text;

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

    proptest! {
        #[test]
        fn stored_arguments_never_panic(name in "hold|ping|.*", arguments in stored_text()) {
            let _ = decode_operation::<Operation>("Shows", "s-1", &name, &arguments, 1);
        }
    }
}
