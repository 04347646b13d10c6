//! State versions and migrations: states stored by older builds are read through the actor's
//! `#[migrate]` chain on turns, queries and snapshots; the next committed turn stores the new
//! version; a state from a newer build, or one no migration reads, is left alone and its
//! messages wait uncounted; a migration that fails or panics is a counted attempt.

use crate::support;

use serde::Deserialize;
use solid_objects::prelude::*;
use solid_objects::MessageStatus;
use support::fixtures::started;
use support::state_json::owner_renamed_holder;
use support::{execute, Backend, Harness};

/// Version 1 stored `{"owner": .., "balance": euros}`; version 2 renamed `owner` to
/// `holder`; version 3 stores cents and a history.
#[actor(version = 3, max_attempts = 2)]
#[derive(Debug, Default, PartialEq)]
struct Wallet {
    holder: String,
    cents: u64,
    history: Vec<String>,
}

#[derive(Deserialize)]
struct WalletV2 {
    holder: String,
    balance: u64,
}

#[actor]
impl Wallet {
    /// Untyped: renames a field in the stored JSON.
    #[migrate(from = 1)]
    fn rename_owner(old: serde_json::Value) -> Result<serde_json::Value, MigrationError> {
        owner_renamed_holder(old, "wallet")
    }

    /// Typed: reads the old struct, returns the current one.
    #[migrate(from = 2)]
    fn to_cents(old: WalletV2) -> Result<Wallet, MigrationError> {
        assert_ne!(old.holder, "panics", "a migration that panics");
        let cents = old
            .balance
            .checked_mul(100)
            .ok_or("the balance overflows in cents")?;
        Ok(Wallet {
            holder: old.holder,
            cents,
            history: vec!["migrated".to_owned()],
        })
    }

    #[command]
    fn deposit(&mut self, cents: u64) -> u64 {
        self.cents += cents;
        self.history.push(format!("deposit {cents}"));
        self.cents
    }

    #[query]
    fn balance(&self) -> (String, u64) {
        (self.holder.clone(), self.cents)
    }
}

/// Version 3 whose chain starts at 2: a state stored at version 1 has no way forward here.
#[actor(version = 3)]
#[derive(Debug, Default)]
struct Tally {
    count: u64,
}

#[actor]
impl Tally {
    #[migrate(from = 2)]
    fn from_v2(old: serde_json::Value) -> serde_json::Value {
        old
    }

    #[command]
    fn add(&mut self) -> u64 {
        self.count += 1;
        self.count
    }
}

async fn store(harness: &Harness, actor_type: &str, actor_id: &str, version: i64, state: &str) {
    execute(
        harness,
        &format!(
            "INSERT INTO solid_instances (actor_type, actor_id, state, state_version, updated_at) \
             VALUES ('{actor_type}', '{actor_id}', '{state}', {version}, 0)"
        ),
    )
    .await;
}

