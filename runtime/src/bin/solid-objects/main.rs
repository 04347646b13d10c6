//! `solid-objects`: the operator's command-line tool, over the administration API
//! ([`solid_objects::admin`]). It works from the database URL alone, without the
//! application's actor types, and every call it makes is written to the audit table with
//! the operator's user and host as the caller.

mod args;
mod table;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde::Serialize;
use serde_json::{json, Value};
use solid_objects::admin::{ActorFilter, Admin, DeadLetterFilter, EffectFilter, ReminderFilter};
use solid_objects::policy::{AdminRequest, Denied, Policy, Request};
use solid_objects::{Builder, Error, Runtime};

use args::{Cli, Command, DeadLetterAction, DeadLetterFilterArgs};
use table::Table;

/// Adds a line to the command's output, as `println!` would print it.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}

/// What the exit code says (the `--help` text lists them).
#[derive(Debug, Clone, Copy)]
enum Exit {
    Done = 0,
    Failed = 1,
    NotFound = 3,
    Problems = 4,
    Unreachable = 5,
    NotOurs = 6,
}

/// Why a command did not run: the exit code and the sentence for the operator.
struct Failure {
    exit: Exit,
    message: String,
}

impl Failure {
    fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let exit = match error {
            Error::Unreachable { .. } | Error::DatabaseUnavailable { .. } => Exit::Unreachable,
            Error::NoSchema
            | Error::SchemaOutOfDate { .. }
            | Error::SchemaFromNewerBuild { .. } => Exit::NotOurs,
            _ => Exit::Failed,
        };
        Self::new(exit, error.to_string())
    }
}

/// Whoever holds the database URL may administer it; it calls no actor.
struct Operator;

impl Policy for Operator {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new("the command-line tool sends no messages"))
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new(
            "the command-line tool reads actors through the admin API",
        ))
    }

    fn authorize_administration(&self, _request: &AdminRequest<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = Out {
        json: cli.json,
        text: String::new(),
    };
    let exit = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(cli, &mut out)),
        Err(error) => Err(Failure::new(
            Exit::Failed,
            format!("cannot start the async runtime: {error}"),
        )),
    };
    let exit = exit.unwrap_or_else(|failure| {
        complain(format_args!("error: {}", failure.message));
        failure.exit
    });
    // A reader that closed the pipe early (`| head`) wanted no more: the rest is dropped.
    let exit = match out.flush() {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            complain(format_args!("error: cannot write the output: {error}"));
            Exit::Failed
        }
        _ => exit,
    };
    ExitCode::from(exit as u8)
}

