//! The `solid-objects` binary end to end, as an operator runs it: against a real SQLite
//! file and a real PostgreSQL server that an application's runtime wrote, with `--json`
//! output parsed and exit codes checked; against servers that do not answer, databases
//! that are not this build's (where it writes nothing), closed pipes, and URLs that hold a
//! password (which it never prints).
#![cfg(feature = "cli")]

#[path = "../../tests/support/postgres.rs"]
#[allow(unreachable_pub, dead_code)]
mod postgres;
#[path = "../../tests/support/servers.rs"]
#[allow(unreachable_pub, dead_code)]
mod servers;
#[path = "../../tests/support/silent_ports.rs"]
#[allow(unreachable_pub)]
mod silent_ports;

use std::process::Output;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, Error};
use sqlx::sqlite::SqliteConnectOptions;

use silent_ports::SilentPorts;

/// What the desk asks for after its turn.
#[derive(Serialize, Deserialize)]
struct Notify {
    desk: String,
}

impl Effect for Notify {
    const NAME: &'static str = "notify";
    type Output = ();
}

#[actor]
#[derive(Default)]
struct Desk {
    total: i64,
}

#[actor]
impl Desk {
    #[command]
    fn add(&mut self, turn: &mut Turn<Self>, n: i64) -> i64 {
        self.total += n;
        turn.schedule(turn.now() + TimeDelta::hours(1), "ring")
            .ring();
        turn.emit(Notify {
            desk: turn.actor_id().to_owned(),
        });
        self.total
    }

    /// Emits a notification for `desk`, whatever text it is.
    #[command]
    fn notify(&mut self, turn: &mut Turn<Self>, desk: String) {
        turn.emit(Notify { desk });
    }

    #[command]
    fn fail(&mut self, why: String) -> Result<(), Failure> {
        Err(Failure::permanent(why))
    }

    #[reminder]
    fn ring(&mut self) {}
}

/// Runs the binary on `url` with `args`, leaving the test's runtime free meanwhile (the
/// application's connections finish their work while the binary runs).
async fn cli(url: &str, args: &[&str]) -> Output {
    cli_with_env(url, args, &[]).await
}

/// Runs the binary as [`cli`] does, with `env` set (a process still running when the
/// returned future is dropped is killed).
async fn cli_with_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_solid-objects"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("SOLID_OBJECTS_DATABASE_URL")
        .env_remove("SOLID_OBJECTS_CONNECT_TIMEOUT")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the binary runs")
}

/// Runs the binary with `--json`, expects exit code 0, and parses what it printed.
async fn cli_json(url: &str, args: &[&str]) -> Value {
    let output = cli(url, &[args, &["--json"]].concat()).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "{args:?} printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// An application's runtime on `builder`, which leaves two desks behind: d1 with a state,
/// a reminder and an effect; d2 with a dead letter.
async fn application(builder: solid_objects::Builder) -> Runtime {
    let runtime = builder
        .actor::<Desk>()
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(30))
        .start()
        .await
        .expect("the application starts");
    runtime.reference::<Desk>("d1").add(5).await.unwrap();
    let dead = runtime
        .reference::<Desk>("d2")
        .fail("gateway down".to_owned())
        .await;
    assert!(dead.is_err());
    runtime
}

