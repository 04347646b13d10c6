//! Upgrades keep every stored row: a database written by an earlier release opens on this
//! build, migrates, and runs what it holds with the outcomes that release promised.
//!
//! `tests/fixtures/<release>/` holds what one release wrote (a SQLite file, a PostgreSQL dump
//! and a MariaDB dump), each made by [`write_fixtures_of_this_build`] from the actors below at
//! a fixed time on a manual clock. The reading tests load every release's fixture into a
//! fresh database, start this build on it (which applies the schema migrations), and check
//! each kind of row: states of older versions, queued, delayed, completed, rejected and dead
//! messages, idempotency keys, keyed and recurring reminders, pending, done and dead effects
//! with their replies, a paused actor and the audit log. The actors and what the writer does
//! with them stay as they are: the reader expects exactly what they wrote.

mod support;

/// The backend of `support::Harness::new()` in this binary (each test here names its own).
const BACKEND: support::Backend = support::Backend::Sqlite;

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};
use solid_objects::admin::{ActorFilter, DeadLetterFilter, EffectFilter, ReminderFilter};
use solid_objects::prelude::*;
use solid_objects::{Builder, Drained};
use support::mariadb::MariaDb;
use support::migrating;
use support::postgres::PgServer;
use support::release_dumps;
use support::state_json::owner_renamed_holder;

/// The manual clock's time while the fixtures were written; each reading test starts there.
fn written_at() -> DateTime<Utc> {
    "2026-01-05T09:00:00Z".parse().expect("a valid time")
}

/// The caller the writer's administration calls name, to find their audit rows.
fn fixture_operator() -> Value {
    json!({ "operator": "fixture writer" })
}

/// The account as the first version of its state stored it: the owner and whole euros.
#[actor(name = "Account")]
#[derive(Default)]
struct AccountV1 {
    owner: String,
    balance: u64,
}

#[actor]
impl AccountV1 {
    #[command]
    fn open(&mut self, owner: String, balance: u64) {
        (self.owner, self.balance) = (owner, balance);
    }
}

/// The second version of the account's state: the owner became the holder.
#[actor(name = "Account", version = 2)]
#[derive(Default)]
struct AccountV2 {
    holder: String,
    balance: u64,
}

#[actor]
impl AccountV2 {
    #[migrate(from = 1)]
    fn from_v1(old: Value) -> Result<Value, MigrationError> {
        rename_owner(old)
    }

    #[command]
    fn open(&mut self, holder: String, balance: u64) {
        (self.holder, self.balance) = (holder, balance);
    }
}

/// Renames a version 1 account's owner to the holder, in the stored JSON.
fn rename_owner(old: Value) -> Result<Value, MigrationError> {
    owner_renamed_holder(old, "account")
}

/// The account's current state, version 3: cents, and what happened to it.
#[actor(name = "Account", version = 3)]
#[derive(Debug, Default, PartialEq)]
struct Account {
    holder: String,
    cents: u64,
    history: Vec<String>,
}

#[actor]
impl Account {
    #[migrate(from = 1)]
    fn from_v1(old: Value) -> Result<Value, MigrationError> {
        rename_owner(old)
    }

    /// Counts the balance in cents.
    #[migrate(from = 2)]
    fn to_cents(old: AccountV2) -> Account {
        Account {
            holder: old.holder,
            cents: old.balance * 100,
            history: vec!["migrated".to_owned()],
        }
    }

    #[command]
    fn open(&mut self, holder: String, cents: u64) {
        (self.holder, self.cents) = (holder, cents);
        self.history.push("open".to_owned());
    }

    #[command]
    fn deposit(&mut self, cents: u64) -> u64 {
        self.cents += cents;
        self.history.push(format!("deposit {cents}"));
        self.cents
    }
}

/// Postings under a limit: a negative amount is rejected, one over the limit fails for good.
#[actor]
#[derive(Debug, Default, PartialEq)]
struct Ledger {
    limit: i64,
    entries: Vec<(String, i64)>,
}

#[actor]
impl Ledger {
    #[command]
    fn set_limit(&mut self, cents: i64) {
        self.limit = cents;
    }

    #[command]
    fn post(&mut self, entry: String, cents: i64) -> Result<i64, TurnError> {
        if cents < 0 {
            return Err(reject!(negative_amount, "{entry} is negative").into());
        }
        if cents > self.limit {
            let error = format!("{entry} is over the limit of {}", self.limit);
            return Err(Failure::permanent(error).into());
        }
        self.entries.push((entry, cents));
        Ok(self.total())
    }

    #[query]
    fn total(&self) -> i64 {
        self.entries.iter().map(|(_, cents)| cents).sum()
    }
}

