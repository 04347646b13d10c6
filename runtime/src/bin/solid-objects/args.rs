//! The command line: what each command takes.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Operate solid-objects actors from their database: status, actors, dead letters,
/// effects, reminders, pause and resume, prune, doctor.
///
/// No command but `migrate` creates or changes the solid-objects schema: on a database
/// without it, or with a schema older or newer than this build, a command writes nothing
/// and exits with 6.
///
/// Exit codes: 0 done; 1 an error (the database, a refused call); 2 bad usage; 3 not
/// found (no such actor or message); 4 the doctor found problems; 5 the database server
/// refused the connection or did not answer within the connect timeout (or, for a URL that
/// lists several PostgreSQL hosts, none accepted writes); 6 not a database
/// this build operates (an empty file, no solid-objects schema, or a schema older or
/// newer than this build), nothing written. Output into a pipe closed early (`| head`)
/// ends quietly: the rest is dropped and the exit code is the command's own.
#[derive(Debug, Parser)]
#[command(name = "solid-objects", version)]
pub(crate) struct Cli {
    /// The database: `sqlite://path/to/actors.db` (or a plain path), `postgres://...` or
    /// `mysql://...`.
    #[arg(
        long,
        env = "SOLID_OBJECTS_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    pub(crate) database_url: Option<String>,

    /// How long to wait for a PostgreSQL or MySQL server to take the connection, in
    /// seconds.
    #[arg(
        long,
        env = "SOLID_OBJECTS_CONNECT_TIMEOUT",
        default_value = "10",
        value_parser = seconds,
        global = true
    )]
    pub(crate) connect_timeout: Duration,

    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// A positive number of seconds, such as `10` or `0.5`.
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>().map(Duration::try_from_secs_f64) {
        Ok(Ok(duration)) if !duration.is_zero() => Ok(duration),
        _ => Err(format!("{text:?} is not a positive number of seconds")),
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Counts of messages and effects by status, reminders, paused actors, and the actor
    /// types.
    Status,
    /// Lists actors with their mailbox depth, last activity and whether they are paused.
    Actors(ActorsArgs),
    /// Shows one actor: state, mailbox head, reminders, effects.
    Inspect {
        /// The actor's type, as stored.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
    },
    /// Lists dead letters, or retries or redrives them.
    DeadLetters(DeadLettersArgs),
    /// Lists effects.
    Effects(EffectsArgs),
    /// Lists scheduled reminders, the next due first.
    Reminders(RemindersArgs),
    /// Pauses an actor: workers skip it and callers get a "paused" error.
    Pause {
        /// The actor's type.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
    },
    /// Resumes a paused actor.
    Resume {
        /// The actor's type.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
    },
    /// Counts what is past its retention; with --execute, deletes it.
    Prune {
        /// Delete, not only count.
        #[arg(long)]
        execute: bool,
    },
    /// Checks the schema, the settings that matter, a write and read, and clock skew.
    Doctor,
    /// Creates the solid-objects schema in this database (and a SQLite file that is missing
    /// or empty), or applies the migrations this build has that it lacks: what the
    /// application's runtime does when it starts.
    Migrate,
    /// Shows the audit log of administration calls, newest first.
    Audit {
        /// At most this many rows.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ActorsArgs {
    /// Only this actor type.
    #[arg(long = "type")]
    pub(crate) actor_type: Option<String>,
    /// Only ids that start with this.
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// The page after this actor, as TYPE/ID (the last line of the previous page).
    #[arg(long)]
    pub(crate) after: Option<String>,
    /// At most this many actors.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct DeadLettersArgs {
    #[command(subcommand)]
    pub(crate) action: Option<DeadLetterAction>,
    #[command(flatten)]
    pub(crate) filter: DeadLetterFilterArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadLetterAction {
    /// Enqueues one dead letter again (again: the same new message).
    Retry {
        /// The dead letter's message id.
        message_id: i64,
    },
    /// Enqueues again every dead letter matching the filter, once each.
    Redrive(DeadLetterFilterArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub(crate) struct DeadLetterFilterArgs {
    /// Only this actor type.
    #[arg(long = "type")]
    pub(crate) actor_type: Option<String>,
    /// Only this operation.
    #[arg(long)]
    pub(crate) operation: Option<String>,
    /// Only those whose last error contains this text.
    #[arg(long)]
    pub(crate) error: Option<String>,
    /// Only those that died at or after this time (RFC 3339).
    #[arg(long)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only those that died before this time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Listing: at most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

/// A status `effects --status` takes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum EffectStatusArg {
    /// Waiting for a worker.
    Ready,
    /// Claimed by a worker.
    Running,
    /// Ran to the end.
    Done,
    /// Failed for good.
    Dead,
    /// Ready or running.
    Pending,
}

#[derive(Debug, Args)]
pub(crate) struct EffectsArgs {
    /// Only this status: ready, running, done, dead, or pending (ready or running).
    #[arg(long, value_enum)]
    pub(crate) status: Option<EffectStatusArg>,
    /// Only effects of actors of this type.
    #[arg(long = "type")]
    pub(crate) actor_type: Option<String>,
    /// Only effects of this actor (with --type).
    #[arg(long = "id")]
    pub(crate) actor_id: Option<String>,
    /// Only this kind of effect.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct RemindersArgs {
    /// Only reminders of this actor type.
    #[arg(long = "type")]
    pub(crate) actor_type: Option<String>,
    /// Only reminders of this actor (with --type).
    #[arg(long = "id")]
    pub(crate) actor_id: Option<String>,
    /// Only reminders due now or earlier (overdue ones).
    #[arg(long)]
    pub(crate) due: bool,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}
