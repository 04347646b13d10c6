//! Adversarial review of issue 9 (actors that live for years): destroy and incarnations,
//! state versions, recurring reminders and their inspection, typed rejections, effect
//! outcomes back to the actor, sends with options.
//!
//! Every test here failed against the change under review (the retry_effect one now pins
//! the documented behaviour instead); each says what it proves.
//! Time moves only through the harness's `ManualClock`.

mod support;

use std::time::Duration;

use axum_core::response::IntoResponse;
use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::EffectFailure;
use support::postgres::PgServer;
use support::{count, execute, Harness};

// ---------------------------------------------------------------------------------------
// Effect outcomes back to the actor.
// ---------------------------------------------------------------------------------------

/// Fetches a document whose JSON nests as deep as serde_json reads back (127 levels).
#[derive(Serialize, Deserialize)]
struct FetchTree {
    depth: usize,
}

impl Effect for FetchTree {
    const NAME: &'static str = "review9_fetch_tree";
    type Output = Value;
}

#[derive(Serialize, Deserialize)]
struct Charge {
    cents: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
}

impl Effect for Charge {
    const NAME: &'static str = "review9_charge";
    type Output = Receipt;
}

#[actor]
#[derive(Debug, Default)]
struct Till {
    log: Vec<String>,
}

#[actor]
impl Till {
    #[command]
    fn fetch(&mut self, turn: &mut Turn<Self>, depth: usize) {
        turn.emit(FetchTree { depth })
            .on_success()
            .fetched()
            .on_failure()
            .fetch_failed();
    }

    #[command]
    fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
        turn.emit(Charge { cents })
            .on_success()
            .charged()
            .on_failure()
            .charge_failed();
    }

    #[reply]
    fn fetched(&mut self, tree: Value) {
        self.log.push(format!("fetched depth {}", depth_of(&tree)));
    }

    #[reply]
    fn charged(&mut self, receipt: Receipt) {
        self.log.push(format!("charged {}", receipt.charge_id));
    }

    #[reply]
    fn fetch_failed(&mut self, failure: EffectFailure<FetchTree>) {
        self.log
            .push(format!("failed {}: {}", failure.name, failure.error));
    }

    #[reply]
    fn charge_failed(&mut self, failure: EffectFailure<Charge>) {
        self.log
            .push(format!("failed {}: {}", failure.name, failure.error));
    }

    #[command]
    fn note(&mut self, entry: String) {
        self.log.push(entry);
    }
}

/// An array nested `depth` levels deep: `[[[...]]]`.
fn nested(depth: usize) -> Value {
    (1..depth).fold(Value::Array(Vec::new()), |inner, _| {
        Value::Array(vec![inner])
    })
}

fn depth_of(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

/// A till runtime whose card processor declines a charge of 13 cents for good the first
/// `declines` times it sees it, and charges everything else.
async fn till_runtime(harness: &Harness, declines: u32) -> Runtime {
    let declines = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(declines));
    Runtime::builder()
        .sqlite(harness.path())
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .effect(|fetch: FetchTree, _: EffectContext| async move { Ok(nested(fetch.depth)) })
        .effect(move |charge: Charge, context: EffectContext| {
            let declines = std::sync::Arc::clone(&declines);
            async move {
                if charge.cents == 13 && declines.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                    declines.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    return Err(Failure::permanent("card declined"));
                }
                Ok(Receipt {
                    charge_id: format!("ch-{}", context.attempt()),
                })
            }
        })
        .start()
        .await
        .expect("the runtime starts")
}

/// "Never commit what cannot be read back." An effect output at serde_json's nesting limit
/// passes the output's own read-back (`store_value`), but the reply command wraps it two
/// levels deeper (`{"operation":..,"arguments":{"tree":<output>}}`), so the reply message
/// that `finish_effect` commits can never be decoded: the effect is marked done, the reply
/// becomes a dead letter, and neither the success nor the failure command ever runs. A send
/// of the same value through `turn.send` is refused at the door by `store_operation`.
#[tokio::test]
async fn an_effect_output_at_the_nesting_limit_commits_a_reply_that_never_reads_back() {
    let harness = Harness::new();
    let runtime = till_runtime(&harness, 0).await;
    let till = runtime.reference::<Till>("t");
    till.fetch(127).await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    let dead: Vec<(String, String)> = runtime
        .admin()
        .dead_letters(
            &solid_objects::admin::DeadLetterFilter::new()
                .include_retried()
                .limit(10),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|letter| (letter.operation, letter.error))
        .collect();
    let log = till.snapshot().await.unwrap().log;
    assert_eq!(
        (dead.as_slice(), log.len()),
        (&[][..], 1),
        "the effect's outcome must reach the actor (its output, or its failure); instead the \
         reply was committed unreadable. dead letters: {dead:?}, actor log: {log:?}, dead \
         effects: {}",
        runtime
            .admin()
            .effects(
                &solid_objects::admin::EffectFilter::new()
                    .status("dead")
                    .limit(10)
            )
            .await
            .unwrap()
            .len()
    );
}