/// Keyed one-off reminders and two recurring ones; each firing is noted with its time.
#[actor]
#[derive(Debug, Default, PartialEq)]
struct Alarm {
    rung: Vec<String>,
    hourly: Vec<String>,
    quarterly: Vec<String>,
}

/// A reminder occurrence's time, as the alarm notes it.
fn occurrence<A: solid_objects::Actor>(turn: &Turn<A>) -> String {
    let at = turn.scheduled_at().unwrap_or_else(|| turn.now());
    at.format("%H:%M").to_string()
}

#[actor]
impl Alarm {
    #[command]
    fn arm(&mut self, turn: &mut Turn<Self>, label: String, minutes: i64) {
        let at = turn.now() + TimeDelta::minutes(minutes);
        turn.schedule(at, label.clone()).ring(label);
    }

    #[command]
    fn start_ticking(&mut self, turn: &mut Turn<Self>) {
        turn.schedule_every(TimeDelta::hours(1), "hourly").tick();
        turn.schedule_every(TimeDelta::minutes(15), "quarterly")
            .missed(Missed::All)
            .chime();
    }

    #[reminder]
    fn ring(&mut self, turn: &mut Turn<Self>, label: String) {
        self.rung.push(format!("{label} {}", occurrence(turn)));
    }

    #[reminder]
    fn tick(&mut self, turn: &mut Turn<Self>) {
        self.hourly.push(occurrence(turn));
    }

    #[reminder]
    fn chime(&mut self, turn: &mut Turn<Self>) {
        self.quarterly.push(occurrence(turn));
    }
}

/// A parcel handed to the carrier: an effect whose output is the carrier's label.
#[derive(Serialize, Deserialize)]
struct ShipParcel {
    parcel: String,
}

/// What the carrier answers.
#[derive(Debug, Serialize, Deserialize)]
struct Label {
    tracking: String,
}

impl Effect for ShipParcel {
    const NAME: &'static str = "ship_parcel";
    type Output = Label;
}

/// Ships parcels through an effect and notes each outcome its replies bring back.
#[actor]
#[derive(Debug, Default, PartialEq)]
struct Shipment {
    shipped: Vec<String>,
    unshipped: Vec<String>,
}

#[actor]
impl Shipment {
    #[command]
    fn ship(&mut self, turn: &mut Turn<Self>, parcel: String) {
        turn.emit(ShipParcel { parcel })
            .on_success()
            .shipped()
            .on_failure()
            .not_shipped();
    }

    #[reply]
    fn shipped(&mut self, label: Label) {
        self.shipped.push(label.tracking);
    }

    #[reply]
    fn not_shipped(&mut self, failure: EffectFailure<ShipParcel>) {
        let parcel = failure.effect.parcel;
        self.unshipped.push(format!("{parcel}: {}", failure.error));
    }
}

/// A builder for one backend's database, on the fixture's clock, allowing every call.
fn on_clock(builder: Builder, clock: &ManualClock) -> Builder {
    builder
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Account>()
        .actor::<Ledger>()
        .actor::<Alarm>()
        .actor::<Shipment>()
}

/// The carrier: labels every parcel, except the one named `refused`, which it refuses for
/// good.
fn carrier(builder: Builder, refused: &'static str) -> Builder {
    builder.effect(move |ship: ShipParcel, _: EffectContext| async move {
        if ship.parcel == refused {
            return Err(Failure::permanent("the carrier refused it"));
        }
        Ok(Label {
            tracking: format!("track-{}", ship.parcel),
        })
    })
}

