//! What the state-migration cases do to a stored state's JSON by hand, as an untyped
//! migration does.

use serde_json::Value;
use solid_objects::prelude::*;

/// Renames the `owner` of a version 1 state (a `what`: a wallet, an account) to its
/// `holder`, in its stored JSON.
pub fn owner_renamed_holder(mut old: Value, what: &str) -> Result<Value, MigrationError> {
    let state = old
        .as_object_mut()
        .ok_or_else(|| format!("a version 1 {what} is an object"))?;
    let owner = state
        .remove("owner")
        .ok_or_else(|| format!("a version 1 {what} has an owner"))?;
    state.insert("holder".to_owned(), owner);
    Ok(old)
}
