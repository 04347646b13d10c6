//! `solid-objects`: the operator's command-line tool, over the administration API
//! ([`solid_objects::admin`]). It works from the database URL alone, without the
//! application's actor types, and every call it makes is written to the audit table with
//! the operator's user and host as the caller.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{json, Value};
use solid_objects::policy::{AdminRequest, Denied, Policy, Request};
use solid_objects::Error;

use args::{Cli, Command};
use out::Out;
use target::Target;

/// Adds a line to the command's output, as `println!` would print it.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}

mod args;
mod commands;
mod out;
mod table;
mod target;

/// What the exit code says (the `--help` text lists them).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Exit {
    Done = 0,
    Failed = 1,
    NotFound = 3,
    Problems = 4,
    Unreachable = 5,
    NotOurs = 6,
}

/// Why a command did not run: the exit code and the sentence for the operator.
pub(crate) struct Failure {
    exit: Exit,
    message: String,
}

impl Failure {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
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
pub(crate) struct Operator;

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
pub(crate) fn complain(line: std::fmt::Arguments<'_>) {
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
        return commands::migrate(&target, cli.connect_timeout, out).await;
    }
    target.require_file()?;
    let runtime = target
        .builder(cli.connect_timeout)
        .apply_migrations(false)
        .start()
        .await?;
    let admin = runtime.admin().context(caller());
    let exit = commands::execute(&admin, cli.command, out).await;
    runtime.close().await;
    Ok(exit?)
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