/// Writes a line to standard error, if it is still open.
fn complain(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

async fn run(cli: Cli, out: &mut Out) -> Result<Exit, Failure> {
    let url = cli.database_url.clone().ok_or(Failure::new(
        Exit::Failed,
        "no database: pass --database-url or set SOLID_OBJECTS_DATABASE_URL \
         (sqlite://path/to/actors.db, postgres://... or mysql://...)",
    ))?;
    let target = Target::of(&url)?;
    if let Command::Migrate = cli.command {
        return migrate(&target, cli.connect_timeout, out).await;
    }
    target.require_file()?;
    let runtime = target
        .builder(cli.connect_timeout)
        .apply_migrations(false)
        .start()
        .await?;
    let admin = runtime.admin().context(caller());
    let exit = execute(&admin, cli.command, out).await;
    runtime.close().await;
    Ok(exit?)
}

/// Creates or upgrades the schema, on the command that says so; a schema from a newer
/// build is refused as by every other command.
async fn migrate(
    target: &Target<'_>,
    connect_timeout: Duration,
    out: &mut Out,
) -> Result<Exit, Failure> {
    let current = match target.needs_creating() {
        true => Err(Error::NoSchema),
        false => {
            target
                .builder(connect_timeout)
                .apply_migrations(false)
                .start()
                .await
        }
    };
    let migrated = match current {
        Ok(runtime) => {
            runtime.close().await;
            false
        }
        Err(Error::NoSchema | Error::SchemaOutOfDate { .. }) => {
            target.builder(connect_timeout).start().await?.close().await;
            true
        }
        Err(error) => return Err(error.into()),
    };
    out.result(&json!({ "migrated": migrated }), || match migrated {
        true => "the solid-objects schema is now this build's".to_owned(),
        false => "the solid-objects schema was this build's already: nothing to do".to_owned(),
    });
    Ok(Exit::Done)
}

/// The database a URL names.
enum Target<'u> {
    Postgres(&'u str),
    MySql(&'u str),
    Sqlite(PathBuf),
}

impl<'u> Target<'u> {
    /// Reads `url`; an error never repeats the URL, which may hold a password.
    fn of(url: &'u str) -> Result<Self, Failure> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url));
        }
        if url.starts_with("mysql://") {
            return Ok(Self::MySql(url));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        match url.split_once(':') {
            // A scheme of two letters or more (`C:/..` is a Windows path).
            Some((scheme, _))
                if scheme.len() > 1
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                Err(Failure::new(
                    Exit::Failed,
                    format!(
                        "cannot read the database URL (scheme {scheme:?}): write \
                         sqlite://path/to/actors.db, postgres://user@host/db or \
                         mysql://user@host/db"
                    ),
                ))
            }
            // A URL behind quotes, a space or a bracket (`docker --env-file` keeps the
            // quotes): not a path, and not to be echoed as one.
            _ if url.contains("://") => Err(Failure::new(
                Exit::Failed,
                "cannot read the database URL: it does not start with its scheme (quotes, \
                 spaces or brackets around it?); write sqlite://path/to/actors.db, \
                 postgres://user@host/db or mysql://user@host/db",
            )),
            _ => Ok(Self::Sqlite(PathBuf::from(url))),
        }
    }

    /// Whether this is a SQLite file of no bytes, which SQLite would take for an empty
    /// database.
    fn is_empty_file(&self) -> bool {
        matches!(self, Self::Sqlite(path) if path.metadata().is_ok_and(|file| file.len() == 0))
    }

    /// Whether this is a SQLite file that is missing or empty: `migrate` creates it.
    fn needs_creating(&self) -> bool {
        matches!(self, Self::Sqlite(path) if !path.exists()) || self.is_empty_file()
    }

    /// A builder on this database, for the operator.
    fn builder(&self, connect_timeout: Duration) -> Builder {
        let builder = Runtime::builder()
            .policy(Operator)
            .connect_timeout(connect_timeout);
        match self {
            Self::Postgres(url) => builder.postgres(*url, 2),
            Self::MySql(url) => builder.mysql(*url, 2),
            Self::Sqlite(path) => builder.sqlite(path),
        }
    }

    /// Refuses a SQLite file that is missing or empty (only `migrate` creates one).
    fn require_file(&self) -> Result<(), Failure> {
        let Self::Sqlite(path) = self else {
            return Ok(());
        };
        if !path.is_file() {
            return Err(Failure::new(
                Exit::Failed,
                format!("no SQLite database at {}", path.display()),
            ));
        }
        if self.is_empty_file() {
            return Err(Failure::new(
                Exit::NotOurs,
                format!(
                    "{} is an empty file (0 bytes), not a solid-objects database; nothing was \
                     written (run `solid-objects migrate` to make it one)",
                    path.display()
                ),
            ));
        }
        Ok(())
    }
}

/// Who is operating: the audit table's caller.
fn caller() -> Value {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .ok();
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|host| host.trim().to_owned());
    json!({ "via": "solid-objects cli", "user": user, "host": host })
}