/// "An unreadable stored reply fails the effect for good with a clear error" (commit
/// cbe3936) and DESIGN: "unknown operations in stored rows" get a typed error and change
/// nothing. A stored `on_success` that reads as JSON but names a command the actor does not
/// have is enqueued as is: the effect is marked done and the actor's mailbox head becomes an
/// operation no build knows, so every later call to the actor fails with UnknownOperation,
/// forever. (The same happens without tampering when a deploy renames the reply command
/// while effects emitted by the old build are still pending.)
#[tokio::test]
async fn a_stored_reply_naming_an_unknown_command_wedges_the_actor() {
    let harness = Harness::new();
    let runtime = till_runtime(&harness, 0).await;
    let till = runtime.reference::<Till>("t");
    till.pay(250).await.unwrap();
    execute(
        &harness,
        r#"UPDATE solid_effects SET on_success = '{"operation":"refund_everything","argument":"receipt"}'"#,
    )
    .await;

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let later = till.note("later".to_owned()).await;
    let dead_effects = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert!(
        later.is_ok() && dead_effects.len() == 1,
        "the actor must go on and the effect fail for good with a clear error; the call got \
         {later:?}, dead effects: {}",
        dead_effects.len()
    );
}

/// The same promise for a stored reply whose argument name is not the command's: the reply
/// `{"wrong": <receipt>}` is committed as the command's arguments, which never decode. The
/// effect ends `done`, the reply a dead letter, and the on_failure command never hears of it.
#[tokio::test]
async fn a_stored_reply_with_a_wrong_argument_name_is_committed_unreadable() {
    let harness = Harness::new();
    let runtime = till_runtime(&harness, 0).await;
    let till = runtime.reference::<Till>("t");
    till.pay(250).await.unwrap();
    execute(
        &harness,
        r#"UPDATE solid_effects SET on_success = '{"operation":"charged","argument":"wrong"}'"#,
    )
    .await;

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    let dead_letters: Vec<String> = runtime
        .admin()
        .dead_letters(
            &solid_objects::admin::DeadLetterFilter::new()
                .include_retried()
                .limit(10),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|letter| format!("{}: {}", letter.operation, letter.error))
        .collect();
    let dead_effects = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap()
        .len();
    assert_eq!(
        (dead_letters.clone(), dead_effects),
        (Vec::<String>::new(), 1),
        "the effect must fail for good (and its failure reach on_failure), not commit a reply \
         that cannot be read: dead letters {dead_letters:?}"
    );
}

/// `Runtime::retry_effect` revives a dead effect whose failure already went back to its
/// actor; the retry's success then reaches the `on_success` command too (documented on
/// `retry_effect`: an operator's retry is a new outcome, and an actor that treats a failure
/// as final says so in its state). Both arrive, in order, each once.
#[tokio::test]
async fn retrying_a_dead_effect_after_its_failure_went_back_reports_the_new_outcome_too() {
    let harness = Harness::new();
    let runtime = till_runtime(&harness, 1).await;
    let till = runtime.reference::<Till>("t");
    till.pay(13).await.unwrap();
    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();
    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        till.snapshot().await.unwrap().log,
        ["failed review9_charge: card declined"]
    );

    // An operator retries the dead effect; the processor now accepts the card.
    assert!(runtime.admin().retry_effect(dead[0].id).await.unwrap());
    assert!(
        !runtime.admin().retry_effect(dead[0].id).await.unwrap(),
        "once"
    );
    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();

    assert_eq!(
        till.snapshot().await.unwrap().log,
        ["failed review9_charge: card declined", "charged ch-1"]
    );
}

