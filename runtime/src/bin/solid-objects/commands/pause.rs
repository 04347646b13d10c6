//! `pause` and `resume`: an operator's switch on one actor.

use serde_json::json;
use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::Exit;

/// Pauses the actor `actor_type`/`actor_id`.
pub(crate) async fn pause(
    admin: &Admin,
    actor_type: String,
    actor_id: String,
    out: &mut Out,
) -> Result<Exit, Error> {
    let changed = admin.pause(&actor_type, &actor_id).await?;
    out.result(&json!({ "actor_type": actor_type, "actor_id": actor_id, "paused": true, "changed": changed }), || {
        match changed {
            true => format!("paused {actor_type}/{actor_id}"),
            false => format!("{actor_type}/{actor_id} was paused already"),
        }
    });
    Ok(Exit::Done)
}

/// Resumes the actor `actor_type`/`actor_id`.
pub(crate) async fn resume(
    admin: &Admin,
    actor_type: String,
    actor_id: String,
    out: &mut Out,
) -> Result<Exit, Error> {
    let changed = admin.resume(&actor_type, &actor_id).await?;
    out.result(&json!({ "actor_type": actor_type, "actor_id": actor_id, "paused": false, "changed": changed }), || {
        match changed {
            true => format!("resumed {actor_type}/{actor_id}"),
            false => format!("{actor_type}/{actor_id} was not paused"),
        }
    });
    Ok(Exit::Done)
}