/// What the binary on `url` with `args` printed, which must succeed.
async fn printed(url: &str, args: &[&str]) -> String {
    let output = cli(url, args).await;
    assert_eq!(output.status.code(), Some(0), "{args:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The URL of the SQLite file at `path`, which the [`application`] left behind, closed.
async fn application_file(path: &std::path::Path) -> String {
    application(Runtime::builder().sqlite(path))
        .await
        .close()
        .await;
    format!("sqlite://{}", path.display())
}

/// Each command that lists the dead effects of the desk `id` on the database at `url`
/// (`effects --status dead`, `inspect Desk <id>`), and what it printed.
async fn dead_effect_listings<'a>(url: &str, id: &'a str) -> Vec<(Vec<&'a str>, String)> {
    let mut listings = Vec::new();
    for args in [
        vec!["effects", "--status", "dead"],
        vec!["inspect", "Desk", id],
    ] {
        let text = printed(url, &args).await;
        listings.push((args, text));
    }
    listings
}

/// A runtime on the SQLite file `path` whose desk `id` emitted a notification for `desk`,
/// which died at its first attempt with `error`.
async fn with_a_dead_notification(
    path: &std::path::Path,
    id: &str,
    desk: String,
    error: &'static str,
) -> Runtime {
    let runtime = Runtime::builder()
        .sqlite(path)
        .policy(AllowAll)
        .actor::<Desk>()
        .effect(move |_: Notify, _| async move { Err::<(), _>(Failure::permanent(error)) })
        .start()
        .await
        .unwrap();
    runtime.reference::<Desk>(id).notify(desk).await.unwrap();
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime
}

async fn operate(url: &str, runtime: &Runtime) {
    let status = cli_json(url, &["status"]).await;
    assert_eq!(status["actor_types"][0]["actor_type"], "Desk");
    assert_eq!(status["actor_types"][0]["actors"], 2);
    assert_eq!(status["actor_types"][0]["dead_letters"], 1);
    assert_eq!(status["status"]["reminders"], 1);

    let actors = cli_json(url, &["actors", "--type", "Desk", "--limit", "1"]).await;
    assert_eq!(actors["actors"][0]["actor_id"], "d1");
    assert_eq!(actors["more"], true);
    let next = cli_json(url, &["actors", "--after", "Desk/d1"]).await;
    assert_eq!(next["actors"][0]["actor_id"], "d2");
    assert_eq!(next["more"], false);

    let d1 = cli_json(url, &["inspect", "Desk", "d1"]).await;
    assert_eq!(d1["state"], json!({ "total": 5 }));
    assert_eq!(d1["reminders"][0]["name"], "ring");
    assert_eq!(d1["effects"][0]["name"], "notify");
    assert_eq!(
        cli(url, &["inspect", "Desk", "nobody"]).await.status.code(),
        Some(3)
    );

    let letters = cli_json(url, &["dead-letters", "--error", "gateway"]).await;
    assert_eq!(letters.as_array().unwrap().len(), 1);
    assert_eq!(letters[0]["operation"], "fail");
    let redriven = cli_json(url, &["dead-letters", "redrive", "--type", "Desk"]).await;
    assert_eq!(redriven["retried"], 1);
    let again = cli_json(url, &["dead-letters", "redrive", "--type", "Desk"]).await;
    assert_eq!(again["retried"], 0);
    assert_eq!(
        cli(url, &["dead-letters", "retry", "999999"])
            .await
            .status
            .code(),
        Some(3)
    );

    assert_eq!(
        cli_json(url, &["effects", "--status", "pending"])
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(cli_json(url, &["reminders"]).await[0]["actor_id"], "d1");

    // Pausing from the command line stops the application's calls until resumed.
    let paused = cli_json(url, &["pause", "Desk", "d1"]).await;
    assert_eq!(paused["changed"], true);
    let desk = runtime.reference::<Desk>("d1");
    assert!(matches!(desk.add(1).await, Err(Error::Paused { .. })));
    let human = cli(url, &["resume", "Desk", "d1"]).await;
    assert_eq!(String::from_utf8_lossy(&human.stdout), "resumed Desk/d1\n");
    assert_eq!(desk.add(1).await.unwrap(), 6);

    let prune = cli_json(url, &["prune"]).await;
    assert_eq!(prune["executed"], false);
    assert_eq!(
        prune["counts"]["finished_messages"], 0,
        "nothing is old yet"
    );
    let doctor = cli_json(url, &["doctor"]).await;
    assert_eq!(doctor["problems"], json!([]));
    assert_eq!(
        (&doctor["checked_actor_types"], &doctor["undecodable"]),
        (&json!([]), &json!([])),
        "the tool knows no actor types, so it decodes no stored arguments"
    );
    // PostgreSQL has migrations 8 (lz4 for states), 9 (state notices for watchers), 10 (the
    // lock in one statement) and 12 (a lock that never creates a row for a grouped call),
    // which SQLite has no use for; both have 11 (the charts), 14 (stalled passes), 15 (the
    // charts' tallies) and 16 (the trace context stored with rows). The tool knows the backend's newest file.
    let backend = if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(doctor["known_migration"], newest_migration(backend));
    // The application's effects wait for a handler; the tool runs none, and lists them
    // without calling them a problem.
    assert_eq!(doctor["unhandled_effects"][0]["name"], "notify");

    let audit = cli_json(url, &["audit", "--limit", "3"]).await;
    assert_eq!(audit[0]["action"], "read_audit");
    assert_eq!(audit[1]["action"], "doctor");
    assert_eq!(audit[1]["outcome"], "done");
    assert_eq!(audit[1]["caller"]["via"], "solid-objects cli");
    assert_eq!(audit[2]["action"], "prune_preview");

    // Human output, bad usage and the environment variable.
    let table = cli(url, &["actors"]).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("TYPE  ID  DEPTH"), "{text}");
    assert_eq!(cli(url, &["no-such-command"]).await.status.code(), Some(2));
    let from_env = tokio::process::Command::new(env!("CARGO_BIN_EXE_solid-objects"))
        .args(["status", "--json"])
        .env("SOLID_OBJECTS_DATABASE_URL", url)
        .output()
        .await
        .unwrap();
    assert_eq!(from_env.status.code(), Some(0));
}

/// The version of the newest migration file in `migrations/{backend}` (`0016_trace_context.sql`
/// is 16).
fn newest_migration(backend: &str) -> i64 {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(backend);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{} is read: {error}", dir.display()))
        .map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let (version, _) = name.split_once('_').expect("a migration's name");
            version.parse::<i64>().expect("a migration's version")
        })
        .max()
        .expect("a migration")
}