/// Writes the fixture's rows through the actors, at [`written_at`]; `database` gives a
/// builder on the database (called once per runtime: each state version has its own).
async fn write_rows(database: impl Fn() -> Builder) {
    let clock = ManualClock::new(written_at());
    // Each earlier state version, through a runtime of its own (two types with one stored
    // name cannot share a runtime).
    let first = database().clock(clock.clone()).policy(AllowAll);
    let first = first.start().await.expect("the runtime starts");
    let account = first.reference::<AccountV1>("acc-1");
    account.open("ann", 12).await.expect("acc-1 opens");
    first.close().await;
    let second = database().clock(clock.clone()).policy(AllowAll);
    let second = second.start().await.expect("the runtime starts");
    let account = second.reference::<AccountV2>("acc-2");
    account.open("bob", 7).await.expect("acc-2 opens");
    second.close().await;

    let runtime = carrier(on_clock(database(), &clock), "lost")
        .start()
        .await
        .expect("the runtime starts");
    let account = runtime.reference::<Account>("acc-3");
    account.open("cy", 300).await.expect("acc-3 opens");
    account.deposit(5).await.expect("acc-3 takes a deposit");

    // What runs in the writer: completed, rejected and dead messages, a done effect and
    // its reply, then a dead effect whose failure reply stays queued.
    let ledger = runtime.reference::<Ledger>("main");
    ledger.set_limit(500).await.expect("the limit is set");
    let invoice = ledger.clone().idempotency_key("inv-1");
    assert_eq!(invoice.post("invoice 1", 100).await.expect("posted"), 100);
    let keyed = ledger.enqueue().idempotency_key("inv-2");
    keyed.post("invoice 2", 200).await.expect("enqueued");
    let refund = ledger.clone().idempotency_key("refund-1");
    let refused = refund.post("refund", -5).await;
    assert_eq!(support::rejection_code(refused), "negative_amount");
    ledger.enqueue().post("rent", 900).await.expect("enqueued");
    let frozen = runtime.reference::<Ledger>("frozen");
    frozen.set_limit(100).await.expect("the limit is set");
    assert_eq!(frozen.post("deposit", 10).await.expect("posted"), 10);
    let alarm = runtime.reference::<Alarm>("tower");
    alarm.arm("wake", 30).await.expect("armed");
    alarm.arm("noon", 180).await.expect("armed");
    alarm.start_ticking().await.expect("ticking");
    let depot = runtime.reference::<Shipment>("depot");
    depot.ship("p-1").await.expect("shipped");
    let testing = runtime.testing();
    let drained = testing.drain().await.expect("the mailboxes drain");
    assert_eq!((drained.turns, drained.dead.len()), (1, 1), "{drained:?}");
    assert_eq!(testing.run_effects().await.expect("effects run"), 1);
    let drained = testing.drain().await.expect("the reply runs");
    assert_eq!((drained.completed, drained.is_clean()), (1, true));
    let returns = runtime.reference::<Shipment>("returns");
    returns.ship("lost").await.expect("shipped");
    assert_eq!(testing.run_effects().await.expect("effects run"), 1);

    // What waits for the next build: queued and delayed messages, a pending effect, a
    // queued message of a paused actor.
    depot.ship("p-2").await.expect("shipped");
    runtime
        .reference::<Account>("acc-1")
        .enqueue()
        .deposit(50)
        .await
        .expect("enqueued");
    let keyed = ledger.enqueue().idempotency_key("inv-3");
    keyed.post("invoice 3", 50).await.expect("enqueued");
    let later = ledger.enqueue().delay(TimeDelta::hours(2));
    later.post("late fee", 25).await.expect("enqueued");
    frozen.enqueue().post("held", 20).await.expect("enqueued");
    let admin = runtime.admin().context(fixture_operator());
    assert!(admin.pause("Ledger", "frozen").await.expect("paused"));
    runtime.close().await;
}

/// Opens a database loaded from a fixture with this build, checks every row the writer
/// left, and runs what is pending.
async fn open_and_run(database: Builder, fixture: &str) {
    let clock = ManualClock::new(written_at());
    let runtime = carrier(on_clock(database, &clock), "nothing")
        .start()
        .await
        .unwrap_or_else(|error| panic!("{fixture}: this build opens it: {error}"));
    check_counts(&runtime, fixture).await;
    check_listings(&runtime, fixture).await;
    check_states(&runtime, fixture).await;
    check_idempotency_keys(&runtime, fixture).await;
    run_queued_messages(&runtime, fixture).await;
    run_effects_and_replies(&runtime).await;
    retry_the_dead_letter(&runtime).await;
    clock.advance(std::time::Duration::from_secs(130 * 60));
    fire_due_reminders(&runtime, fixture).await;
    resume_the_paused_actor(&runtime).await;
    runtime.close().await;
}

/// The schema is this build's, every stored row decodes, and the counts by kind and status
/// are the writer's.
async fn check_counts(runtime: &Runtime, fixture: &str) {
    let admin = runtime.admin();
    let doctor = admin.doctor().await.expect("the doctor runs");
    let newest = doctor.applied_migrations.iter().max();
    let schema = "every schema migration of this build is applied";
    assert_eq!(newest, Some(&doctor.known_migration), "{fixture}: {schema}");
    let undecodable = doctor.undecodable;
    assert_eq!(undecodable, [], "{fixture}: every stored row decodes");
    let status = admin.status().await.expect("the status reads");
    let messages = [
        ("completed", 16),
        ("dead", 1),
        ("ready", 5),
        ("rejected", 1),
    ];
    assert_eq!(
        status.messages,
        counts(&messages),
        "{fixture}: every message is there"
    );
    let effects = [("dead", 1), ("done", 1), ("ready", 1)];
    assert_eq!(
        status.effects,
        counts(&effects),
        "{fixture}: every effect is there"
    );
    let (reminders, paused) = (status.reminders, status.paused_actors);
    assert_eq!((reminders, paused), (4, 1), "{fixture}");
}

