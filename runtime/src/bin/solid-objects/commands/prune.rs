//! `prune`: counts what is past its retention, and with `--execute` deletes it.

use serde_json::json;
use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::Exit;

/// Counts, or (`execute`) deletes, what is past its retention.
pub(crate) async fn prune(admin: &Admin, execute: bool, out: &mut Out) -> Result<Exit, Error> {
    let counts = match execute {
        true => admin.prune().await?,
        false => admin.prune_preview().await?,
    };
    out.result(&json!({ "executed": execute, "counts": counts }), || {
        let verb = if execute { "deleted" } else { "would delete (run with --execute)" };
        format!(
            "{verb}: {} finished messages, {} done effects, {} dead letters, {} dead effects, {} failed attempts' times, {} audit rows",
            counts.finished_messages, counts.done_effects, counts.dead_letters, counts.dead_effects, counts.failed_attempts, counts.admin_events
        )
    });
    Ok(Exit::Done)
}
