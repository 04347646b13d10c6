//! The JSON forms the runtime stores: operations (name + arguments), state and results.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::actor::Operations;
use crate::error::{Error, Result};

/// An operation split into the columns it is stored in.
#[derive(Debug)]
pub(crate) struct EncodedOperation {
    pub(crate) name: &'static str,
    pub(crate) arguments: Value,
}

/// Splits an operation into its name and its arguments object.
pub(crate) fn encode_operation<O: Operations>(operation: &O) -> Result<EncodedOperation> {
    let mut value = serde_json::to_value(operation).map_err(|source| Error::Encode {
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
    sequence: i64,
) -> Result<O> {
    if !O::NAMES.contains(&name) {
        return Err(Error::UnknownOperation {
            actor_type: actor_type.to_owned(),
            operation: name.to_owned(),
            sequence,
        });
    }
    let name = serde_json::to_string(name).map_err(|source| Error::Encode {
        what: "operation name",
        source,
    })?;
    let tagged = format!(r#"{{"operation":{name},"arguments":{arguments}}}"#);
    serde_json::from_str(&tagged).map_err(|source| Error::Decode {
        what: "arguments",
        actor_type: actor_type.to_owned(),
        actor_id: actor_id.to_owned(),
        source,
    })
}

/// Serialises a value to the JSON text stored in a row.
pub(crate) fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| Error::Encode { what, source })
}

/// Deserialises a stored JSON text.
pub(crate) fn from_json<T: DeserializeOwned>(
    what: &'static str,
    actor_type: &str,
    actor_id: &str,
    json: &str,
) -> Result<T> {
    serde_json::from_str(json).map_err(|source| Error::Decode {
        what,
        actor_type: actor_type.to_owned(),
        actor_id: actor_id.to_owned(),
        source,
    })
}