/// The queued messages run: a deposit on a state of version 1, a keyed posting and the
/// failure reply of the dead effect; the delayed one and the paused actor's wait. A call
/// again under a completed message's key then answers with its stored result.
async fn run_queued_messages(runtime: &Runtime, fixture: &str) {
    let drained = runtime.testing().drain().await;
    let drained = drained.expect("the mailboxes drain");
    let ran = (drained.completed, drained.is_clean());
    assert_eq!(ran, (3, true), "{fixture}: {drained:?}");
    let acc_1 = runtime.reference::<Account>("acc-1").snapshot().await;
    let history = ["migrated", "deposit 50"];
    assert_eq!(acc_1.expect("acc-1 reads"), account("ann", 1250, &history));
    let versions = state_versions(runtime, "Account").await;
    assert_eq!(versions, [3, 2, 3], "{fixture}: the turn stored version 3");
    let ledger = runtime.reference::<Ledger>("main");
    assert_eq!(ledger.total().await.expect("the total reads"), 350);
    let again = ledger.clone().idempotency_key("inv-1");
    assert_eq!(again.post("invoice 1", 100).await.expect("answered"), 100);
    assert_eq!(ledger.total().await.expect("the total reads"), 350);
}

/// The pending effect runs and its reply arrives; the dead one, retried, runs and succeeds.
async fn run_effects_and_replies(runtime: &Runtime) {
    let (admin, testing) = (runtime.admin(), runtime.testing());
    assert_eq!(testing.run_effects().await.expect("effects run"), 1);
    assert_eq!(testing.drain().await.expect("the reply runs").completed, 1);
    let dead = admin
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead))
        .await;
    let dead = dead.expect("dead effects list");
    assert!(admin.retry_effect(dead[0].id).await.expect("retried"));
    assert_eq!(testing.run_effects().await.expect("effects run"), 1);
    assert_eq!(testing.drain().await.expect("the reply runs").completed, 1);
    let depot = runtime.reference::<Shipment>("depot").snapshot().await;
    assert_eq!(
        depot.expect("the depot reads"),
        Shipment {
            shipped: vec!["track-p-1".to_owned(), "track-p-2".to_owned()],
            unshipped: vec![],
        }
    );
    let returns = runtime.reference::<Shipment>("returns").snapshot().await;
    assert_eq!(
        returns.expect("the returns read"),
        Shipment {
            shipped: vec!["track-lost".to_owned()],
            unshipped: vec!["lost: the carrier refused it".to_owned()],
        }
    );
}

/// The dead letter, retried once the limit allows it, completes.
async fn retry_the_dead_letter(runtime: &Runtime) {
    let admin = runtime.admin();
    let ledger = runtime.reference::<Ledger>("main");
    ledger.set_limit(1000).await.expect("the limit is raised");
    let letters = admin.dead_letters(&DeadLetterFilter::new()).await;
    let letter = &letters.expect("dead letters list")[0];
    let retried = admin.retry_dead_letter(letter.message_id).await;
    let retried = retried.expect("the dead letter is enqueued again");
    assert_eq!(
        runtime.testing().drain().await.expect("it runs").completed,
        1
    );
    let message = admin.message(retried.id()).await.expect("it reads");
    assert_eq!(message.expect("it is there").status, "completed");
    assert_eq!(ledger.total().await.expect("the total reads"), 1250);
}

/// At 11:10 the reminders due fire (a recurring one once for the occurrences it missed,
/// the other once for each) and the delayed message runs.
async fn fire_due_reminders(runtime: &Runtime, fixture: &str) {
    let fired = runtime.testing().run_due_reminders().await;
    let fired = fired.expect("the reminders fire");
    let ran = (fired.occurrences_fired, fired.completed, fired.is_clean());
    assert_eq!(ran, (10, 11, true), "{fixture}: {fired:?}");
    let ledger = runtime.reference::<Ledger>("main");
    assert_eq!(ledger.total().await.expect("the total reads"), 1275);
    let alarm = runtime.reference::<Alarm>("tower").snapshot().await;
    let quarterly = [
        "09:15", "09:30", "09:45", "10:00", "10:15", "10:30", "10:45", "11:00",
    ];
    assert_eq!(
        alarm.expect("the alarm reads"),
        Alarm {
            rung: vec!["wake 09:30".to_owned()],
            hourly: vec!["11:00".to_owned()],
            quarterly: quarterly.map(str::to_owned).to_vec(),
        }
    );
    let reminders = reminders(runtime).await;
    let expected = [
        ("chime", "quarterly", "11:15", Some(15 * 60_000)),
        ("ring", "noon", "12:00", None),
        ("tick", "hourly", "12:00", Some(60 * 60_000)),
    ];
    assert_eq!(reminders, expected.map(reminder), "{fixture}");
}