// ---------------------------------------------------------------------------------------
// Destroy and incarnations; recurring reminders.
// ---------------------------------------------------------------------------------------

#[actor(max_attempts = 1)]
#[derive(Debug, Default)]
struct Meter {
    broken: bool,
    readings: Vec<String>,
}

#[actor]
impl Meter {
    #[command]
    fn install(&mut self, turn: &mut Turn<Self>, broken: bool) -> u64 {
        self.broken = broken;
        turn.schedule_every(TimeDelta::hours(1), "hourly").read();
        turn.incarnation()
    }

    #[command]
    fn repair(&mut self) {
        self.broken = false;
    }

    #[command]
    fn ping(&mut self, turn: &mut Turn<Self>) -> u64 {
        turn.incarnation()
    }

    #[command]
    fn add(&mut self) {
        self.readings.push("added".to_owned());
    }

    #[reminder]
    fn read(&mut self, turn: &mut Turn<Self>) -> Result<(), Failure> {
        if self.broken {
            return Err(Failure::permanent("the meter is broken"));
        }
        self.readings.push(format!(
            "incarnation {} at {:?}",
            turn.incarnation(),
            turn.scheduled_at().map(|at| at.timestamp())
        ));
        Ok(())
    }
}

/// The issue: "a message or reminder from an old incarnation never lands on the new one".
/// A reminder occurrence of incarnation 1 that became a dead letter, retried by an operator
/// after the actor was destroyed, is re-enqueued by `retry_dead_letter` without its
/// incarnation (`insert_ready` writes `incarnation: None`), so it runs on incarnation 2.
#[tokio::test]
async fn a_dead_reminder_of_a_destroyed_incarnation_retried_by_an_operator_runs_on_the_next() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let meter = runtime.reference::<Meter>("m");
    assert_eq!(meter.install(true).await.unwrap(), 1);
    harness.advance_minutes(60);
    assert_eq!(
        runtime
            .testing()
            .run_due_reminders()
            .await
            .unwrap()
            .occurrences_fired,
        1
    );
    let dead = runtime
        .admin()
        .dead_letters(
            &solid_objects::admin::DeadLetterFilter::new()
                .include_retried()
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "incarnation 1's occurrence failed for good");

    meter.destroy().await.unwrap();
    assert_eq!(meter.ping().await.unwrap(), 2);
    let retried = runtime
        .admin()
        .retry_dead_letter(dead[0].message_id)
        .await
        .unwrap();
    runtime.testing().drain().await.unwrap();

    let readings = meter.snapshot().await.unwrap().readings;
    let status = retried.status().await.unwrap();
    assert!(
        readings.is_empty() && matches!(status, MessageStatus::Destroyed),
        "incarnation 1's reminder landed on incarnation 2: readings {readings:?}, retried \
         message {status:?}"
    );
}

/// The issue: "the occurrence's scheduled time is available to the handler". A recurring
/// reminder's occurrence that died and is retried by an operator loses it:
/// `retry_dead_letter` re-enqueues operation and arguments only (`scheduled_for` is not even
/// read back by `select_message!`), so `turn.scheduled_at()` is `None` on the retry.
#[tokio::test]
async fn a_retried_reminder_occurrence_loses_its_scheduled_time() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let meter = runtime.reference::<Meter>("m");
    meter.install(true).await.unwrap();
    harness.advance_minutes(60);
    let scheduled = harness.clock.now().timestamp();
    runtime.testing().run_due_reminders().await.unwrap();
    let dead = runtime
        .admin()
        .dead_letters(
            &solid_objects::admin::DeadLetterFilter::new()
                .include_retried()
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);

    meter.repair().await.unwrap();
    runtime
        .admin()
        .retry_dead_letter(dead[0].message_id)
        .await
        .unwrap();
    runtime.testing().drain().await.unwrap();

    assert_eq!(
        meter.snapshot().await.unwrap().readings,
        [format!("incarnation 1 at Some({scheduled})")],
        "the retried occurrence runs with the time it was scheduled for"
    );
}