async fn execute(admin: &Admin, command: Command, out: &mut Out) -> Result<Exit, Error> {
    match command {
        Command::Status => {
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
                let mut table = Table::new(&["TYPE", "ACTORS", "PAUSED", "READY", "DEAD"]);
                for t in &types {
                    table.row(vec![
                        t.actor_type.clone(),
                        t.actors.to_string(),
                        t.paused.to_string(),
                        t.ready_messages.to_string(),
                        t.dead_letters.to_string(),
                    ]);
                }
                out.text(&format!("\n{}", table.render("no actors")));
            }
        }
        Command::Actors(args) => {
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
            if out.json {
                out.print_json(&page);
            } else {
                let mut table =
                    Table::new(&["TYPE", "ID", "DEPTH", "REVISION", "LAST ACTIVITY", "PAUSED"]);
                for actor in &page.actors {
                    table.row(vec![
                        actor.actor_type.clone(),
                        actor.actor_id.clone(),
                        actor.mailbox_depth.to_string(),
                        actor.revision.to_string(),
                        time(actor.last_activity),
                        actor
                            .paused_at
                            .map_or_else(String::new, |at| format!("since {at}")),
                    ]);
                }
                out.text(&table.render("no actors"));
                if let (true, Some(last)) = (page.more, page.actors.last()) {
                    say!(out, "more: --after '{}/{}'", last.actor_type, last.actor_id);
                }
            }
        }
        Command::Inspect {
            actor_type,
            actor_id,
        } => {
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
                            .map_or_else(String::new, |error| format!(": {error}"))
                    );
                }
                let state = details.state.as_ref().map_or_else(
                    || "none".to_owned(),
                    |state| serde_json::to_string_pretty(state).unwrap_or_default(),
                );
                say!(out, "state: {state}");
                let mut reminders = Table::new(&["REMINDER", "KEY", "DUE AT"]);
                for r in &details.reminders {
                    reminders.row(vec![r.name.clone(), r.key.clone(), r.due_at.to_string()]);
                }
                out.text(&reminders.render("no reminders"));
                let mut effects =
                    Table::new(&["EFFECT", "NAME", "STATUS", "ATTEMPTS", "LAST ERROR"]);
                for e in &details.effects {
                    effects.row(vec![
                        e.id.to_string(),
                        e.name.clone(),
                        e.status.clone(),
                        e.attempts.to_string(),
                        e.last_error.clone().unwrap_or_default(),
                    ]);
                }
                out.text(&effects.render("no unfinished effects"));
            }
        }
        Command::DeadLetters(args) => match args.action {
            None => {
                let letters = admin
                    .dead_letters(&dead_letter_filter(&args.filter))
                    .await?;
                if out.json {
                    out.print_json(&letters);
                } else {
                    let mut table = Table::new(&[
                        "ID",
                        "TYPE",
                        "ACTOR",
                        "OPERATION",
                        "ATTEMPTS",
                        "FAILED AT",
                        "ERROR",
                    ]);
                    for letter in &letters {
                        table.row(vec![
                            letter.message_id.to_string(),
                            letter.actor_type.clone(),
                            letter.actor_id.clone(),
                            letter.operation.clone(),
                            letter.attempts.to_string(),
                            time(letter.failed_at),
                            letter.error.clone(),
                        ]);
                    }
                    out.text(&table.render("no dead letters"));
                }
            }
            Some(DeadLetterAction::Retry { message_id }) => {
                let retry = match admin.retry_dead_letter(message_id).await {
                    Err(Error::MessageNotFound) => {
                        complain(format_args!("no message {message_id}"));
                        return Ok(Exit::NotFound);
                    }
                    retried => retried?.id(),
                };
                out.result(
                    &json!({ "message_id": message_id, "retried_as": retry }),
                    || format!("message {message_id} enqueued again as message {retry}"),
                );
            }
            Some(DeadLetterAction::Redrive(filter)) => {
                let redriven = admin.redrive(&dead_letter_filter(&filter)).await?;
                out.result(&redriven, || {
                    format!("{} dead letters enqueued again", redriven.retried)
                });
            }
        },
        Command::Effects(args) => {
            let mut filter = EffectFilter::new().limit(args.limit);
            if let Some(status) = args.status {
                filter = filter.status(status);
            }
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
            if out.json {
                out.print_json(&effects);
            } else {
                let mut table = Table::new(&[
                    "ID",
                    "NAME",
                    "ACTOR",
                    "STATUS",
                    "ATTEMPTS",
                    "CREATED AT",
                    "LAST ERROR",
                ]);
                for e in &effects {
                    table.row(vec![
                        e.id.to_string(),
                        e.name.clone(),
                        format!("{}/{}", e.actor_type, e.actor_id),
                        e.status.clone(),
                        e.attempts.to_string(),
                        e.created_at.to_string(),
                        e.last_error.clone().unwrap_or_default(),
                    ]);
                }
                out.text(&table.render("no effects"));
            }
        }
        Command::Reminders(args) => {
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
            if out.json {
                out.print_json(&reminders);
            } else {
                let mut table = Table::new(&["ACTOR", "REMINDER", "KEY", "DUE AT", "EVERY"]);
                for r in &reminders {
                    table.row(vec![
                        format!("{}/{}", r.actor_type, r.actor_id),
                        r.name.clone(),
                        r.key.clone(),
                        r.due_at.to_string(),
                        r.every_ms
                            .map_or_else(String::new, |every| format!("{every} ms")),
                    ]);
                }
                out.text(&table.render("no reminders"));
            }
        }
        Command::Pause {
            actor_type,
            actor_id,
        } => {
            let changed = admin.pause(&actor_type, &actor_id).await?;
            out.result(&json!({ "actor_type": actor_type, "actor_id": actor_id, "paused": true, "changed": changed }), || {
                match changed {
                    true => format!("paused {actor_type}/{actor_id}"),
                    false => format!("{actor_type}/{actor_id} was paused already"),
                }
            });
        }
        Command::Resume {
            actor_type,
            actor_id,
        } => {
            let changed = admin.resume(&actor_type, &actor_id).await?;
            out.result(&json!({ "actor_type": actor_type, "actor_id": actor_id, "paused": false, "changed": changed }), || {
                match changed {
                    true => format!("resumed {actor_type}/{actor_id}"),
                    false => format!("{actor_type}/{actor_id} was not paused"),
                }
            });
        }
        Command::Prune { execute } => {
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
        }
        Command::Doctor => {
            let report = admin.doctor().await?;
            if out.json {
                out.print_json(&report);
            } else {
                say!(out, "backend: {}", report.backend);
                say!(
                    out,
                    "schema: applied {:?}, this build knows up to {}",
                    report.applied_migrations,
                    report.known_migration
                );
                for (name, value) in &report.settings {
                    say!(out, "{name}: {value}");
                }
                say!(
                    out,
                    "write and read round trip: {} µs",
                    report.round_trip_micros
                );
                if let Some(skew) = report.clock_skew_ms {
                    say!(out, "clock skew (database minus this host): {skew} ms");
                }
                match report.checked_actor_types.is_empty() {
                    true => say!(
                        out,
                        "stored arguments: not checked (this tool knows no actor types; call \
                         Admin::doctor or Admin::undecodable from the application's build, \
                         with its actor types registered, to check a deploy)"
                    ),
                    false => say!(
                        out,
                        "stored arguments checked for: {}",
                        report.checked_actor_types.join(", ")
                    ),
                }
                for kind in &report.unhandled_effects {
                    say!(
                        out,
                        "effects waiting to run: {} of kind {} (the oldest since {})",
                        kind.count,
                        kind.name,
                        kind.oldest.to_rfc3339()
                    );
                }
                match report.problems.is_empty() {
                    true => say!(out, "no problems found"),
                    false => report
                        .problems
                        .iter()
                        .for_each(|problem| say!(out, "PROBLEM: {problem}")),
                }
            }
            if !report.problems.is_empty() {
                return Ok(Exit::Problems);
            }
        }
        Command::Migrate => unreachable!("`migrate` runs before the runtime starts"),
        Command::Audit { limit } => {
            let events = admin.audit_log(limit).await?;
            if out.json {
                out.print_json(&events);
            } else {
                let mut table =
                    Table::new(&["ID", "AT", "ACTION", "RESOURCE", "OUTCOME", "CALLER"]);
                for e in &events {
                    table.row(vec![
                        e.id.to_string(),
                        e.at.to_string(),
                        e.action.clone(),
                        e.resource.clone(),
                        e.outcome.clone(),
                        e.caller.as_ref().map_or_else(String::new, Value::to_string),
                    ]);
                }
                out.text(&table.render("no administration calls"));
            }
        }
    }
    Ok(Exit::Done)
}

