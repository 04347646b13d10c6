//! `reminders`: scheduled reminders, the next due first.

use solid_objects::admin::{Admin, ReminderFilter};
use solid_objects::Error;

use crate::args::RemindersArgs;
use crate::out::Out;
use crate::table::Table;
use crate::Exit;

/// Lists scheduled reminders.
pub(crate) async fn reminders(
    admin: &Admin,
    args: RemindersArgs,
    out: &mut Out,
) -> Result<Exit, Error> {
    let mut filter = ReminderFilter::new().limit(args.limit);
    if let Some(actor_type) = args.actor_type {
        filter = filter.actor_type(actor_type);
    }
    if let Some(actor_id) = args.actor_id {
        filter = filter.actor_id(actor_id);
    }
    if args.due {
        filter = filter.due_before(chrono::Utc::now());
    }
    let reminders = admin.reminders(&filter).await?;
    out.listing(&reminders, "no reminders", || {
        let header = ["ACTOR", "REMINDER", "KEY", "DUE AT", "EVERY"];
        Table::of(&header, &reminders, |r| {
            vec![
                format!("{}/{}", r.actor_type, r.actor_id),
                r.name.clone(),
                r.key.clone(),
                r.due_at.to_string(),
                r.every_ms
                    .map_or_else(String::new, |every| format!("{every} ms")),
            ]
        })
    });
    Ok(Exit::Done)
}