/// Retention: "Deletes finished messages ... older than the retention period ... keeping
/// every unfinished message" (`Runtime::prune_finished`). A destroyed message is finished
/// (`finished_at` is set, it never runs), but the prune only deletes `completed` and
/// `rejected` rows: every message a destroy ended, and every stale reminder occurrence or
/// effect reply of an old incarnation, stays in `solid_messages` for ever. For actors that
/// live for years and are destroyed and recreated, the table only grows.
#[tokio::test]
async fn destroyed_messages_are_never_pruned() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let meter = runtime.reference::<Meter>("m");
    for _ in 0..3 {
        meter.enqueue().add().await.unwrap();
    }
    meter.destroy().await.unwrap();
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'destroyed'").await,
        3
    );

    harness.clock.advance(Duration::from_secs(400 * 24 * 3600));
    runtime
        .admin()
        .prune()
        .await
        .map(|pruned| pruned.total())
        .unwrap();

    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'destroyed'").await,
        0,
        "destroyed messages a year past the retention period are still stored"
    );
}

/// A caller waiting on a message that a destroy ended gets the typed `Error::Destroyed`
/// (the issue). Through the axum integration it becomes `500 {"code":"internal","message":
/// "internal error"}` and is logged as a server error: the client cannot tell "that actor
/// was destroyed" (a 404/409/410-class answer) from a crash.
#[tokio::test]
async fn a_destroyed_message_answers_http_clients_with_an_internal_error() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let meter = runtime.reference::<Meter>("m");
    let queued = meter.enqueue().add().await.unwrap();
    meter.destroy().await.unwrap();
    let error = queued
        .wait(Duration::from_secs(5))
        .await
        .expect_err("the message was destroyed");
    assert!(matches!(error, Error::Destroyed { .. }), "{error:?}");

    let response = error.into_response();
    let status = response.status().as_u16();
    assert!(
        (400..500).contains(&status),
        "Error::Destroyed answers HTTP {status}, a server error"
    );
}

// ---------------------------------------------------------------------------------------
// Reminder inspection on PostgreSQL.
// ---------------------------------------------------------------------------------------

#[actor]
#[derive(Debug, Default)]
struct Probe {
    probes: u32,
}

#[actor]
impl Probe {
    /// Looks a reminder up by a key the caller gave, treating a failed lookup as "not
    /// scheduled", and counts the probe.
    #[command]
    async fn probe(&mut self, turn: &mut Turn<Self>, key: String) -> Result<String, TurnError> {
        let looked_up = turn.reminder(key).expire().await;
        self.probes += 1;
        Ok(match looked_up {
            Ok(due) => format!("ok {due:?}"),
            Err(error) => format!("lookup error: {error}"),
        })
    }

    #[reminder]
    fn expire(&mut self) {}
}

/// DESIGN: ids and keys "a database would refuse (PostgreSQL stores no NUL byte in text)"
/// are "a typed error at the door, never a database error halfway through a turn". The
/// reminder lookup sends its key to the database unchecked (no `validate_key`), inside the
/// turn's transaction and behind no savepoint. On PostgreSQL a key holding a NUL byte makes
/// the server refuse the statement, which aborts the whole turn transaction: the handler
/// handles the lookup's error, yet the turn can never commit (every later statement fails
/// with "current transaction is aborted"). The same handler commits on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_reminder_lookup_with_a_nul_key_aborts_a_turn_that_handled_the_error() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let runtime = Runtime::builder()
        .postgres(&url, 4)
        .clock(ManualClock::starting_now())
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(30))
        .start()
        .await
        .expect("the runtime starts on PostgreSQL");
    let probe = runtime.reference::<Probe>("p");

    let answer = probe.probe("hold\0x".to_owned()).await;
    let probes = probe.snapshot().await.unwrap().probes;
    runtime.close().await;
    assert!(
        answer.is_ok() && probes == 1,
        "a handler that handled its lookup's error must still commit: the call got \
         {answer:?}, probes committed: {probes}"
    );
}

// ---------------------------------------------------------------------------------------
// Sends with options.
// ---------------------------------------------------------------------------------------

#[actor]
#[derive(Debug, Default)]
struct Warehouse {
    reserved: Vec<String>,
}

#[actor]
impl Warehouse {
    #[command]
    fn reserve(&mut self, order: String) -> usize {
        self.reserved.push(order);
        self.reserved.len()
    }
}

#[actor]
#[derive(Debug, Default)]
struct Shopper {}