/// The paused actor stays paused, its message waiting, until an operator resumes it.
async fn resume_the_paused_actor(runtime: &Runtime) {
    let (admin, testing) = (runtime.admin(), runtime.testing());
    let frozen = runtime.reference::<Ledger>("frozen");
    assert!(matches!(frozen.total().await, Err(Error::Paused { .. })));
    let drained = testing.drain().await.expect("nothing runs");
    assert_eq!(drained, Drained::default());
    assert!(admin.resume("Ledger", "frozen").await.expect("resumed"));
    assert_eq!(testing.drain().await.expect("it runs").completed, 1);
    assert_eq!(frozen.total().await.expect("the total reads"), 30);
}

/// Counts by status, as the status lists them.
fn counts(counts: &[(&str, i64)]) -> Vec<(String, i64)> {
    counts
        .iter()
        .map(|&(status, count)| (status.to_owned(), count))
        .collect()
}

/// An account's state.
fn account(holder: &str, cents: u64, history: &[&str]) -> Account {
    Account {
        holder: holder.to_owned(),
        cents,
        history: history.iter().map(|entry| (*entry).to_owned()).collect(),
    }
}

/// The stored state versions of an actor type's actors, in id order.
async fn state_versions(runtime: &Runtime, actor_type: &str) -> Vec<i64> {
    let filter = ActorFilter::new().actor_type(actor_type);
    let page = runtime.admin().actors(&filter).await.expect("actors list");
    page.actors
        .iter()
        .map(|actor| actor.state_version)
        .collect()
}

/// A reminder as [`reminders`] lists it: name, key, due time of day, interval in ms.
type ListedReminder = (String, String, String, Option<i64>);

/// A reminder as [`reminders`] lists it, from string slices.
fn reminder((name, key, due, every): (&str, &str, &str, Option<i64>)) -> ListedReminder {
    (name.to_owned(), key.to_owned(), due.to_owned(), every)
}

/// The alarm's reminders as the admin API lists them, the next due first (then by name).
async fn reminders(runtime: &Runtime) -> Vec<ListedReminder> {
    let filter = ReminderFilter::new().actor_type("Alarm");
    let listed = runtime.admin().reminders(&filter).await;
    let mut listed: Vec<_> = listed
        .expect("reminders list")
        .into_iter()
        .map(|reminder| {
            let due = reminder.due_at.format("%H:%M").to_string();
            (reminder.name, reminder.key, due, reminder.every_ms)
        })
        .collect();
    listed.sort_by(|a, b| (&a.2, &a.0).cmp(&(&b.2, &b.0)));
    listed
}

/// The operators' listings show every row the writer left, as it left them.
async fn check_listings(runtime: &Runtime, fixture: &str) {
    let admin = runtime.admin();
    let letters = admin.dead_letters(&DeadLetterFilter::new()).await;
    let letters = letters.expect("dead letters list");
    assert_eq!(letters.len(), 1, "{fixture}: {letters:?}");
    let letter = &letters[0];
    assert_eq!(
        (&*letter.actor_type, &*letter.actor_id, &*letter.operation),
        ("Ledger", "main", "post")
    );
    assert_eq!(letter.arguments, json!({ "entry": "rent", "cents": 900 }));
    assert_eq!(letter.attempts, 1);
    assert!(
        letter.error.contains("rent is over the limit of 500"),
        "{letter:?}"
    );
    assert_eq!(letter.failed_at, Some(written_at()));

    let effects = admin.effects(&EffectFilter::new()).await;
    let effects: Vec<_> = effects
        .expect("effects list")
        .into_iter()
        .map(|effect| {
            let error = effect.last_error.unwrap_or_default();
            (
                effect.actor_id,
                effect.name,
                effect.status.to_string(),
                effect.attempts,
                error,
            )
        })
        .collect();
    let error = "the carrier refused it";
    let expected = [
        ("depot", "ship_parcel", "done", 1, ""),
        ("returns", "ship_parcel", "dead", 1, error),
        ("depot", "ship_parcel", "ready", 0, ""),
    ];
    let expected = expected.map(|(id, name, status, attempts, error)| {
        (
            id.to_owned(),
            name.to_owned(),
            status.to_owned(),
            attempts,
            error.to_owned(),
        )
    });
    assert_eq!(effects, expected, "{fixture}");

    let reminders = reminders(runtime).await;
    let expected = [
        ("chime", "quarterly", "09:15", Some(15 * 60_000)),
        ("ring", "wake", "09:30", None),
        ("tick", "hourly", "10:00", Some(60 * 60_000)),
        ("ring", "noon", "12:00", None),
    ];
    assert_eq!(reminders, expected.map(reminder), "{fixture}");

    let ledgers = ActorFilter::new().actor_type("Ledger");
    let ledgers = admin.actors(&ledgers).await.expect("actors list").actors;
    let paused: Vec<_> = ledgers
        .iter()
        .map(|ledger| (&*ledger.actor_id, ledger.paused_at))
        .collect();
    assert_eq!(paused, [("frozen", Some(written_at())), ("main", None)]);

    let events = admin.audit_log(1000).await.expect("the audit log reads");
    let written: Vec<_> = events
        .iter()
        .filter(|event| event.caller.as_ref() == Some(&fixture_operator()))
        .map(|event| (&*event.action, &*event.resource, &*event.outcome, event.at))
        .collect();
    let resource = "Ledger/frozen";
    assert_eq!(
        written,
        [("pause", resource, "done", written_at())],
        "{fixture}: {events:?}"
    );
}

