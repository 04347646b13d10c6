//! `status`: counts of messages and effects by status, reminders, paused actors, and the
//! actor types.

use serde_json::json;
use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::table::Table;
use crate::Exit;

/// Prints the counts and the actor types.
pub(crate) async fn status(admin: &Admin, out: &mut Out) -> Result<Exit, Error> {
    let status = admin.status().await?;
    let types = admin.actor_types().await?;
    if out.json {
        out.print_json(&json!({ "status": status, "actor_types": types }));
    } else {
        let mut counts = Table::new(&["KIND", "STATUS", "COUNT"]);
        for (kind, rows) in [("messages", &status.messages), ("effects", &status.effects)] {
            for (state, count) in rows {
                counts.row(vec![kind.into(), state.clone(), count.to_string()]);
            }
        }
        counts.row(vec![
            "reminders".into(),
            "scheduled".into(),
            status.reminders.to_string(),
        ]);
        counts.row(vec![
            "reminders".into(),
            "due".into(),
            status.reminders_due.to_string(),
        ]);
        counts.row(vec![
            "actors".into(),
            "paused".into(),
            status.paused_actors.to_string(),
        ]);
        out.text(&counts.render("nothing stored yet"));
        if let Some(oldest) = status.oldest_due_message_at {
            say!(out, "oldest due message enqueued at {oldest}");
        }
        let header = ["TYPE", "ACTORS", "PAUSED", "READY", "DEAD"];
        let table = Table::of(&header, &types, |t| {
            vec![
                t.actor_type.clone(),
                t.actors.to_string(),
                t.paused.to_string(),
                t.ready_messages.to_string(),
                t.dead_letters.to_string(),
            ]
        });
        out.text(&format!("\n{}", table.render("no actors")));
    }
    Ok(Exit::Done)
}