#[tokio::test]
async fn the_cli_operates_a_sqlite_database_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actors.db");
    let runtime = application(Runtime::builder().sqlite(&path)).await;
    let url = format!("sqlite://{}", path.display());
    operate(&url, &runtime).await;
    runtime.close().await;
    let missing = cli("sqlite:///nowhere/actors.db", &["status"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no SQLite database"));
    assert!(!std::path::Path::new("/nowhere/actors.db").exists());
}

#[tokio::test]
async fn the_cli_operates_a_postgres_database_end_to_end() {
    let Some(server) = postgres::PgServer::start() else {
        return;
    };
    let url = server.database().await;
    // A database no runtime has used: the commands create nothing in it.
    for args in [&["status"][..], &["pause", "Desk", "d1"]] {
        refused(&url, args, "no solid-objects schema").await;
    }
    let tables: i64 = {
        use sqlx::Connection;
        let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM pg_tables WHERE tablename LIKE 'solid%'")
            .fetch_one(&mut connection)
            .await
            .unwrap()
    };
    assert_eq!(tables, 0);
    let runtime = application(Runtime::builder().postgres(&url, 4)).await;
    operate(&url, &runtime).await;
    runtime.close().await;
}

#[tokio::test]
async fn a_server_that_does_not_answer_fails_every_command_within_the_connect_timeout() {
    let silent = SilentPorts::start().await;
    for (scheme, what, port, url) in silent.urls("operator") {
        // The timeout from the environment, and from the flag.
        let runs = [
            (
                vec!["status"],
                vec![("SOLID_OBJECTS_CONNECT_TIMEOUT", "0.5")],
            ),
            (
                vec!["pause", "Desk", "d1", "--connect-timeout", "0.5"],
                vec![],
            ),
        ];
        for (args, env) in runs {
            let started = Instant::now();
            let output =
                tokio::time::timeout(Duration::from_secs(20), cli_with_env(&url, &args, &env))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("{scheme} on {what}: {args:?} still waits after 20 s")
                    });
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(5),
                "{scheme} on {what}: {stderr}"
            );
            assert!(
                stderr.contains(&format!("127.0.0.1:{port}")),
                "{scheme} on {what}: {stderr}"
            );
            assert!(!stderr.contains("s3cret-pw"), "{stderr}");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{scheme} on {what}: {args:?} took {:?}",
                started.elapsed()
            );
        }
    }
}

