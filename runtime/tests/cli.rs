//! The `solid-objects` binary end to end, as an operator runs it: against a real SQLite
//! file and a real PostgreSQL server that an application's runtime wrote, with `--json`
//! output parsed and exit codes checked.
#![cfg(feature = "cli")]

#[path = "../../tests/support/postgres.rs"]
#[allow(unreachable_pub)]
mod postgres;

use std::process::Output;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, Error};

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
    tokio::process::Command::new(env!("CARGO_BIN_EXE_solid-objects"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("SOLID_OBJECTS_DATABASE_URL")
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
    // PostgreSQL has migrations 8 (lz4 for states) and 9 (state notices for watchers),
    // which SQLite has no use for.
    let known = if url.starts_with("postgres") { 9 } else { 7 };
    assert_eq!(doctor["known_migration"], known);

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
    let runtime = application(Runtime::builder().postgres(&url, 4)).await;
    operate(&url, &runtime).await;
    runtime.close().await;
}
