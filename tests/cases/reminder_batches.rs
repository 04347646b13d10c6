//! A worker pass fires due reminders in batches: however many are due, a batch costs one
//! statement to take them, one per 500 messages appended and one or two to delete or move
//! them, on every backend; every occurrence still rings once, in order. A poison
//! reminder row, a negative interval or an unknown missed policy is an error that stops no
//! other reminder and no message; two runtimes firing at once fire each occurrence once; a
//! turn that rearms while reminders fire keeps its schedule.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use support::workers::{fire_due_reminders, run_workers};
use support::{Backend, Harness};
use tokio::sync::Barrier;

#[actor]
#[derive(Default)]
struct Alarm {
    /// The scheduled time of each occurrence that rang, in the order they rang.
    rang: Vec<DateTime<Utc>>,
}

#[actor]
impl Alarm {
    #[command]
    fn arm(&mut self, turn: &mut Turn<Self>, minutes: i64) {
        turn.schedule(turn.now() + TimeDelta::minutes(minutes), "once")
            .ring();
    }

    #[command]
    fn arm_hourly(&mut self, turn: &mut Turn<Self>) {
        turn.schedule_every(TimeDelta::hours(1), "hourly")
            .missed(Missed::All)
            .ring();
    }

    #[query]
    fn rang(&self) -> Vec<DateTime<Utc>> {
        self.rang.clone()
    }

    #[reminder]
    fn ring(&mut self, turn: &mut Turn<Self>) {
        self.rang
            .push(turn.scheduled_at().expect("a fired reminder"));
    }
}

const ONE_SHOTS: usize = 1_200;
const HOURLY: usize = 3;

/// Arms the alarms through a runtime on `backend` that runs them, fires them through another
/// on the same database that knows no actor (so its pass only fires), then runs them.
async fn fire_in_batches(backend: impl Fn() -> solid_objects::Builder) {
    let clock = ManualClock::starting_now();
    let with_alarm = backend()
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Alarm>()
        .start()
        .await
        .unwrap();
    let firing = backend().clock(clock.clone()).start().await.unwrap();
    let start = clock.now();
    for index in 0..ONE_SHOTS {
        let minutes = i64::try_from(index % 7).unwrap() + 1;
        with_alarm
            .reference::<Alarm>(format!("once-{index}"))
            .arm(minutes)
            .await
            .unwrap();
    }
    for index in 0..HOURLY {
        with_alarm
            .reference::<Alarm>(format!("hourly-{index}"))
            .arm_hourly()
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(5 * 3600 + 30 * 60));

    let before = firing.stats().statements;
    let fired = firing.testing().run_due_reminders().await.unwrap();
    let statements = firing.stats().statements - before;
    assert_eq!(
        fired.occurrences_fired,
        ONE_SHOTS + HOURLY * 5,
        "each due occurrence fired once, and counts once"
    );
    // Batches of 1,000: [take, 2 inserts, delete], [take, insert, delete, move, and the
    // charts' tally of the occurrences the hourly alarms caught up]; the third pass reads
    // that none is due and begins no transaction.
    assert_eq!(
        statements,
        9,
        "{} reminders (1,215 messages) fired in a handful of statements",
        ONE_SHOTS + HOURLY
    );

    let ran = with_alarm.testing().drain().await.unwrap();
    assert_eq!(
        ran.turns,
        ONE_SHOTS + HOURLY * 5,
        "every occurrence ran once"
    );
    assert!(ran.is_clean(), "{:?}", ran.dead);
    for index in (0..ONE_SHOTS).step_by(97) {
        let alarm = with_alarm.reference::<Alarm>(format!("once-{index}"));
        let minutes = i64::try_from(index % 7).unwrap() + 1;
        assert_eq!(
            alarm.rang().await.unwrap(),
            vec![start + TimeDelta::minutes(minutes)],
            "once-{index}"
        );
        assert!(
            alarm.reminders().await.unwrap().is_empty(),
            "a one-shot is gone"
        );
    }
    for index in 0..HOURLY {
        let alarm = with_alarm.reference::<Alarm>(format!("hourly-{index}"));
        let hours: Vec<DateTime<Utc>> =
            (1..=5).map(|hour| start + TimeDelta::hours(hour)).collect();
        assert_eq!(
            alarm.rang().await.unwrap(),
            hours,
            "each missed hour, in order"
        );
        let reminders = alarm.reminders().await.unwrap();
        assert_eq!(reminders.len(), 1);
        assert_eq!(reminders[0].due_at, start + TimeDelta::hours(6), "moved on");
    }

    clock.advance(Duration::from_secs(3600));
    assert_eq!(fire_due_reminders(&firing).await, HOURLY);
    assert_eq!(with_alarm.testing().drain().await.unwrap().turns, HOURLY);
    with_alarm.close().await;
    firing.close().await;
}