/// States of every version read as this build's, with their migrations run in memory.
async fn check_states(runtime: &Runtime, fixture: &str) {
    let versions = state_versions(runtime, "Account").await;
    assert_eq!(versions, [1, 2, 3], "{fixture}: each account's version");
    let expected = [
        ("acc-1", account("ann", 1200, &["migrated"])),
        ("acc-2", account("bob", 700, &["migrated"])),
        ("acc-3", account("cy", 305, &["open", "deposit 5"])),
    ];
    for (id, state) in expected {
        let read = runtime.reference::<Account>(id).snapshot().await;
        assert_eq!(read.expect("the account reads"), state, "{fixture}: {id}");
    }
    let versions = state_versions(runtime, "Account").await;
    assert_eq!(
        versions,
        [1, 2, 3],
        "{fixture}: reading migrates in memory only"
    );
    let ledger = runtime.reference::<Ledger>("main").snapshot().await;
    let entries = [("invoice 1", 100), ("invoice 2", 200)];
    assert_eq!(
        ledger.expect("the ledger reads"),
        Ledger {
            limit: 500,
            entries: entries
                .map(|(entry, cents)| (entry.to_owned(), cents))
                .to_vec(),
        },
        "{fixture}"
    );
}

/// The idempotency keys the writer used still find their messages and deduplicate.
async fn check_idempotency_keys(runtime: &Runtime, fixture: &str) {
    let ledger = runtime.reference::<Ledger>("main");
    let stored = |key: &'static str| {
        let ledger = ledger.clone();
        async move {
            let message = ledger.message_with_key(key).await.expect("it reads");
            message.unwrap_or_else(|| panic!("{fixture}: the message of {key} is kept"))
        }
    };
    let first = stored("inv-1").await.typed::<i64>();
    assert_eq!(first.result().await.expect("its result reads"), Some(100));
    let refund = stored("refund-1").await;
    assert_eq!(
        support::rejection_code(refund.result().await),
        "negative_amount"
    );

    let second = stored("inv-2").await;
    let enqueued = ledger.enqueue().idempotency_key("inv-2");
    let enqueued = enqueued.post("invoice 2", 200).await.expect("enqueued");
    assert_eq!(enqueued.id(), second.id(), "{fixture}: the stored message");
    assert_eq!(
        enqueued.result().await.expect("its result reads"),
        Some(300)
    );
    let conflicting = ledger.enqueue().idempotency_key("inv-2");
    let conflicting = conflicting.post("invoice 2", 201).await;
    assert!(
        matches!(conflicting, Err(Error::IdempotencyConflict { .. })),
        "{fixture}: {conflicting:?}"
    );
    // The queued one is found again under its key, and still waits.
    let third = stored("inv-3").await;
    let queued = ledger.enqueue().idempotency_key("inv-3");
    let queued = queued.post("invoice 3", 50).await.expect("enqueued");
    assert_eq!(queued.id(), third.id());
    assert!(matches!(
        queued.status().await.expect("it reads"),
        MessageStatus::Ready { attempts: 0, .. }
    ));
    let entries = ledger.snapshot().await.expect("the ledger reads").entries;
    assert_eq!(entries.len(), 2, "{fixture}: nothing ran again");
}

#[tokio::test]
async fn sqlite_files_of_every_release_open_migrate_and_run() {
    for release in release_dumps::releases() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("actors.db");
        std::fs::copy(release.join("sqlite.db"), &path).expect("the fixture copies");
        let fixture = format!("{}/sqlite.db", release.display());
        open_and_run(Runtime::builder().sqlite(path), &fixture).await;
    }
}

