//! The subcommands, a module each, and the dispatch from a parsed [`Command`] to its
//! module.

mod actors;
mod audit;
mod dead_letters;
mod doctor;
mod effects;
mod inspect;
mod migrate;
mod pause;
mod prune;
mod reminders;
mod status;

use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::args::Command;
use crate::out::Out;
use crate::Exit;

pub(crate) use migrate::migrate;

/// Runs `command` (any but `migrate`, which runs before the runtime starts) through `admin`.
pub(crate) async fn execute(admin: &Admin, command: Command, out: &mut Out) -> Result<Exit, Error> {
    match command {
        Command::Status => status::status(admin, out).await,
        Command::Actors(args) => actors::actors(admin, args, out).await,
        Command::Inspect {
            actor_type,
            actor_id,
        } => inspect::inspect(admin, actor_type, actor_id, out).await,
        Command::DeadLetters(args) => dead_letters::dead_letters(admin, args, out).await,
        Command::Effects(args) => effects::effects(admin, args, out).await,
        Command::Reminders(args) => reminders::reminders(admin, args, out).await,
        Command::Pause {
            actor_type,
            actor_id,
        } => pause::set_paused(admin, actor_type, actor_id, true, out).await,
        Command::Resume {
            actor_type,
            actor_id,
        } => pause::set_paused(admin, actor_type, actor_id, false, out).await,
        Command::Prune { execute } => prune::prune(admin, execute, out).await,
        Command::Doctor => doctor::doctor(admin, out).await,
        Command::Migrate => unreachable!("`migrate` runs before the runtime starts"),
        Command::Audit { limit } => audit::audit(admin, limit, out).await,
    }
}