/// Runs `args` on `url`, expects exit code 6 (not a database this build operates) and an
/// error that says `why`.
async fn refused(url: &str, args: &[&str], why: &str) {
    let output = cli(url, args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{args:?}: {stderr}");
    assert!(stderr.contains(why), "{args:?}: {stderr}");
}

/// The names of the tables in the SQLite file at `path`, read without writing.
async fn tables(path: &std::path::Path) -> Vec<String> {
    let mut connection = own_connection(path, |options| options.read_only(true)).await;
    let names = sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
        .fetch_all(&mut connection)
        .await
        .unwrap();
    sqlx::Connection::close(connection).await.unwrap();
    names
}

/// Runs `sql` on the SQLite file at `path`.
async fn execute_sql(path: &std::path::Path, sql: &str) {
    let mut connection = own_connection(path, |options| options.create_if_missing(true)).await;
    sqlx::raw_sql(sql).execute(&mut connection).await.unwrap();
    sqlx::Connection::close(connection).await.unwrap();
}

/// A connection of the test's own to the SQLite file at `path`, with the options `with`
/// sets.
async fn own_connection(
    path: &std::path::Path,
    with: impl FnOnce(SqliteConnectOptions) -> SqliteConnectOptions,
) -> sqlx::SqliteConnection {
    let options = with(SqliteConnectOptions::new().filename(path));
    sqlx::Connection::connect_with(&options).await.unwrap()
}

/// Whether the SQLite file at `path` has a `-wal` or `-shm` file beside it.
fn has_companions(path: &std::path::Path) -> bool {
    ["-wal", "-shm"].iter().any(|suffix| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::path::Path::new(&name).exists()
    })
}

