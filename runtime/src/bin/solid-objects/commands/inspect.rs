//! `inspect`: one actor's state, mailbox head, reminders and effects.

use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::{arguments, escaped, escaped_but, time, Out};
use crate::table::Table;
use crate::{complain, Exit};

/// Shows the actor `actor_type`/`actor_id`.
pub(crate) async fn inspect(
    admin: &Admin,
    actor_type: String,
    actor_id: String,
    out: &mut Out,
) -> Result<Exit, Error> {
    let Some(details) = admin.inspect(&actor_type, &actor_id).await? else {
        complain(format_args!("no actor {actor_type}/{actor_id}"));
        return Ok(Exit::NotFound);
    };
    if out.json {
        out.print_json(&details);
    } else {
        let actor = &details.summary;
        say!(out, "{}/{}", actor.actor_type, actor.actor_id);
        say!(
            out,
            "revision {}, incarnation {}, state version {}",
            actor.revision,
            actor.incarnation,
            actor.state_version
        );
        say!(out, "last activity: {}", time(actor.last_activity));
        if let Some(at) = actor.paused_at {
            say!(out, "PAUSED since {at}");
        }
        say!(out, "mailbox: {} ready", actor.mailbox_depth);
        if let Some(head) = &details.head {
            say!(
                out,
                "  head: message {} {} (attempts {}, next at {}){}",
                head.message_id,
                head.operation,
                head.attempts,
                head.next_attempt_at,
                head.last_error
                    .as_ref()
                    .map_or_else(String::new, |error| format!(": {}", escaped(error)))
            );
        }
        let state = details.state.as_ref().map_or_else(
            || "none".to_owned(),
            |state| {
                escaped_but(
                    &serde_json::to_string_pretty(state).unwrap_or_default(),
                    |c| c == '\n',
                )
            },
        );
        say!(out, "state: {state}");
        let reminders = Table::of(&["REMINDER", "KEY", "DUE AT"], &details.reminders, |r| {
            vec![r.name.clone(), r.key.clone(), r.due_at.to_string()]
        });
        out.text(&reminders.render("no reminders"));
        let header = [
            "EFFECT",
            "NAME",
            "STATUS",
            "ATTEMPTS",
            "LAST ERROR",
            "ARGUMENTS",
        ];
        let effects = Table::of(&header, &details.effects, |e| {
            vec![
                e.id.to_string(),
                e.name.clone(),
                e.status.to_string(),
                e.attempts.to_string(),
                escaped(e.last_error.as_deref().unwrap_or_default()),
                arguments(&e.arguments),
            ]
        });
        out.text(&effects.render("no unfinished effects"));
    }
    Ok(Exit::Done)
}