#[tokio::test]
async fn a_thousand_due_reminders_fire_in_a_few_statements() {
    let harness = Harness::new();
    let database = harness.database().await;
    fire_in_batches(|| harness.backend().store_at(&database)).await;
}

#[actor]
#[derive(Default)]
struct Bell {
    /// (label, scheduled time) of each occurrence that rang, in the order they rang.
    rang: Vec<(String, DateTime<Utc>)>,
}

#[actor]
impl Bell {
    /// A recurring reminder every `minutes`, catching up every missed occurrence if `all`.
    #[command]
    fn every(&mut self, turn: &mut Turn<Self>, key: String, minutes: i64, all: bool) {
        let missed = if all { Missed::All } else { Missed::Latest };
        turn.schedule_every(TimeDelta::minutes(minutes), key.clone())
            .missed(missed)
            .ring(key);
    }

    /// A one-shot reminder `minutes` from now.
    #[command]
    fn once(&mut self, turn: &mut Turn<Self>, key: String, minutes: i64) {
        turn.schedule(turn.now() + TimeDelta::minutes(minutes), key.clone())
            .ring(key);
    }

    /// `count` recurring reminders every `minutes` (keys `k0`, `k1`, ..).
    #[command]
    fn many(&mut self, turn: &mut Turn<Self>, count: usize, minutes: i64) {
        for index in 0..count {
            let key = format!("k{index}");
            turn.schedule_every(TimeDelta::minutes(minutes), key.clone())
                .missed(Missed::Latest)
                .ring(key);
        }
    }

    /// An hourly reminder (Missed::All) whose arguments carry `payload`.
    #[command]
    fn every_big(&mut self, turn: &mut Turn<Self>, payload: String) {
        turn.schedule_every(TimeDelta::hours(1), "big")
            .missed(Missed::All)
            .ring(payload);
    }

    #[command]
    fn plain(&mut self, label: String) {
        self.rang.push((label, DateTime::<Utc>::UNIX_EPOCH));
    }

    #[query]
    fn rang(&self) -> Vec<(String, DateTime<Utc>)> {
        self.rang.clone()
    }

    #[reminder]
    fn ring(&mut self, turn: &mut Turn<Self>, label: String) {
        self.rang
            .push((label, turn.scheduled_at().expect("a fired reminder")));
    }
}

/// A builder on the harness's database and clock with [`Bell`].
async fn bells(harness: &Harness) -> solid_objects::Builder {
    harness.builder().await.actor::<Bell>()
}

/// Whether the case runs here: the rows it writes by hand are spelled for SQLite.
fn on_sqlite(harness: &Harness) -> bool {
    support::only_on(
        harness,
        Backend::Sqlite,
        "the bad rows are written in SQLite's types",
    )
}

async fn raw_sqlite(path: &std::path::Path) -> sqlx::SqlitePool {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(Duration::from_secs(10));
    sqlx::SqlitePool::connect_with(options).await.unwrap()
}