/// A throwaway server the releases' dumps load into: PostgreSQL or MariaDB.
enum DumpServer {
    Postgres(PgServer),
    MariaDb(MariaDb),
}

impl DumpServer {
    /// The URL of a fresh database on the server.
    async fn database(&self) -> String {
        match self {
            Self::Postgres(server) => server.database().await,
            Self::MariaDb(server) => server.database().await,
        }
    }

    /// Loads `release`'s dump for this server into the (empty) database of `url`; returns
    /// the dump's path, as the checks of its rows name it.
    fn load(&self, release: &Path, url: &str) -> String {
        let dump = match self {
            Self::Postgres(_) => {
                release_dumps::load_postgres(release, url);
                "postgres.sql"
            }
            Self::MariaDb(_) => {
                release_dumps::load_mariadb(release, url);
                "mariadb.sql"
            }
        };
        release.join(dump).display().to_string()
    }

    /// This build on the database of `url`, with 4 connections.
    fn builder(&self, url: &str) -> Builder {
        match self {
            Self::Postgres(_) => Runtime::builder().postgres(url, 4),
            Self::MariaDb(_) => Runtime::builder().mysql(url, 4),
        }
    }
}

/// Loads every release's dump into a fresh database of `server`, then opens, migrates and
/// runs it (nothing where the server does not start).
async fn every_release_loads_migrates_and_runs(server: Option<DumpServer>) {
    let Some(server) = server else {
        return;
    };
    for release in release_dumps::releases() {
        let url = server.database().await;
        let fixture = server.load(&release, &url);
        open_and_run(server.builder(&url), &fixture).await;
    }
}

/// Loads the first release's dump into a fresh database of `server`, kills a process
/// upgrading it mid index build, then opens, migrates and runs it, and compares its schema
/// with a fresh database's (nothing where the server does not start).
async fn a_killed_upgrade_migrates_at_the_next_start(server: Option<DumpServer>) {
    let Some(server) = server else {
        return;
    };
    let release = release_dumps::first_release();
    let url = server.database().await;
    let fixture = server.load(&release, &url);
    migrating::kill_mid_index_build(&url, "migrating_process").await;
    open_and_run(server.builder(&url), &fixture).await;
    assert_eq!(
        migrating::schema(&url).await,
        migrating::fresh_schema(&server.database().await).await,
        "the schema is a fresh database's"
    );
}

#[tokio::test]
async fn postgres_dumps_of_every_release_load_migrate_and_run() {
    every_release_loads_migrates_and_runs(PgServer::start().map(DumpServer::Postgres)).await;
}

#[tokio::test]
async fn mariadb_dumps_of_every_release_load_migrate_and_run() {
    every_release_loads_migrates_and_runs(MariaDb::start().map(DumpServer::MariaDb)).await;
}

/// A dead letter the first release retried names its retry (`retried_as`) but the retry
/// names nothing: written here as that release wrote it, into its fixture at `url`. Returns
/// the retry's id.
async fn retry_a_dead_letter_as_the_first_release_did(url: &str) -> i64 {
    let mut connection = migrating::connect(url).await;
    let retry = 1000;
    sqlx::query(
        format!(
            "INSERT INTO solid_messages (id, actor_type, actor_id, operation, arguments,
                 request_id, status, attempts, available_at, created_at)
             VALUES ({retry}, 'Ledger', 'main', 'post', '{{\"cents\":900,\"entry\":\"rent\"}}',
                 '01a2340e-0000-7000-8000-000000001000', 'ready', 0, 0, 1767603600000000)"
        )
        .as_str(),
    )
    .execute(&mut connection)
    .await
    .unwrap();
    let released = sqlx::query(
        format!(
            "UPDATE solid_messages SET retried_as = {retry}, idempotency_key = NULL
             WHERE status = 'dead' AND actor_type = 'Ledger' AND actor_id = 'main'"
        )
        .as_str(),
    )
    .execute(&mut connection)
    .await
    .unwrap();
    assert_eq!(
        released.rows_affected(),
        1,
        "the fixture holds one dead letter"
    );
    retry
}