#[tokio::test]
async fn the_cli_writes_nothing_to_a_database_that_is_not_this_builds() {
    let dir = tempfile::tempdir().unwrap();
    let commands: [&[&str]; 5] = [
        &["status"],
        &["actors"],
        &["pause", "Desk", "d1"],
        &["prune", "--execute"],
        &["doctor"],
    ];

    // A file of no bytes, which SQLite would take for an empty database.
    let empty = dir.path().join("empty.db");
    std::fs::File::create(&empty).unwrap();
    let empty_url = format!("sqlite://{}", empty.display());
    for args in commands {
        refused(&empty_url, args, "empty file").await;
    }
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert!(!has_companions(&empty));

    // Another application's database, with no solid-objects schema.
    let theirs = dir.path().join("theirs.db");
    execute_sql(
        &theirs,
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
    )
    .await;
    let before = std::fs::read(&theirs).unwrap();
    let theirs_url = format!("sqlite://{}", theirs.display());
    for args in commands {
        refused(&theirs_url, args, "no solid-objects schema").await;
    }
    assert_eq!(
        std::fs::read(&theirs).unwrap(),
        before,
        "nothing was written"
    );
    assert_eq!(tables(&theirs).await, ["customers"]);

    // A database a newer build migrated.
    let newer = dir.path().join("newer.db");
    let newer_url = application_file(&newer).await;
    execute_sql(
        &newer,
        "INSERT INTO solid_schema_migrations (version, description, applied_at)
         VALUES (999, 'from a newer build', datetime('now'))",
    )
    .await;
    for args in commands {
        refused(&newer_url, args, "newer than this build").await;
    }
    let runtime = Runtime::builder()
        .sqlite(&newer)
        .actor::<Desk>()
        .policy(AllowAll)
        .start()
        .await
        .unwrap();
    let audit = runtime.admin().audit_log(10).await.unwrap();
    assert_eq!(audit.len(), 1, "only this read is audited: {audit:?}");
    let d1 = runtime
        .admin()
        .inspect("Desk", "d1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d1.summary.paused_at, None, "the pause was refused");
    runtime.close().await;
    refused(&newer_url, &["migrate"], "newer than this build").await;

    // A database as the build before migration 7 (administration) left it: only `migrate`
    // upgrades it.
    let older = dir.path().join("older.db");
    let older_url = application_file(&older).await;
    execute_sql(
        &older,
        "DROP INDEX solid_messages_dead;
         DROP TABLE solid_admin_events;
         ALTER TABLE solid_instances DROP COLUMN paused_at;
         DELETE FROM solid_schema_migrations WHERE version = 7",
    )
    .await;
    for args in commands {
        refused(&older_url, args, "older than this build").await;
    }
    assert_eq!(cli_json(&older_url, &["migrate"]).await["migrated"], true);
    assert_eq!(
        cli_json(&older_url, &["pause", "Desk", "d1"]).await["changed"],
        true
    );

    // `migrate` says it creates the schema, and does; the other commands then work.
    for url in [&theirs_url, &empty_url] {
        let migrated = cli_json(url, &["migrate"]).await;
        assert_eq!(migrated["migrated"], true);
        let again = cli_json(url, &["migrate"]).await;
        assert_eq!(again["migrated"], false);
        assert_eq!(cli_json(url, &["status"]).await["actor_types"], json!([]));
    }
    assert!(tables(&theirs).await.contains(&"customers".to_owned()));
}

#[tokio::test]
async fn a_dead_effects_hostile_arguments_are_listed_escaped_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actors.db");
    let hostile = format!("\u{1b}[2J\u{1b}]0;pwned\u{7}\n{}", "x".repeat(10_000));
    let runtime = with_a_dead_notification(&path, "d3", hostile, "mail server down").await;
    runtime.close().await;
    let url = format!("sqlite://{}", path.display());

    for (args, text) in dead_effect_listings(&url, "d3").await {
        assert!(
            !text.contains('\u{1b}'),
            "{args:?}: no terminal escape reaches the screen"
        );
        assert!(!text.contains('\u{7}'), "{args:?}");
        assert!(
            text.contains(r#"{"desk":"\u001b[2J\u001b]0;pwned\u0007\nxxx"#),
            "{text}"
        );
        assert!(text.contains("xx…"), "{args:?}: the cell is cut: {text}");
        assert!(!text.contains(&"x".repeat(100)), "{args:?}: {text}");
    }
    let listed = cli_json(&url, &["effects", "--status", "dead"]).await;
    let shown = listed[0]["arguments"].as_str().expect("cut to a string");
    assert!(shown.starts_with(r#"{"desk":"\u001b[2J"#), "{shown:.40}");
    assert_eq!(
        shown.chars().count(),
        solid_objects::admin::SHOWN_ARGUMENTS_CHARS + 1
    );
    assert!(shown.ends_with('…'));

    let unknown = cli(&url, &["effects", "--status", "Dead"]).await;
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "an unknown status is refused"
    );
}

/// A failure's text is as hostile as arguments: a handler's or an effect's error (an HTTP
/// body a remote server chose, say) is listed in the same tables, beside the escaped
/// ARGUMENTS column, and reaches the terminal as it is.
#[tokio::test]
async fn a_dead_letters_and_a_dead_effects_hostile_errors_are_listed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actors.db");
    let hostile = "\u{1b}[2J\u{1b}]0;pwned\u{7}\nforged\trow";
    let runtime = with_a_dead_notification(&path, "d4", "d4".to_owned(), hostile).await;
    let desk = runtime.reference::<Desk>("d4");
    desk.fail(hostile.to_owned()).await.unwrap_err();
    runtime.close().await;
    let url = format!("sqlite://{}", path.display());

    let mut listings = dead_effect_listings(&url, "d4").await;
    listings.push((vec!["dead-letters"], printed(&url, &["dead-letters"]).await));
    for (args, text) in listings {
        assert!(
            text.contains("pwned"),
            "{args:?}: the error is listed: {text}"
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{args:?}: a terminal escape in an error reaches the screen: {text:?}"
        );
        assert!(
            !text.contains("\nforged"),
            "{args:?}: an error's newline forges a row of the table: {text:?}"
        );
    }
}

/// Arguments short enough to be shown as their JSON go through `serde_json`, which escapes
/// only U+0000 to U+001F: DEL and the C1 controls (U+009B is CSI, what `ESC [` starts, and
/// xterm acts on it in UTF-8) reach the terminal as they are, though the column promises
/// every control character escaped.
#[tokio::test]
async fn a_dead_effects_arguments_with_c1_controls_are_listed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actors.db");
    let controls = "\u{9b}2J\u{9b}31mred\u{7f}\u{85}".to_owned();
    let runtime = with_a_dead_notification(&path, "d5", controls, "mail server down").await;
    runtime.close().await;
    let url = format!("sqlite://{}", path.display());

    for (args, text) in dead_effect_listings(&url, "d5").await {
        assert!(
            text.contains("31mred"),
            "{args:?}: the arguments are listed: {text}"
        );
        let raw: Vec<char> = text
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(
            raw.is_empty(),
            "{args:?}: control characters reach the terminal unescaped: {raw:?} in {text:?}"
        );
    }
}

