//! `effects`: effects, filtered by status, actor and name.

use solid_objects::admin::{Admin, EffectFilter, EffectStatus};
use solid_objects::Error;

use crate::args::{EffectStatusArg, EffectsArgs};
use crate::out::{arguments, escaped, Out};
use crate::table::Table;
use crate::Exit;

/// Lists effects.
pub(crate) async fn effects(
    admin: &Admin,
    args: EffectsArgs,
    out: &mut Out,
) -> Result<Exit, Error> {
    let mut filter = EffectFilter::new().limit(args.limit);
    filter = match args.status {
        None => filter,
        Some(EffectStatusArg::Pending) => filter.pending(),
        Some(EffectStatusArg::Ready) => filter.status(EffectStatus::Ready),
        Some(EffectStatusArg::Running) => filter.status(EffectStatus::Running),
        Some(EffectStatusArg::Done) => filter.status(EffectStatus::Done),
        Some(EffectStatusArg::Dead) => filter.status(EffectStatus::Dead),
    };
    if let Some(actor_type) = args.actor_type {
        filter = filter.actor_type(actor_type);
    }
    if let Some(actor_id) = args.actor_id {
        filter = filter.actor_id(actor_id);
    }
    if let Some(name) = args.name {
        filter = filter.name(name);
    }
    let effects = admin.effects(&filter).await?;
    out.listing(&effects, "no effects", || {
        let header = [
            "ID",
            "NAME",
            "ACTOR",
            "STATUS",
            "ATTEMPTS",
            "CREATED AT",
            "LAST ERROR",
            "ARGUMENTS",
        ];
        Table::of(&header, &effects, |e| {
            vec![
                e.id.to_string(),
                e.name.clone(),
                format!("{}/{}", e.actor_type, e.actor_id),
                e.status.to_string(),
                e.attempts.to_string(),
                e.created_at.to_string(),
                escaped(e.last_error.as_deref().unwrap_or_default()),
                arguments(&e.arguments),
            ]
        })
    });
    Ok(Exit::Done)
}