/// The stored state and its version.
async fn stored(harness: &Harness, actor_id: &str) -> (String, i64) {
    let pool = support::connect(harness).await;
    // sqlx's `Any` driver reads MySQL's LONGTEXT as a blob; a VARCHAR reads as text.
    let state = match harness.backend() {
        Backend::MariaDb => "CAST(state AS CHAR(4000))",
        Backend::Sqlite | Backend::Postgres => "state",
    };
    let sql = harness.sql(&format!(
        "SELECT {state}, state_version FROM solid_instances WHERE actor_id = ?"
    ));
    let row = sqlx::query_as(&sql)
        .bind(actor_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    row
}

#[tokio::test]
async fn states_stored_at_v1_and_v2_read_through_a_v3_build() {
    let (harness, runtime) = started().await;
    store(
        &harness,
        "Wallet",
        "one",
        1,
        r#"{"owner": "ann", "balance": 12}"#,
    )
    .await;
    store(
        &harness,
        "Wallet",
        "two",
        2,
        r#"{"holder": "bob", "balance": 7}"#,
    )
    .await;
    let one = runtime.reference::<Wallet>("one");
    let two = runtime.reference::<Wallet>("two");

    assert_eq!(
        one.snapshot().await.unwrap(),
        Wallet {
            holder: "ann".to_owned(),
            cents: 1200,
            history: vec!["migrated".to_owned()],
        }
    );
    assert_eq!(two.balance().await.unwrap(), ("bob".to_owned(), 700));
    // Reading migrates in memory only.
    assert_eq!(stored(&harness, "one").await.1, 1);
    assert_eq!(stored(&harness, "two").await.1, 2);

    assert_eq!(one.deposit(5).await.unwrap(), 1205);
    let queued = two.enqueue().deposit(1).await.unwrap();
    runtime.testing().drain().await.unwrap();
    assert_eq!(queued.result().await.unwrap(), Some(701));

    for (id, holder, cents) in [("one", "ann", 1205), ("two", "bob", 701)] {
        let (state, version) = stored(&harness, id).await;
        assert_eq!(version, 3, "the committed turn stores the current version");
        let state: serde_json::Value = serde_json::from_str(&state).unwrap();
        assert_eq!(state["holder"], holder);
        assert_eq!(state["cents"], cents);
    }
    // Read back at version 3, the migrations do not run again.
    assert_eq!(
        one.snapshot().await.unwrap().history,
        ["migrated", "deposit 5"]
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_new_actor_stores_the_current_version() {
    let (harness, runtime) = started().await;
    runtime.reference::<Wallet>("new").deposit(3).await.unwrap();
    assert_eq!(stored(&harness, "new").await.1, 3);
    runtime.close().await;
}

#[tokio::test]
async fn a_state_from_a_newer_build_is_left_alone_and_its_messages_wait_uncounted() {
    let (harness, runtime) = started().await;
    let future_state = r#"{"holder": "cy", "cents": 1, "history": [], "loyalty": 9}"#;
    store(&harness, "Wallet", "w", 4, future_state).await;
    let wallet = runtime.reference::<Wallet>("w");

    let refused = wallet.deposit(5).await;
    assert!(
        matches!(
            refused,
            Err(Error::StateFromNewerBuild {
                stored: 4,
                current: 3,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(matches!(
        wallet.snapshot().await,
        Err(Error::StateFromNewerBuild { .. })
    ));
    assert!(matches!(
        wallet.balance().await,
        Err(Error::StateFromNewerBuild { .. })
    ));

    let queued = wallet.enqueue().deposit(5).await.unwrap();
    assert!(runtime.testing().drain().await.is_err());
    harness.advance_minutes(60);
    let _ = runtime.testing().drain().await;
    match queued.status().await.unwrap() {
        MessageStatus::Ready {
            attempts: 0,
            last_error: Some(why),
            ..
        } => assert!(why.contains("newer than this build"), "{why}"),
        other => panic!("the message should wait uncounted, not {other:?}"),
    }
    assert_eq!(
        stored(&harness, "w").await,
        (future_state.to_owned(), 4),
        "nothing was changed"
    );

    // Once the state is one this build reads (the newer build rolled back, say), the
    // message runs.
    execute(
        &harness,
        r#"UPDATE solid_instances SET state = '{"holder": "cy", "cents": 1}', state_version = 3"#,
    )
    .await;
    runtime.testing().drain().await.unwrap();
    assert_eq!(queued.result().await.unwrap(), Some(6));
    runtime.close().await;
}

#[tokio::test]
async fn a_call_queued_behind_a_waiting_message_says_it_is_queued_and_runs_once() {
    let (harness, runtime) = started().await;
    let future_state = r#"{"holder": "cy", "cents": 1, "history": [], "loyalty": 9}"#;
    store(&harness, "Wallet", "w", 4, future_state).await;
    let wallet = runtime.reference::<Wallet>("w");
    let waiting = wallet.enqueue().deposit(5).await.unwrap();

    // The call's message is committed behind the waiting one before the state is read.
    let refused = wallet.deposit(7).await;
    let Err(
        error @ Error::Queued {
            message_id,
            request_id,
            reason,
            ..
        },
    ) = &refused
    else {
        panic!("a call whose message is committed must say it is queued, not {refused:?}");
    };
    assert!(
        matches!(
            **reason,
            Error::StateFromNewerBuild {
                stored: 4,
                current: 3,
                ..
            }
        ),
        "{reason:?}"
    );
    let text = error.to_string();
    assert!(!text.contains("nothing was changed"), "{text}");
    assert!(text.contains(&format!("message {message_id}")), "{text}");
    assert_eq!(error.queued_request_id(), Some(request_id.as_str()));
    let queued = support::queued_message::<u64>(&runtime, request_id).await;
    assert_eq!(queued.id(), *message_id);
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Ready { attempts: 0, .. }
    ));

    // A newer build (here: the state rolled back to one this build reads) runs both, each
    // once: the caller that heard "queued" waits instead of calling again.
    execute(
        &harness,
        r#"UPDATE solid_instances SET state = '{"holder": "cy", "cents": 1}', state_version = 3"#,
    )
    .await;
    runtime.testing().drain().await.unwrap();
    assert_eq!(waiting.result().await.unwrap(), Some(6));
    assert_eq!(queued.result().await.unwrap(), Some(13));
    assert_eq!(wallet.balance().await.unwrap(), ("cy".to_owned(), 13));
    runtime.close().await;
}

#[tokio::test]
async fn a_call_queued_behind_a_message_no_migration_reads_says_it_is_queued() {
    let (harness, runtime) = started().await;
    store(&harness, "Tally", "t", 1, r#"{"count": 4}"#).await;
    let tally = runtime.reference::<Tally>("t");
    tally.enqueue().add().await.unwrap();

    let refused = tally.add().await;
    let Err(Error::Queued {
        message_id, reason, ..
    }) = &refused
    else {
        panic!("a call whose message is committed must say it is queued, not {refused:?}");
    };
    assert!(
        matches!(**reason, Error::NoMigration { from: 1, .. }),
        "{reason:?}"
    );
    assert_eq!(*message_id, 2);
    assert_eq!(
        stored(&harness, "t").await,
        (r#"{"count": 4}"#.to_owned(), 1)
    );

    // With a state at version 2, the one migration there is reads it, and each queued
    // message runs once.
    execute(&harness, "UPDATE solid_instances SET state_version = 2").await;
    runtime.testing().drain().await.unwrap();
    assert_eq!(stored(&harness, "t").await.0, r#"{"count":6}"#);
    runtime.close().await;
}

#[tokio::test]
async fn a_state_no_migration_reads_waits_uncounted() {
    let (harness, runtime) = started().await;
    store(&harness, "Tally", "t", 1, r#"{"count": 4}"#).await;
    let tally = runtime.reference::<Tally>("t");

    let refused = tally.add().await;
    assert!(
        matches!(
            refused,
            Err(Error::NoMigration {
                stored: 1,
                from: 1,
                current: 3,
                ..
            })
        ),
        "{refused:?}"
    );
    let queued = tally.enqueue().add().await.unwrap();
    let _ = runtime.testing().drain().await;
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Ready { attempts: 0, .. }
    ));
    assert_eq!(
        stored(&harness, "t").await,
        (r#"{"count": 4}"#.to_owned(), 1)
    );

    // A state at version 2 goes through the one migration there is.
    store(&harness, "Tally", "u", 2, r#"{"count": 4}"#).await;
    assert_eq!(runtime.reference::<Tally>("u").add().await.unwrap(), 5);
    runtime.close().await;
}

#[tokio::test]
async fn a_failing_migration_is_a_counted_attempt_then_a_dead_letter() {
    let (harness, runtime) = started().await;
    let overflowing = format!(r#"{{"holder": "dee", "balance": {}}}"#, u64::MAX);
    store(&harness, "Wallet", "w", 2, &overflowing).await;
    let wallet = runtime.reference::<Wallet>("w");

    let refused = wallet.deposit(1).await;
    match refused {
        Err(Error::MigrationFailed {
            from: 2, message, ..
        }) => {
            assert_eq!(message, "the balance overflows in cents");
        }
        other => panic!("expected the migration's error, got {other:?}"),
    }

    let queued = wallet.enqueue().deposit(1).await.unwrap();
    let _ = runtime.testing().drain().await;
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Ready { attempts: 1, .. }
    ));
    harness.advance_minutes(1);
    let _ = runtime.testing().drain().await;
    match queued.status().await.unwrap() {
        MessageStatus::Dead { attempts: 2, error } => {
            assert!(error.contains("overflows in cents"), "{error}");
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert_eq!(
        stored(&harness, "w").await,
        (overflowing, 2),
        "nothing stored"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_panicking_migration_is_a_counted_attempt_and_the_worker_lives() {
    let (harness, runtime) = started().await;
    store(
        &harness,
        "Wallet",
        "p",
        2,
        r#"{"holder": "panics", "balance": 1}"#,
    )
    .await;
    let wallet = runtime.reference::<Wallet>("p");

    match wallet.snapshot().await {
        Err(Error::MigrationFailed { message, .. }) => {
            assert!(message.contains("a migration that panics"), "{message}");
        }
        other => panic!("expected the migration's panic, got {other:?}"),
    }
    let queued = wallet.enqueue().deposit(1).await.unwrap();
    let _ = runtime.testing().drain().await;
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Ready { attempts: 1, .. }
    ));
    assert_eq!(
        runtime
            .reference::<Wallet>("other")
            .deposit(2)
            .await
            .unwrap(),
        2
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_v1_state_that_is_not_what_the_migration_expects_fails_counted() {
    let (harness, runtime) = started().await;
    store(&harness, "Wallet", "odd", 1, r#"["not", "an", "object"]"#).await;
    let wallet = runtime.reference::<Wallet>("odd");
    match wallet.deposit(1).await {
        Err(Error::MigrationFailed {
            from: 1, message, ..
        }) => {
            assert_eq!(message, "a version 1 wallet is an object");
        }
        other => panic!("expected the migration's error, got {other:?}"),
    }
    store(&harness, "Wallet", "short", 2, r#"{"holder": "eve"}"#).await;
    match runtime.reference::<Wallet>("short").deposit(1).await {
        Err(Error::MigrationFailed {
            from: 2, message, ..
        }) => {
            assert!(message.contains("missing field `balance`"), "{message}");
        }
        other => panic!("expected the migration's error, got {other:?}"),
    }
    runtime.close().await;
}

/// The first build of a hold: its reminder carries the expiry as Unix seconds.
#[actor(name = "Hold")]
#[derive(Default)]
struct HoldV1 {
    expired: bool,
}

#[actor]
impl HoldV1 {
    #[command]
    fn place(&mut self, turn: &mut Turn<Self>, hold_id: String) {
        let at = turn.now() + TimeDelta::minutes(15);
        turn.schedule(at, &hold_id)
            .expire(hold_id.clone(), at.timestamp());
    }

    #[reminder]
    fn expire(&mut self, hold_id: String, expires_at: i64) {
        let _ = (hold_id, expires_at);
        self.expired = true;
    }
}

/// The second build changed the reminder's argument to a `DateTime`: the reminders the
/// first build stored no longer decode.
#[actor(name = "Hold")]
#[derive(Default)]
struct HoldV2 {
    expired: bool,
}

#[actor]
impl HoldV2 {
    #[command]
    fn place(&mut self, turn: &mut Turn<Self>, hold_id: String) {
        let at = turn.now() + TimeDelta::minutes(15);
        turn.schedule(at, &hold_id).expire(hold_id.clone(), at);
    }

    #[reminder]
    fn expire(&mut self, hold_id: String, expires_at: DateTime<Utc>) {
        let _ = (hold_id, expires_at);
        self.expired = true;
    }
}

/// The change done as the state-versions guide says: the stored operation stays with its
/// old arguments, and the new form is a new operation.
#[actor(name = "Hold")]
#[derive(Default)]
struct HoldV3 {
    expired: bool,
}

#[actor]
impl HoldV3 {
    #[command]
    fn place(&mut self, turn: &mut Turn<Self>, hold_id: String) {
        let at = turn.now() + TimeDelta::minutes(15);
        turn.schedule(at, &hold_id).expire_at(hold_id.clone(), at);
    }

    /// Kept for the reminders earlier builds stored.
    #[reminder]
    fn expire(&mut self, hold_id: String, expires_at: i64) {
        let at = DateTime::from_timestamp(expires_at, 0).unwrap_or_default();
        self.expire_at(hold_id, at);
    }

    #[reminder]
    fn expire_at(&mut self, hold_id: String, expires_at: DateTime<Utc>) {
        let _ = (hold_id, expires_at);
        self.expired = true;
    }
}

/// A runtime of one build of the hold on the harness's database.
async fn hold_build<A: solid_objects::Actor>(harness: &Harness) -> Runtime {
    harness.builder().await.actor::<A>().start().await.unwrap()
}

#[tokio::test]
async fn reminders_an_older_build_stored_that_a_new_build_cannot_decode_are_listed_before_it_runs()
{
    let harness = Harness::new();
    let first = hold_build::<HoldV1>(&harness).await;
    let hold_v1 = first.reference::<HoldV1>("show-1");
    hold_v1.place("h-1").await.unwrap();
    first.close().await;

    let second = hold_build::<HoldV2>(&harness).await;
    let undecodable = second.admin().undecodable(0).await.unwrap();
    assert_eq!(undecodable.len(), 1, "{undecodable:?}");
    let row = &undecodable[0];
    assert_eq!(row.kind, solid_objects::admin::StoredKind::Reminder);
    assert_eq!(
        (
            row.actor_type.as_str(),
            row.actor_id.as_str(),
            row.operation.as_str()
        ),
        ("Hold", "show-1", "expire")
    );
    assert!(row.error.contains("does not deserialise"), "{}", row.error);
    let doctor = second.admin().doctor().await.unwrap();
    assert_eq!(doctor.checked_actor_types, ["Hold"]);
    assert_eq!(doctor.undecodable, undecodable);
    assert!(
        doctor
            .problems
            .iter()
            .any(|problem| problem.contains("does not decode with this build")),
        "{:?}",
        doctor.problems
    );

    // Deployed anyway: the reminder fires and its message is a dead letter at once, and
    // the testing API says so rather than passing.
    harness.advance_minutes(16);
    let ran = second.testing().run_due_reminders().await.unwrap();
    assert_eq!((ran.occurrences_fired, ran.turns, ran.completed), (1, 1, 0));
    assert!(!ran.is_clean());
    assert!(ran.failed.is_empty(), "{:?}", ran.failed);
    assert_eq!(ran.dead.len(), 1, "{ran:?}");
    let dead = &ran.dead[0];
    assert_eq!(
        (
            dead.actor_id.as_str(),
            dead.operation.as_str(),
            dead.attempts
        ),
        ("show-1", "expire", 1)
    );
    assert!(
        dead.error.contains("does not deserialise"),
        "{}",
        dead.error
    );
    assert!(
        !second
            .reference::<HoldV2>("show-1")
            .snapshot()
            .await
            .unwrap()
            .expired
    );
    second.close().await;
}

#[tokio::test]
async fn a_build_that_keeps_the_old_reminder_decodes_what_earlier_builds_stored() {
    let harness = Harness::new();
    let first = hold_build::<HoldV1>(&harness).await;
    let hold_v1 = first.reference::<HoldV1>("show-1");
    hold_v1.place("h-1").await.unwrap();
    first.close().await;

    let third = hold_build::<HoldV3>(&harness).await;
    assert_eq!(third.admin().undecodable(0).await.unwrap(), []);
    assert_eq!(third.admin().doctor().await.unwrap().undecodable, []);
    harness.advance_minutes(16);
    let ran = third.testing().run_due_reminders().await.unwrap();
    assert!(ran.is_clean(), "{ran:?}");
    assert_eq!((ran.occurrences_fired, ran.completed), (1, 1));
    assert!(
        third
            .reference::<HoldV3>("show-1")
            .snapshot()
            .await
            .unwrap()
            .expired
    );
    third.close().await;
}