#[actor]
impl Shopper {
    /// Asks the warehouse to reserve in `hours` hours.
    #[command]
    fn reserve_later(&mut self, turn: &mut Turn<Self>, warehouse: String, hours: i64) {
        let me = turn.actor_id().to_owned();
        turn.send::<Warehouse>(warehouse)
            .delay(TimeDelta::hours(hours))
            .reserve(me);
    }
}

/// DESIGN, "a runtime that never wedges", and the issue's "a delayed message". A delayed
/// send joins the target's mailbox at its tail with `available_at` in the future, and a
/// mailbox never runs past a head that is not due (`Step::Blocked`): one actor's
/// `turn.send::<B>(id).delay(d)` freezes every other message to `B` — other senders',
/// callers' synchronous calls — for `d`. With `.delay(TimeDelta::days(36500))` any actor
/// can stop a shared actor (the tests' own example sends a delayed reserve to a shared
/// stock item) for a century. The delay must hold back that message, not the target.
#[tokio::test]
async fn a_delayed_send_does_not_hold_the_target_for_other_callers() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let shopper = runtime.reference::<Shopper>("alice");
    shopper
        .reserve_later("w-1".to_owned(), 24 * 365)
        .await
        .unwrap();

    // Another customer reserves now, synchronously.
    let warehouse = runtime
        .reference::<Warehouse>("w-1")
        .timeout(Duration::from_millis(500));
    let now = warehouse.reserve("bob".to_owned()).await;
    assert!(
        matches!(now, Ok(1)),
        "a delayed message from one sender holds the warehouse for a year: {now:?}"
    );
    // The delayed message still runs, once it is due.
    runtime.testing().drain().await.unwrap();
    assert_eq!(warehouse.snapshot().await.unwrap().reserved, ["bob"]);
    harness.advance_minutes(24 * 365 * 60 + 1);
    runtime.testing().drain().await.unwrap();
    assert_eq!(
        warehouse.snapshot().await.unwrap().reserved,
        ["bob", "alice"]
    );
}

// ---------------------------------------------------------------------------------------
// Reminder inspection and typed rejections: smaller holes.
// ---------------------------------------------------------------------------------------

#[actor]
#[derive(Debug, Default)]
struct Alarm {}

#[actor]
impl Alarm {
    #[command]
    fn arm(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now() + TimeDelta::hours(1), "wake")
            .ring();
    }

    /// Destroys the actor, then asks whether its reminder is still due.
    #[command]
    async fn retire(&mut self, turn: &mut Turn<Self>) -> Result<bool, TurnError> {
        turn.destroy();
        Ok(turn.reminder("wake").ring().await?.is_some())
    }

    #[reminder]
    fn ring(&mut self) {}
}

/// `turn.reminder(key).<r>().await` "says when it is due next (`None` if it is not
/// scheduled), counting what this turn has staged so far". A turn that staged
/// `turn.destroy()` (which removes every reminder at commit) is still told the reminder is
/// due: `Staging::latest` only knows schedules and cancels, and the store still has the row.
/// After the commit nothing is scheduled. Minor, but the lookup's contract is exactly this.
#[tokio::test]
async fn a_lookup_after_turn_destroy_still_says_the_reminder_is_due() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let alarm = runtime.reference::<Alarm>("a");
    alarm.arm().await.unwrap();

    let still_due = alarm.retire().await.unwrap();
    let listed = alarm.reminders().await.unwrap().len();
    assert_eq!(
        (still_due, listed),
        (false, 0),
        "the turn was told its reminder is due; after its commit {listed} reminders exist"
    );
}

/// Why a reservation is refused; one field is a raw identifier.
#[derive(Debug, PartialEq, Rejection)]
enum TicketError {
    WrongKind { r#type: String },
}

/// `#[derive(Rejection)]` makes "its fields the details". For a field written as a raw
/// identifier (`r#type`, as serde and the generated reply builders spell `type`), the
/// details key is the token text `"r#type"`, which is what HTTP clients receive in
/// `details` (macros/src/rejection.rs `into_arm`: `name.to_string()`, no `trim_start_matches
/// ("r#")` as `snake_case` and the reply builders do).
#[test]
fn a_raw_identifier_field_is_stored_under_its_token_text() {
    let rejection = TypedRejection::into_rejection(TicketError::WrongKind {
        r#type: "vip".to_owned(),
    });
    assert_eq!(
        rejection.details(),
        Some(&json!({ "type": "vip" })),
        "details as stored and sent to clients"
    );
}
