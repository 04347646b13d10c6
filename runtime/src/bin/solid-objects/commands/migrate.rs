//! `migrate`: creates the solid-objects schema, or applies the migrations this build has
//! that the database lacks.

use std::time::Duration;

use serde_json::json;
use solid_objects::Error;

use crate::out::Out;
use crate::target::Target;
use crate::{Exit, Failure};

/// Creates or upgrades the schema, on the command that says so; a schema from a newer
/// build is refused as by every other command.
pub(crate) async fn migrate(
    target: &Target<'_>,
    connect_timeout: Duration,
    out: &mut Out,
) -> Result<Exit, Failure> {
    let current = match target.needs_creating() {
        true => Err(Error::NoSchema),
        false => {
            target
                .builder(connect_timeout)
                .apply_migrations(false)
                .start()
                .await
        }
    };
    let migrated = match current {
        Ok(runtime) => {
            runtime.close().await;
            false
        }
        Err(Error::NoSchema | Error::SchemaOutOfDate { .. }) => {
            target.builder(connect_timeout).start().await?.close().await;
            true
        }
        Err(error) => return Err(error.into()),
    };
    out.result(&json!({ "migrated": migrated }), || match migrated {
        true => "the solid-objects schema is now this build's".to_owned(),
        false => "the solid-objects schema was this build's already: nothing to do".to_owned(),
    });
    Ok(Exit::Done)
}