/// An actor has an hourly reminder (Missed::All) and a one-shot due at 1h30. After an outage
/// of 3h30 one batch fires both. The mailbox receives hourly@1h, hourly@2h, hourly@3h,
/// then once@1h30: the one-shot that was due at 1h30 rings after the 3h occurrence. The
/// actor sees time go backwards (scheduled_at 3h then 1h30).
async fn occurrences_ring_in_scheduled_order(runtime: &Runtime, clock: &ManualClock) {
    let bell = runtime.reference::<Bell>("ordered");
    let start = clock.now();
    bell.every("hourly", 60, true).await.unwrap();
    bell.once("once", 90).await.unwrap();
    clock.advance(Duration::from_secs(3 * 3600 + 30 * 60));
    runtime.testing().run_due_reminders().await.unwrap();
    let rang: Vec<(String, DateTime<Utc>)> = bell.rang().await.unwrap();
    let times: Vec<i64> = rang
        .iter()
        .map(|(_, at)| (*at - start).num_minutes())
        .collect();
    let mut sorted = times.clone();
    sorted.sort_unstable();
    assert_eq!(
        times, sorted,
        "one actor's fired occurrences ring in the order they were scheduled: {rang:?}"
    );
}

#[tokio::test]
async fn occurrences_of_one_actor_ring_in_scheduled_order() {
    let harness = Harness::new();
    let clock = harness.clock.clone();
    let runtime = bells(&harness).await.start().await.unwrap();
    occurrences_ring_in_scheduled_order(&runtime, &clock).await;
    runtime.close().await;
}

/// Inserts a reminder row the runtime cannot decode (arguments stored as a BLOB, as another
/// program or a bad migration could leave it) that is due earliest of all.
async fn poison(path: &std::path::Path) {
    let pool = raw_sqlite(path).await;
    sqlx::query(
        "INSERT INTO solid_reminders (actor_type, actor_id, name, key, due_at, arguments,
             incarnation, every_micros, missed)
         VALUES ('Bell', 'poisoned', 'ring', 'bad', 0, X'00FF', 1, NULL, NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn a_poison_reminder_row_does_not_stop_other_reminders_on_sqlite() {
    let harness = Harness::new();
    if !on_sqlite(&harness) {
        return;
    }
    let path = harness.path();
    let clock = harness.clock.clone();
    let runtime = bells(&harness).await.start().await.unwrap();
    let healthy = runtime.reference::<Bell>("healthy");
    healthy.once("soon", 1).await.unwrap();
    poison(&path).await;
    clock.advance(Duration::from_secs(120));
    let mut errors = Vec::new();
    for _ in 0..5 {
        if let Err(error) = runtime.testing().run_due_reminders().await {
            errors.push(error.to_string());
        }
    }
    let rang = healthy.rang().await.unwrap();
    assert_eq!(
        rang.len(),
        1,
        "a healthy reminder fires despite one bad row; every pass failed instead: {errors:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_poison_reminder_row_does_not_stop_the_workers_running_messages_on_sqlite() {
    let harness = Harness::new();
    if !on_sqlite(&harness) {
        return;
    }
    let path = harness.path();
    let runtime = bells(&harness).await.workers(1).start().await.unwrap();
    poison(&path).await;
    let running = runtime.clone();
    let workers = tokio::spawn(async move { running.run().await });
    let other = runtime.reference::<Bell>("unrelated");
    other.enqueue().plain("hello").await.unwrap();
    // Read the message's status from the file (a query would run the mailbox itself).
    let pool = raw_sqlite(&path).await;
    let ran = support::eventually(Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            let done: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM solid_messages
                 WHERE actor_id = 'unrelated' AND status = 'completed'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            done == 1
        }
    })
    .await;
    let status: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, attempts FROM solid_messages WHERE actor_id = 'unrelated'")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(
        ran,
        "a message sent to an unrelated actor is run by the workers within 10 s although one \
         reminder row is bad; its row after 10 s: {status:?}"
    );
    runtime.shutdown();
    let _ = workers.await;
}

/// What firing did with an hourly Missed::All reminder whose row `tamper` (SQL) changed:
/// its result, the rows left, the row's `due_at` before and after, and what rang.
struct Tampered {
    fired: Result<usize, Error>,
    left: i64,
    due_at: (i64, i64),
    rang: Vec<(String, DateTime<Utc>)>,
}