/// The upgrade marks the retry of `retry_a_dead_letter_as_the_first_release_did` as its dead
/// letter's retry (`retry_of`, migration 15), so the charts count it as a message, not as a
/// reminder that fired again.
async fn the_upgrade_marks_the_first_releases_retry(url: &str, database: Builder) {
    let retry = retry_a_dead_letter_as_the_first_release_did(url).await;
    let clock = ManualClock::new(written_at());
    let runtime = carrier(on_clock(database, &clock), "nothing")
        .start()
        .await
        .expect("this build opens it");
    runtime.close().await;
    let mut connection = migrating::connect(url).await;
    let marked: (Option<i64>, i64) = sqlx::query_as(
        format!(
            "SELECT retry.retry_of, dead.id FROM solid_messages AS retry
             JOIN solid_messages AS dead ON dead.retried_as = retry.id
             WHERE retry.id = {retry}"
        )
        .as_str(),
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(marked.0, Some(marked.1), "the retry names its dead letter");
}

#[tokio::test]
async fn a_sqlite_file_whose_dead_letter_the_first_release_retried_marks_the_retry() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("actors.db");
    let release = release_dumps::first_release();
    std::fs::copy(release.join("sqlite.db"), &path).expect("the fixture copies");
    let url = format!("sqlite://{}", path.display());
    the_upgrade_marks_the_first_releases_retry(&url, Runtime::builder().sqlite(path)).await;
}

/// Loads the first release's dump into a fresh database of `server` and checks that the
/// upgrade marks the retry that release made (nothing where the server does not start).
async fn a_dumps_retry_is_marked(server: Option<DumpServer>) {
    let Some(server) = server else {
        return;
    };
    let url = server.database().await;
    server.load(&release_dumps::first_release(), &url);
    the_upgrade_marks_the_first_releases_retry(&url, server.builder(&url)).await;
}

#[tokio::test]
async fn server_dumps_whose_dead_letter_the_first_release_retried_mark_the_retry() {
    a_dumps_retry_is_marked(PgServer::start().map(DumpServer::Postgres)).await;
    a_dumps_retry_is_marked(MariaDb::start().map(DumpServer::MariaDb)).await;
}

/// A process upgrading the first release's PostgreSQL dump is killed while it builds one of
/// migration 11's indexes (which it does outside a transaction); the next start finishes the
/// migration, every row is there and runs as that release promised, and the schema is a
/// fresh database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dump_upgraded_by_a_process_killed_mid_index_build_migrates_at_the_next_start() {
    a_killed_upgrade_migrates_at_the_next_start(PgServer::start().map(DumpServer::Postgres)).await;
}

/// A process upgrading the first release's MariaDB dump is killed while its migration 11
/// waits to build an index; the next start finishes the migration, every row is there and
/// runs as that release promised, and the schema is a fresh database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_dump_upgraded_by_a_process_killed_mid_index_build_migrates_at_the_next_start() {
    a_killed_upgrade_migrates_at_the_next_start(MariaDb::start().map(DumpServer::MariaDb)).await;
}

/// The child of the crash cases above: a runtime that migrates the database its parent
/// names (nothing in a normal run).
#[tokio::test]
async fn migrating_process() {
    migrating::migrate_if_asked().await;
}

/// Writes this build's fixtures into `tests/fixtures/<version>/` (the package's version):
/// run it once on each release, and commit what it wrote (see tests/fixtures/README.md).
#[tokio::test]
#[ignore = "writes the fixtures of a new release"]
async fn write_fixtures_of_this_build() {
    let release = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(env!("CARGO_PKG_VERSION"));
    assert!(
        !release.exists(),
        "{} is there already: a release's fixtures never change",
        release.display()
    );
    std::fs::create_dir_all(&release).expect("the release's folder");

    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("actors.db");
    write_rows(|| Runtime::builder().sqlite(&path)).await;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path);
    let pool = sqlx::SqlitePool::connect_with(options)
        .await
        .expect("it opens");
    // One compact file, with nothing left in a write-ahead log beside it.
    sqlx::query("VACUUM INTO ?")
        .bind(release.join("sqlite.db").display().to_string())
        .execute(&pool)
        .await
        .expect("the file is written");
    pool.close().await;

    let postgres = PgServer::start().expect("PostgreSQL is installed");
    let url = postgres.database().await;
    write_rows(|| Runtime::builder().postgres(&url, 4)).await;
    let dump = release_dumps::run(
        Command::new(release_dumps::postgres_program("pg_dump"))
            .args(["--no-owner", "--no-privileges", "--dbname"])
            .arg(&url),
    );
    std::fs::write(release.join("postgres.sql"), dump).expect("the dump is written");

    let mariadb = MariaDb::start().expect("MariaDB is installed");
    let url = mariadb.database().await;
    write_rows(|| Runtime::builder().mysql(&url, 4)).await;
    let options = ["--skip-comments", "--skip-extended-insert", "--hex-blob"];
    let dump = release_dumps::run(&mut release_dumps::mariadb_command(
        "mariadb-dump",
        &options,
        &url,
    ));
    std::fs::write(release.join("mariadb.sql"), dump).expect("the dump is written");
}
