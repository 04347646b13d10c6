//! `actors`: actors with their mailbox depth, last activity and whether they are paused.

use solid_objects::admin::{ActorFilter, Admin};
use solid_objects::Error;

use crate::args::ActorsArgs;
use crate::out::{time, Out};
use crate::table::Table;
use crate::Exit;

/// Lists a page of actors.
pub(crate) async fn actors(admin: &Admin, args: ActorsArgs, out: &mut Out) -> Result<Exit, Error> {
    let mut filter = ActorFilter::new().limit(args.limit);
    if let Some(actor_type) = args.actor_type {
        filter = filter.actor_type(actor_type);
    }
    if let Some(prefix) = args.prefix {
        filter = filter.id_prefix(prefix);
    }
    if let Some(after) = args.after {
        let (actor_type, actor_id) = after.split_once('/').unwrap_or((after.as_str(), ""));
        filter = filter.after(actor_type, actor_id);
    }
    let page = admin.actors(&filter).await?;
    out.listing(&page, "no actors", || {
        let header = ["TYPE", "ID", "DEPTH", "REVISION", "LAST ACTIVITY", "PAUSED"];
        Table::of(&header, &page.actors, |actor| {
            vec![
                actor.actor_type.clone(),
                actor.actor_id.clone(),
                actor.mailbox_depth.to_string(),
                actor.revision.to_string(),
                time(actor.last_activity),
                actor
                    .paused_at
                    .map_or_else(String::new, |at| format!("since {at}")),
            ]
        })
    });
    if let (false, true, Some(last)) = (out.json, page.more, page.actors.last()) {
        say!(out, "more: --after '{}/{}'", last.actor_type, last.actor_id);
    }
    Ok(Exit::Done)
}
