//! `pause` and `resume`: an operator's switch on one actor.

use serde_json::json;
use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::Exit;

/// Pauses the actor `actor_type`/`actor_id` (`paused`), or resumes it.
pub(crate) async fn set_paused(
    admin: &Admin,
    actor_type: String,
    actor_id: String,
    paused: bool,
    out: &mut Out,
) -> Result<Exit, Error> {
    let changed = match paused {
        true => admin.pause(&actor_type, &actor_id).await?,
        false => admin.resume(&actor_type, &actor_id).await?,
    };
    out.result(&json!({ "actor_type": actor_type, "actor_id": actor_id, "paused": paused, "changed": changed }), || {
        match (paused, changed) {
            (true, true) => format!("paused {actor_type}/{actor_id}"),
            (true, false) => format!("{actor_type}/{actor_id} was paused already"),
            (false, true) => format!("resumed {actor_type}/{actor_id}"),
            (false, false) => format!("{actor_type}/{actor_id} was not paused"),
        }
    });
    Ok(Exit::Done)
}