#[tokio::test]
async fn output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let url = application_file(&dir.path().join("actors.db")).await;
    for args in [
        &["dead-letters", "--json"][..],
        &["status"],
        &["inspect", "Desk", "d1"],
    ] {
        // As `| head -1` leaves it once it has its line: nobody reads the pipe.
        let (code, stderr) = into_a_closed_pipe(&url, args).await;
        assert_eq!(stderr, "", "{args:?} ends quietly");
        assert_eq!(code, Some(0), "{args:?}: the command's own code");
    }
}

#[tokio::test]
async fn no_password_is_ever_printed() {
    let secret_url = "postgres://operator:s3cret-pw@db.example/app";
    let help = tokio::process::Command::new(env!("CARGO_BIN_EXE_solid-objects"))
        .arg("--help")
        .env("SOLID_OBJECTS_DATABASE_URL", secret_url)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert_eq!(help.status.code(), Some(0));
    assert!(text.contains("SOLID_OBJECTS_DATABASE_URL"), "{text}");
    assert!(!text.contains("s3cret-pw"), "{text}");
    // The exit codes are documented where the operator looks.
    for code in [
        "5 the database server",
        "6 not a database this build operates",
    ] {
        assert!(text.contains(code), "{text}");
    }

    let silent = SilentPorts::start().await;
    let port = silent.closed;
    let mistyped = [
        format!("postgress://operator:s3cret-pw@127.0.0.1:{port}/app"),
        "postgres:/operator:s3cret-pw@127.0.0.1/app".to_owned(),
        "operator:s3cret-pw@127.0.0.1/app".to_owned(),
        "postgres://operator:s3cret-pw@127.0.0.1:notaport/app".to_owned(),
        "mysql://operator:s3cret-pw@[::1/app".to_owned(),
        format!("postgres://operator:s3cret-pw@127.0.0.1:{port}/app?sslmode=sometimes"),
        format!("postgres://operator:s3cret-pw@127.0.0.1:{port}/app"),
        format!("mysql://operator:s3cret-pw@127.0.0.1:{port}/app"),
    ];
    for url in &mistyped {
        let output = cli_with_env(
            url,
            &["status"],
            &[("SOLID_OBJECTS_CONNECT_TIMEOUT", "0.2")],
        )
        .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{url}");
        assert!(stderr.starts_with("error: "), "{url}: {stderr}");
        assert!(!stderr.contains("s3cret-pw"), "{url}: {stderr}");
    }
}

/// A writing end whose reading end is closed, as `| head -1` leaves a pipe once it has its
/// line: a write into it fails with a broken pipe. (A socket pair: `std::io::pipe` is newer
/// than the crates' minimum Rust.)
fn closed_pipe() -> std::process::Stdio {
    let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(reader);
    std::process::Stdio::from(std::os::fd::OwnedFd::from(writer))
}

/// Runs `args` on `url` with standard output into a pipe nobody reads (as `| head -1`
/// leaves it), and returns the exit code and what it wrote to standard error.
async fn into_a_closed_pipe(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let writer = closed_pipe();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_solid-objects"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("SOLID_OBJECTS_DATABASE_URL")
        .env_remove("SOLID_OBJECTS_CONNECT_TIMEOUT")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn every_command_that_prints_ends_quietly_into_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let url = application_file(&dir.path().join("actors.db")).await;
    let commands: [&[&str]; 12] = [
        &["status"],
        &["actors"],
        &["inspect", "Desk", "d1"],
        &["dead-letters"],
        &["effects"],
        &["reminders"],
        &["prune"],
        &["doctor"],
        &["doctor", "--json"],
        &["audit"],
        &["pause", "Desk", "d1"],
        &["migrate"],
    ];
    for args in commands {
        let expected = cli(&url, args).await.status.code();
        let (code, stderr) = into_a_closed_pipe(&url, args).await;
        assert_eq!(stderr, "", "{args:?} ends quietly");
        assert_eq!(code, expected, "{args:?}: the command's own code");
    }
}