async fn fire_tampered(harness: &Harness, tamper: &str) -> Tampered {
    let path = harness.path();
    let clock = harness.clock.clone();
    let runtime = bells(harness).await.start().await.unwrap();
    let bell = runtime.reference::<Bell>("tampered");
    bell.every("hourly", 60, true).await.unwrap();
    let pool = raw_sqlite(&path).await;
    sqlx::query(tamper).execute(&pool).await.unwrap();
    let due_at = || async {
        sqlx::query_scalar("SELECT COALESCE(MAX(due_at), 0) FROM solid_reminders")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before: i64 = due_at().await;
    clock.advance(Duration::from_secs(3 * 3600 + 60));
    let fired = runtime
        .testing()
        .run_due_reminders()
        .await
        .map(|ran| ran.occurrences_fired);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM solid_reminders")
        .fetch_one(&pool)
        .await
        .unwrap();
    let after: i64 = due_at().await;
    pool.close().await;
    let rang = bell.rang().await.unwrap();
    runtime.close().await;
    Tampered {
        fired,
        left,
        due_at: (before, after),
        rang,
    }
}

/// A recurring reminder whose stored interval is negative (a bad row): firing treated it as
/// a one-shot, rang it once and deleted it, instead of reporting the row and changing
/// nothing.
#[tokio::test]
async fn a_reminder_with_a_negative_interval_is_an_error_not_a_deletion_on_sqlite() {
    let harness = Harness::new();
    if !on_sqlite(&harness) {
        return;
    }
    let tampered = fire_tampered(
        &harness,
        "UPDATE solid_reminders SET every_micros = -3600000000",
    )
    .await;
    assert!(
        tampered.fired.is_err() && tampered.left == 1 && tampered.rang.is_empty(),
        "a bad stored interval gives an error and changes nothing: fired {:?}, reminders \
         left {}, rang {:?}",
        tampered.fired,
        tampered.left,
        tampered.rang
    );
}

/// A recurring reminder whose stored `missed` is not one the runtime writes ('ALL'): firing
/// read it as Missed::Latest, dropped the missed occurrences and moved the row on, instead
/// of reporting the row and changing nothing.
#[tokio::test]
async fn a_reminder_with_an_unknown_missed_policy_is_an_error_on_sqlite() {
    let harness = Harness::new();
    if !on_sqlite(&harness) {
        return;
    }
    let tampered = fire_tampered(&harness, "UPDATE solid_reminders SET missed = 'ALL'").await;
    let (before, after) = tampered.due_at;
    assert!(
        tampered.fired.is_err() && after == before && tampered.rang.is_empty(),
        "a missed policy the runtime cannot read gives an error and changes nothing: fired \
         {:?}, due_at moved by {} h, rang {:?}",
        tampered.fired,
        (after - before) / 3_600_000_000,
        tampered.rang
    );
}

async fn many_recurring_move(runtime: &Runtime, clock: &ManualClock, count: usize) {
    let bell = runtime.reference::<Bell>("many");
    bell.many(count, 60).await.unwrap();
    let start = clock.now();
    clock.advance(Duration::from_secs(3600 + 60));
    let fired = runtime.testing().run_due_reminders().await.unwrap();
    assert_eq!(fired.occurrences_fired, count);
    assert_eq!(bell.rang().await.unwrap().len(), count);
    let reminders = bell.reminders().await.unwrap();
    assert_eq!(reminders.len(), count);
    assert!(reminders
        .iter()
        .all(|reminder| reminder.due_at == start + TimeDelta::hours(2)));
}

#[tokio::test]
async fn many_recurring_reminders_move_in_one_batch() {
    let harness = Harness::new();
    let clock = harness.clock.clone();
    let runtime = bells(&harness).await.start().await.unwrap();
    many_recurring_move(&runtime, &clock, 300).await;
    runtime.close().await;
}

/// A builder on `database` (the harness's backend) with the harness's clock, allowing every
/// call: one of several runtimes on one database.
fn allowing_on(harness: &Harness, database: &str) -> solid_objects::Builder {
    harness
        .backend()
        .store_at(database)
        .clock(harness.clock.clone())
        .policy(AllowAll)
}

async fn fire_twice_at_once(builder: impl Fn() -> solid_objects::Builder, clock: &ManualClock) {
    let owner = builder().actor::<Bell>().start().await.unwrap();
    for actor in 0..4 {
        owner
            .reference::<Bell>(format!("b{actor}"))
            .many(100, 7)
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(3 * 3600));
    let (a, b) = (
        builder().start().await.unwrap(),
        builder().start().await.unwrap(),
    );
    let barrier = Arc::new(Barrier::new(2));
    let fire = |runtime: Runtime, barrier: Arc<Barrier>| async move {
        barrier.wait().await;
        runtime
            .testing()
            .run_due_reminders()
            .await
            .map(|ran| ran.occurrences_fired)
    };
    let (fa, fb) = tokio::join!(
        tokio::spawn(fire(a.clone(), barrier.clone())),
        tokio::spawn(fire(b.clone(), barrier.clone()))
    );
    let (fa, fb) = (fa.unwrap().unwrap(), fb.unwrap().unwrap());
    assert_eq!(
        fa + fb,
        4 * 100,
        "each due reminder fired by exactly one runtime"
    );
    owner.testing().drain().await.unwrap();
    for actor in 0..4 {
        let rang = owner
            .reference::<Bell>(format!("b{actor}"))
            .rang()
            .await
            .unwrap();
        assert_eq!(rang.len(), 100, "b{actor}: {fa} + {fb}");
    }
    a.close().await;
    b.close().await;
    owner.close().await;
}

#[tokio::test]
async fn two_runtimes_firing_at_once_fire_each_occurrence_once() {
    let harness = Harness::new();
    let database = harness.database().await;
    let clock = harness.clock.clone();
    let builder = || allowing_on(&harness, &database);
    fire_twice_at_once(builder, &clock).await;
}

/// 200 recurring reminders are due; one runtime fires them while the owner's turn re-arms all
/// of them a day ahead at the same moment. Whichever commits last, the turn's schedule must
/// stand: the firing must not move a reminder the turn re-armed back to its next occurrence.
#[tokio::test]
async fn a_turn_rearming_while_reminders_fire_keeps_its_schedule() {
    let harness = Harness::new();
    let database = harness.database().await;
    let clock = harness.clock.clone();
    let builder = || allowing_on(&harness, &database);
    let owner = builder()
        .actor::<Bell>()
        .sync_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap();
    // The owner's workers run the fired messages, so the re-arming call is not stuck behind
    // them (they may fire reminders too).
    let workers = run_workers(&owner);
    let firing = builder().start().await.unwrap();
    let bell = owner.reference::<Bell>("rearmed");
    for _ in 0..2 {
        bell.many(200, 7).await.unwrap();
        clock.advance(Duration::from_secs(3600));
        let barrier = Arc::new(Barrier::new(2));
        let (fire_barrier, arm_barrier) = (barrier.clone(), barrier.clone());
        let fire = {
            let firing = firing.clone();
            tokio::spawn(async move {
                fire_barrier.wait().await;
                firing.testing().run_due_reminders().await.unwrap()
            })
        };
        let arm = {
            let bell = bell.clone();
            tokio::spawn(async move {
                arm_barrier.wait().await;
                bell.many(200, 24 * 60).await.unwrap();
            })
        };
        let (fired, armed) = tokio::join!(fire, arm);
        let (_fired, ()) = (fired.unwrap(), armed.unwrap());
        let expected = clock.now() + TimeDelta::hours(24);
        let reminders = bell.reminders().await.unwrap();
        let wrong: Vec<_> = reminders
            .iter()
            .filter(|reminder| reminder.due_at != expected)
            .collect();
        assert!(
            wrong.is_empty(),
            "{} of 200 lost the turn's schedule",
            wrong.len()
        );
    }
    owner.shutdown();
    let _ = workers.await;
    owner.close().await;
    firing.close().await;
}