/// The command's output, kept until it ends and then written at once (see `main`).
struct Out {
    json: bool,
    text: String,
}

impl Out {
    /// Adds `line` and a newline.
    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.text, "{line}");
    }

    /// Adds `text` as it is.
    fn text(&mut self, text: &str) {
        self.text.push_str(text);
    }

    fn print_json(&mut self, value: &impl Serialize) {
        match serde_json::to_string_pretty(value) {
            Ok(text) => say!(self, "{text}"),
            Err(error) => complain(format_args!(
                "error: the result does not serialise: {error}"
            )),
        }
    }

    /// An action's result: `value` as JSON, or the sentence `human` says.
    fn result(&mut self, value: &impl Serialize, human: impl FnOnce() -> String) {
        match self.json {
            true => self.print_json(value),
            false => say!(self, "{}", human()),
        }
    }

    /// Writes the output to standard output.
    fn flush(&self) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(self.text.as_bytes())?;
        stdout.flush()
    }
}

fn dead_letter_filter(args: &DeadLetterFilterArgs) -> DeadLetterFilter {
    let mut filter = DeadLetterFilter::new().limit(args.limit);
    if let Some(actor_type) = &args.actor_type {
        filter = filter.actor_type(actor_type);
    }
    if let Some(operation) = &args.operation {
        filter = filter.operation(operation);
    }
    if let Some(error) = &args.error {
        filter = filter.error_contains(error);
    }
    filter.since = args.since;
    filter.until = args.until;
    filter
}

fn time(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), |at| at.to_string())
}