#[tokio::test]
async fn a_huge_connect_timeout_is_a_long_wait_not_a_crash() {
    // A port that takes the connection and closes it at once: the connection fails at
    // once, whatever the timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let closer = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    for scheme in ["postgres", "mysql"] {
        let url = format!("{scheme}://operator:s3cret-pw@127.0.0.1:{port}/app");
        for timeout in ["1e19", "18446744073"] {
            let output = tokio::time::timeout(
                Duration::from_secs(20),
                cli(&url, &["status", "--connect-timeout", timeout]),
            )
            .await
            .expect("the command ends");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !stderr.contains("panicked"),
                "{scheme}, {timeout} s: {stderr}"
            );
            assert_eq!(
                output.status.code(),
                Some(5),
                "{scheme}, {timeout} s: {stderr}"
            );
        }
        // The builder takes any duration too.
        let started = Runtime::builder()
            .policy(AllowAll)
            .postgres(url.replace("mysql://", "postgres://"), 1)
            .connect_timeout(Duration::MAX)
            .apply_migrations(false)
            .start()
            .await;
        assert!(
            matches!(started, Err(Error::Unreachable { .. })),
            "{:?}",
            started.err()
        );
    }
    closer.abort();
}

/// A TCP proxy to `target` that forwards the first connection it takes and holds every
/// later one without a word: a server that answered once and then stopped answering (a
/// network partition, a server that hangs).
async fn answers_once(target: u16) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut first = true;
        while let Ok((mut inbound, _)) = listener.accept().await {
            if std::mem::take(&mut first) {
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(("127.0.0.1", target))
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            } else {
                held.push(inbound);
            }
        }
    });
    (port, task)
}

#[tokio::test]
async fn a_server_that_stops_answering_after_the_first_connection_fails_within_the_connect_timeout()
{
    let Some(server) = postgres::PgServer::start() else {
        return;
    };
    let url = server.database().await;
    application(Runtime::builder().postgres(&url, 2))
        .await
        .close()
        .await;
    let real_port: u16 = url
        .rsplit_once(':')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The command line.
    let (port, proxy) = answers_once(real_port).await;
    let through = url.replace(&format!(":{real_port}/"), &format!(":{port}/"));
    let started = Instant::now();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        cli(&through, &["status", "--connect-timeout", "1"]),
    )
    .await
    .unwrap_or_else(|_| panic!("status still waits after 30 s with a connect timeout of 1 s"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    proxy.abort();
    // And the builder's start().
    let (port, proxy) = answers_once(real_port).await;
    let through = url.replace(&format!(":{real_port}/"), &format!(":{port}/"));
    let started = tokio::time::timeout(
        Duration::from_secs(30),
        Runtime::builder()
            .policy(AllowAll)
            .postgres(&through, 2)
            .connect_timeout(Duration::from_secs(1))
            .start(),
    )
    .await
    .unwrap_or_else(|_| panic!("start() still waits after 30 s with a connect timeout of 1 s"));
    assert!(
        matches!(started, Err(Error::Unreachable { .. })),
        "{:?}",
        started.err()
    );
    proxy.abort();
}

#[tokio::test]
async fn a_database_url_in_quotes_or_after_a_space_is_not_printed() {
    // As `docker run --env-file` passes `SOLID_OBJECTS_DATABASE_URL="postgres://..."`: the
    // quotes are part of the value. And a value pasted after a space.
    for url in [
        "\"postgres://operator:s3cret-pw@db.example/app\"",
        "'mysql://operator:s3cret-pw@db.example/app'",
        " postgres://operator:s3cret-pw@db.example/app",
        "<postgres://operator:s3cret-pw@db.example/app>",
    ] {
        for args in [&["status"][..], &["pause", "Desk", "d1"]] {
            let output = cli(url, args).await;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_ne!(output.status.code(), Some(0), "{url}");
            assert!(!stderr.contains("s3cret-pw"), "{url:?} {args:?}: {stderr}");
        }
    }
}
