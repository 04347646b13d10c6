//! The figures behind the operators' charts on every backend: each minute's completed,
//! rejected and dead messages and failed attempts, what was waiting at its end (ready
//! messages, due reminders, pending effects) and how late reminders ran, for the whole
//! database and for one actor; an idle window says so; and folding the minutes that ended
//! into the tallies changes no figure. Time moves only through the manual clock (the
//! charts' speed on a million finished messages is measured by `examples/bench`).

use crate::support;

use std::time::Duration;

use solid_objects::admin::{
    Activity, ActivityPoint, ActorActivity, DeadLetterFilter, EffectFilter, Window,
};
use solid_objects::prelude::*;
use solid_objects::{GroupCommit, RetryPolicy};
use support::actors::Noted;
use support::charts::{
    completed_each_minute_of_the_hour, noon, spawned_carry, Porter, Station, SLOW_TURN,
};
use support::service::Service;
use support::Harness;

/// A runtime on the harness's database of stations, whose turns have two attempts, the
/// second a second after the first failed.
async fn runtime(harness: &Harness) -> Runtime {
    harness
        .builder()
        .await
        .actor::<Station>()
        .effect(|_: Noted, _| async { Ok(()) })
        .retry(
            RetryPolicy::new()
                .base_delay(Duration::from_secs(1))
                .max_attempts(2),
        )
        .start()
        .await
        .expect("starts")
}

/// A runtime of stations on the harness's database at 12:00:10, whose noted parcels go to
/// `courier`.
async fn stations_at_noon(harness: &Harness, courier: &Service) -> Runtime {
    harness.clock.set(noon(0, 10));
    harness
        .builder()
        .await
        .actor::<Station>()
        .effect(courier.handler::<Noted>())
        .start()
        .await
        .expect("starts")
}

/// The point of a day's chart for the half hour from noon.
fn noons_half_hour(day: &Activity) -> &ActivityPoint {
    day.points
        .iter()
        .find(|point| point.at == noon(0, 0))
        .expect("noon's half hour is in the day")
}

/// The five minutes from noon of a window's points, each picked by `pick`.
fn from_noon<T>(activity: &Activity, pick: impl Fn(&ActivityPoint) -> T) -> Vec<T> {
    minutes_from_noon(activity, 5, pick)
}

#[tokio::test]
async fn each_minute_counts_what_finished_failed_and_waited_and_how_late_reminders_ran() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    let testing = runtime.testing();

    // 12:00: three turns, and three rings planned for 12:01:30, 12:02:00 and 12:02:30.
    for _ in 0..3 {
        station("s1").work().await.unwrap();
    }
    for at in [noon(1, 30), noon(2, 0), noon(2, 30)] {
        station("s2").plan(at.timestamp()).await.unwrap();
    }
    // 12:01: a refusal, a parcel to post, and two turns queued for later.
    harness.clock.set(noon(1, 10));
    station("s1").refuse().await.unwrap_err();
    station("s2").post("p-1".to_owned()).await.unwrap();
    for _ in 0..2 {
        station("s3").enqueue().work().await.unwrap();
    }
    // 12:02: the rings fire 70, 40 and 10 seconds late, and the queued turns run.
    harness.clock.set(noon(2, 40));
    let ran = testing.run_due_reminders().await.unwrap();
    assert_eq!((ran.occurrences_fired, ran.completed), (3, 5));
    // 12:03: a stumble fails its first attempt; the parcel is posted.
    harness.clock.set(noon(3, 10));
    station("s4").enqueue().stumble().await.unwrap();
    assert_eq!(testing.drain().await.unwrap().failed.len(), 1);
    assert_eq!(testing.run_effects().await.unwrap(), 1);
    // 12:04: its second attempt fails too, and it is a dead letter.
    harness.clock.set(noon(4, 10));
    assert_eq!(testing.drain().await.unwrap().dead.len(), 1);

    let admin = runtime.admin();
    let activity = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(activity.now, noon(4, 10));
    assert_eq!(activity.points.len(), 15);
    assert_eq!(activity.points.last().unwrap().at, noon(4, 0));
    assert!(
        activity.points[..10]
            .iter()
            .all(|point| point.finished.is_none() && point.backlog.is_none()),
        "nothing before noon: {:?}",
        &activity.points[..10]
    );
    let finished = from_noon(&activity, |point| {
        let f = point.finished;
        (f.completed, f.rejected, f.failed_attempts, f.dead)
    });
    assert_eq!(
        finished,
        [
            (6, 0, 0, 0),
            (1, 1, 0, 0),
            (5, 0, 0, 0),
            (0, 0, 1, 0),
            (0, 0, 1, 1)
        ]
    );
    let waiting = from_noon(&activity, |point| {
        let b = point.backlog;
        (b.ready_messages, b.due_reminders, b.pending_effects)
    });
    assert_eq!(
        waiting,
        [(0, 0, 0), (2, 1, 1), (0, 0, 1), (1, 0, 0), (0, 0, 0)]
    );
    let late = from_noon(&activity, |point| {
        point
            .lateness
            .map(|late| (late.reminders, late.p50_ms, late.p99_ms))
    });
    assert_eq!(late, [None, None, Some((3, 40_000, 70_000)), None, None]);

    // The same minutes in the hour; the day adds them up in its half hour.
    let hour = admin.activity(Window::Hour).await.unwrap();
    assert_eq!(hour.points.len(), 60);
    assert_eq!(
        from_noon(&hour, |point| point.finished),
        from_noon(&activity, |point| point.finished)
    );
    let day = admin.activity(Window::Day).await.unwrap();
    assert_eq!(day.points.len(), 48);
    let half_hour = noons_half_hour(&day);
    let f = half_hour.finished;
    assert_eq!(
        (f.completed, f.rejected, f.failed_attempts, f.dead),
        (12, 1, 2, 1)
    );
    assert_eq!(half_hour.backlog.ready_messages, 0);

    // One actor's own minutes.
    let s4 = admin
        .actor_activity("Station", "s4", Window::FifteenMinutes)
        .await
        .unwrap();
    let s4_minutes: Vec<(i64, i64)> = s4.points[10..]
        .iter()
        .map(|point| (point.finished.failed_attempts, point.finished.dead))
        .collect();
    assert_eq!(s4_minutes, [(0, 0), (0, 0), (0, 0), (1, 0), (1, 1)]);
    let s1 = admin
        .actor_activity("Station", "s1", Window::FifteenMinutes)
        .await
        .unwrap();
    let s1_minutes: Vec<(i64, i64)> = s1.points[10..]
        .iter()
        .map(|point| (point.finished.completed, point.finished.rejected))
        .collect();
    assert_eq!(s1_minutes, [(3, 0), (0, 1), (0, 0), (0, 0), (0, 0)]);
    assert!(!s1.is_idle());

    // Every read is audited as the charts' own action.
    let audit = admin.audit_log(6).await.unwrap();
    let actions: Vec<(&str, &str)> = audit[1..]
        .iter()
        .map(|event| (event.action.as_str(), event.resource.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("activity", "Station/s1"),
            ("activity", "Station/s4"),
            ("activity", "database"),
            ("activity", "database"),
            ("activity", "database"),
        ]
    );
    assert_eq!(audit[3].details, Some(json!({ "window": "24h" })));
    runtime.close().await;
}

/// The `count` minutes from noon of a window's points, each picked by `pick`.
fn minutes_from_noon<T>(
    activity: &Activity,
    count: usize,
    pick: impl Fn(&ActivityPoint) -> T,
) -> Vec<T> {
    let first = activity
        .points
        .iter()
        .position(|point| point.at == noon(0, 0))
        .expect("noon is in the window");
    activity.points[first..first + count]
        .iter()
        .map(pick)
        .collect()
}

#[tokio::test]
async fn a_reminder_whose_dead_letter_was_retried_was_not_due_while_it_lay_dead() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let bell = runtime.reference::<Station>("bell");
    let testing = runtime.testing();
    // A chime due at 12:01 fires at 12:01:10 and fails for good: a dead letter.
    bell.plan_chime(noon(1, 0).timestamp()).await.unwrap();
    harness.clock.set(noon(1, 10));
    let ran = testing.run_due_reminders().await.unwrap();
    assert_eq!((ran.occurrences_fired, ran.dead.len()), (1, 1));
    // 12:05: the bell is fixed, and an operator retries the dead letter, which runs.
    harness.clock.set(noon(5, 10));
    bell.fix().await.unwrap();
    let admin = runtime.admin();
    let dead = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    assert_eq!(dead.len(), 1);
    admin.retry_dead_letter(dead[0].message_id).await.unwrap();
    assert_eq!(testing.drain().await.unwrap().completed, 1);

    let activity = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&activity, 6, |point| point.backlog.due_reminders),
        [0, 0, 0, 0, 0, 0],
        "the reminder fired at 12:01:10: at no minute's end was it due and unfired"
    );
    assert_eq!(
        minutes_from_noon(&activity, 6, |point| point.lateness.map(|late| (
            late.reminders,
            late.p50_ms,
            late.p99_ms
        ))),
        [None, Some((1, 10_000, 10_000)), None, None, None, None],
        "one reminder ran, 10 s late; the operator's retry is not a reminder running late"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_reminder_that_fired_late_was_due_until_it_fired_though_its_actor_was_destroyed_before_it_ran(
) {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let tower = runtime.reference::<Station>("tower");
    let testing = runtime.testing();
    // A ring due at 12:01; no worker fires it until 12:03:10, behind a shut-down queued at
    // 12:02:10, which destroys the station before the ring runs.
    tower.plan(noon(1, 0).timestamp()).await.unwrap();
    harness.clock.set(noon(2, 10));
    tower.enqueue().shut().await.unwrap();
    harness.clock.set(noon(3, 10));
    let ran = testing.run_due_reminders().await.unwrap();
    assert_eq!((ran.occurrences_fired, ran.completed), (1, 1));
    harness.clock.set(noon(4, 10));

    let activity = runtime
        .admin()
        .activity(Window::FifteenMinutes)
        .await
        .unwrap();
    let waiting = from_noon(&activity, |point| {
        (point.backlog.ready_messages, point.backlog.due_reminders)
    });
    assert_eq!(
        waiting,
        [(0, 0), (0, 1), (1, 1), (0, 0), (0, 0)],
        "the ring was due from 12:01 until it fired at 12:03:10"
    );
    let late = from_noon(&activity, |point| point.lateness);
    assert!(
        late.iter().all(Option::is_none),
        "no reminder's turn ran: {late:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_retried_after_it_died_was_not_pending_while_it_lay_dead() {
    let harness = Harness::new();
    let courier = Service::away("the courier is away");
    let runtime = stations_at_noon(&harness, &courier).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    let testing = runtime.testing();
    // A parcel emitted at 12:00:10 dies at 12:00:20; an operator retries it at 12:05:10, and
    // it is posted at 12:06:10.
    station("s1").post("p-1".to_owned()).await.unwrap();
    harness.clock.set(noon(0, 20));
    assert_eq!(testing.run_effects().await.unwrap(), 1);
    let admin = runtime.admin();
    let dead = admin
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    harness.clock.set(noon(5, 10));
    assert!(admin.retry_effect(dead[0].id).await.unwrap());
    harness.clock.set(noon(6, 10));
    courier.come_back();
    assert_eq!(testing.run_effects().await.unwrap(), 1);

    let activity = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&activity, 7, |point| point.backlog.pending_effects),
        [0, 0, 0, 0, 0, 1, 0],
        "pending from its emission to its death, and from the retry until it was posted"
    );
    runtime.close().await;
}

#[tokio::test]
async fn what_waits_now_is_counted_now_after_the_clock_stepped_back() {
    let harness = Harness::new();
    harness.clock.set(noon(5, 10));
    let runtime = runtime(&harness).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    // Enqueued at 12:05:10, and a parcel emitted then; the clock then steps back two minutes
    // (a host's clock corrected), and both still wait.
    station("s1").enqueue().work().await.unwrap();
    station("s2").post("p-1".to_owned()).await.unwrap();
    harness.clock.set(noon(3, 10));
    let admin = runtime.admin();
    let status = admin.status().await.unwrap();
    let ready = status
        .messages
        .iter()
        .find(|(name, _)| name == "ready")
        .map(|(_, count)| *count);
    assert_eq!(ready, Some(1), "the status counts it: {status:?}");

    let activity = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(activity.points.last().unwrap().at, noon(3, 0));
    let now = activity.points.last().unwrap().backlog;
    assert_eq!(
        (now.ready_messages, now.pending_effects),
        (1, 1),
        "a message and an effect wait now, whatever time they were stored at"
    );
    assert!(!activity.is_idle(), "work waits: {activity:?}");
    runtime.close().await;
}

#[tokio::test]
async fn a_reminder_is_never_early_when_the_clock_stepped_back_before_its_turn() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    let admin = runtime.admin();
    let testing = runtime.testing();
    // A ring due at 12:05 fires at 12:05:10 while its station is paused; the clock then steps
    // back two minutes, the station is resumed, and the ring's turn ends at 12:03:10.
    station("s1").plan(noon(5, 0).timestamp()).await.unwrap();
    assert!(admin.pause("Station", "s1").await.unwrap());
    harness.clock.set(noon(5, 10));
    let fired = testing.run_due_reminders().await.unwrap();
    assert_eq!((fired.occurrences_fired, fired.turns), (1, 0));
    harness.clock.set(noon(3, 10));
    assert!(admin.resume("Station", "s1").await.unwrap());
    assert_eq!(testing.drain().await.unwrap().completed, 1);

    let activity = admin.activity(Window::FifteenMinutes).await.unwrap();
    let late = activity
        .points
        .iter()
        .find_map(|point| point.lateness)
        .expect("the ring ran in the window");
    assert_eq!(late.reminders, 1);
    assert!(
        late.p50_ms >= 0 && late.p99_ms >= 0,
        "a reminder runs after it is due, never before: {late:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_overdue_reminder_deleted_before_it_fired_was_due_until_then() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let tower = runtime.reference::<Station>("tower");
    // A ring due at 12:01 that no worker fires; at 12:03:10 the station is destroyed, and
    // the ring with it.
    tower.plan(noon(1, 0).timestamp()).await.unwrap();
    harness.clock.set(noon(2, 10));
    let admin = runtime.admin();
    let before = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&before, 3, |point| point.backlog.due_reminders),
        [0, 1, 1],
        "while it waits, the ring is due from 12:01"
    );
    harness.clock.set(noon(3, 10));
    tower.shut().await.unwrap();
    harness.clock.set(noon(4, 10));

    let after = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        from_noon(&after, |point| point.backlog.due_reminders),
        [0, 1, 1, 0, 0],
        "the minutes that passed keep what was due in them"
    );
    runtime.close().await;
}

/// Every window of the overview and of one actor's page, read now.
async fn every_window(runtime: &Runtime, actor: &str) -> Vec<(Activity, ActorActivity)> {
    let admin = runtime.admin();
    let mut windows = Vec::new();
    for window in Window::ALL {
        windows.push((
            admin.activity(window).await.unwrap(),
            admin
                .actor_activity("Station", actor, window)
                .await
                .unwrap(),
        ));
    }
    windows
}

#[tokio::test]
async fn folding_the_minutes_that_ended_into_the_tallies_changes_no_figure() {
    let harness = Harness::new();
    let courier = Service::away("the courier is away");
    let runtime = stations_at_noon(&harness, &courier).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    let testing = runtime.testing();
    let admin = runtime.admin();
    // 12:00: turns, a chime due at 12:01 that dies, a ring due at 12:02 that never fires, and
    // a parcel that dies at 12:00:20.
    for _ in 0..3 {
        station("s1").work().await.unwrap();
    }
    station("bell")
        .plan_chime(noon(1, 0).timestamp())
        .await
        .unwrap();
    station("tower").plan(noon(2, 0).timestamp()).await.unwrap();
    station("s1").post("p-1".to_owned()).await.unwrap();
    harness.clock.set(noon(0, 20));
    assert_eq!(testing.run_effects().await.unwrap(), 1);
    harness.clock.set(noon(1, 10));
    let ran = testing.run_due_reminders().await.unwrap();
    assert_eq!((ran.occurrences_fired, ran.dead.len()), (1, 1));
    // 12:04: the minutes to 12:02 are folded (the first parcel's death among them); a second
    // parcel dies at 12:04:30, after the fold.
    harness.clock.set(noon(4, 10));
    testing.upkeep().await.unwrap();
    station("s1").refuse().await.unwrap_err();
    station("s1").post("p-2".to_owned()).await.unwrap();
    harness.clock.set(noon(4, 30));
    assert_eq!(testing.run_effects().await.unwrap(), 1);
    // 12:05: the bell is fixed and its dead letter retried; both parcels are retried.
    harness.clock.set(noon(5, 10));
    station("bell").fix().await.unwrap();
    let dead = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    admin.retry_dead_letter(dead[0].message_id).await.unwrap();
    assert_eq!(testing.drain().await.unwrap().completed, 1);
    let dead_effects = admin
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead))
        .await
        .unwrap();
    assert_eq!(dead_effects.len(), 2);
    for effect in &dead_effects {
        assert!(admin.retry_effect(effect.id).await.unwrap());
    }
    // 12:06: the parcels are posted, and the tower is shut with its overdue ring.
    harness.clock.set(noon(6, 10));
    courier.come_back();
    assert_eq!(testing.run_effects().await.unwrap(), 2);
    station("tower").shut().await.unwrap();
    harness.clock.set(noon(7, 10));
    testing.upkeep().await.unwrap();

    // 12:09: the minutes to 12:05 are folded, 12:05 to 12:07 are read from the rows.
    harness.clock.set(noon(9, 10));
    let unfolded = every_window(&runtime, "s1").await;
    let hour = &unfolded[0].0;
    assert_eq!(
        minutes_from_noon(hour, 9, |point| point.backlog.due_reminders),
        [0, 0, 1, 1, 1, 1, 0, 0, 0],
        "the ring was due from 12:02 until the tower was shut at 12:06:10"
    );
    assert_eq!(
        minutes_from_noon(hour, 9, |point| point.backlog.pending_effects),
        [0, 0, 0, 0, 0, 2, 0, 0, 0],
        "the parcels were pending only from their retry at 12:05:10 to 12:06:10"
    );
    assert_eq!(
        minutes_from_noon(hour, 9, |point| {
            let f = point.finished;
            (f.completed, f.rejected, f.dead)
        }),
        [
            (6, 0, 0),
            (0, 0, 1),
            (0, 0, 0),
            (0, 0, 0),
            (1, 1, 0),
            (2, 0, 0),
            (1, 0, 0),
            (0, 0, 0),
            (0, 0, 0)
        ]
    );
    // Every minute to 12:07 folded: each window of the overview and of an actor's page is
    // what it was.
    testing.upkeep().await.unwrap();
    let pool = support::connect(&harness).await;
    let folded_until: i64 = sqlx::query_scalar("SELECT folded_until FROM solid_activity_folded")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(folded_until, noon(7, 0).timestamp_micros());
    assert_eq!(every_window(&runtime, "s1").await, unfolded);
    runtime.close().await;
}

#[tokio::test]
async fn a_window_in_which_nothing_happened_is_idle_not_a_flat_line_of_zeros() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let station = |id: &str| runtime.reference::<Station>(id);
    let admin = runtime.admin();
    let empty = admin.activity(Window::Hour).await.unwrap();
    assert!(empty.is_idle(), "{empty:?}");

    runtime.reference::<Station>("s1").work().await.unwrap();
    assert!(!admin.activity(Window::Hour).await.unwrap().is_idle());
    // Two hours on, the hour is idle again, and the day still holds the turn.
    harness.clock.set(noon(120, 10));
    assert!(admin.activity(Window::Hour).await.unwrap().is_idle());
    assert!(!admin.activity(Window::Day).await.unwrap().is_idle());
    let actor = admin
        .actor_activity("Station", "s1", Window::Hour)
        .await
        .unwrap();
    assert!(actor.is_idle());
    // A message that waits is not idle, however long it waits.
    station("s2").enqueue().work().await.unwrap();
    harness.clock.set(noon(240, 10));
    let waiting = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert!(!waiting.is_idle());
    assert!(waiting
        .points
        .iter()
        .all(|point| point.backlog.ready_messages == 1));
    runtime.close().await;
}

#[tokio::test]
#[ignore = "a known limit of the tally: replacing an overdue reminder (an upsert) tallies nothing, so the minutes it was due read 0 once it is rescheduled; only a delete tallies them"]
async fn an_overdue_reminder_rescheduled_for_later_before_it_fired_was_due_until_then() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let tower = runtime.reference::<Station>("tower");
    // The bell due at 12:01, which no worker fires; at 12:03:10 it is set for 13:00 instead.
    tower.set_bell(noon(1, 0).timestamp()).await.unwrap();
    harness.clock.set(noon(2, 10));
    let admin = runtime.admin();
    let before = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&before, 3, |point| point.backlog.due_reminders),
        [0, 1, 1],
        "while it waits, the bell is due from 12:01"
    );
    harness.clock.set(noon(3, 10));
    tower.set_bell(noon(60, 0).timestamp()).await.unwrap();
    harness.clock.set(noon(4, 10));

    let after = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        from_noon(&after, |point| point.backlog.due_reminders),
        [0, 1, 1, 0, 0],
        "the minutes that passed keep what was due in them"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_turn_that_ends_after_the_clock_stepped_back_behind_the_folded_minutes_is_counted() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let station = runtime.reference::<Station>("s1");
    let testing = runtime.testing();
    station.work().await.unwrap();
    // 12:04:10: the minutes to 12:02 are folded; then the host's clock is set back to
    // 12:01:50 (corrected), a turn ends, and the clock goes on to 12:05:10.
    harness.clock.set(noon(4, 10));
    testing.upkeep().await.unwrap();
    harness.clock.set(noon(1, 50));
    station.work().await.unwrap();
    harness.clock.set(noon(5, 10));

    let activity = runtime
        .admin()
        .activity(Window::FifteenMinutes)
        .await
        .unwrap();
    let completed = from_noon(&activity, |point| point.finished.completed);
    assert_eq!(
        completed.iter().sum::<i64>(),
        2,
        "both turns are in the charts, whatever minute the second was stamped in: {completed:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_turn_whose_handler_ran_while_its_minute_was_folded_is_counted() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let testing = runtime.testing();
    // A turn starts at 12:00:10 and its handler takes its time; meanwhile it is 12:05:10,
    // and the workers fold the minutes to 12:03.
    let station = runtime.reference::<Station>("s1");
    let slow = tokio::spawn(async move { station.work_slowly().await });
    SLOW_TURN.started.notified().await;
    harness.clock.set(noon(5, 10));
    let upkeep = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.testing().upkeep().await })
    };
    // A backend whose fold waits for the turn's transaction lets it wait a little, then the
    // handler goes on.
    let waited = support::eventually(Duration::from_secs(3), || {
        let finished = upkeep.is_finished();
        async move { finished }
    })
    .await;
    SLOW_TURN.go_on.notify_one();
    assert_eq!(slow.await.unwrap().unwrap(), 1);
    upkeep.await.unwrap().unwrap();
    testing.upkeep().await.unwrap();

    let activity = runtime
        .admin()
        .activity(Window::FifteenMinutes)
        .await
        .unwrap();
    let completed = from_noon(&activity, |point| point.finished.completed);
    assert_eq!(
        completed.iter().sum::<i64>(),
        1,
        "the turn completed (the fold {} before it committed): {completed:?}",
        if waited { "ended" } else { "waited" }
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_recurring_reminder_that_missed_occurrences_was_due_from_the_first_it_missed() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    let testing = runtime.testing();
    let admin = runtime.admin();
    // Due at 12:05:10, 12:10:10, ...: no worker fires it until 12:13, when the latest missed
    // occurrence fires.
    runtime
        .reference::<Station>("clock")
        .ring_every_five_minutes()
        .await
        .unwrap();
    harness.clock.set(noon(12, 50));
    let before = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&before, 12, |point| point.backlog.due_reminders),
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1],
        "while it waits, the ring is due from 12:05:10"
    );
    harness.clock.set(noon(13, 0));
    let fired = testing.run_due_reminders().await.unwrap();
    assert_eq!(fired.occurrences_fired, 1);
    harness.clock.set(noon(14, 10));

    let after = admin.activity(Window::FifteenMinutes).await.unwrap();
    assert_eq!(
        minutes_from_noon(&after, 14, |point| point.backlog.due_reminders),
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0],
        "the minutes that passed keep what was due in them"
    );
    // Once its turn ran (whenever a worker took it) and the workers folded the minute it
    // ended in, the figures stay.
    testing.drain().await.unwrap();
    harness.clock.set(noon(17, 10));
    testing.upkeep().await.unwrap();
    let folded = admin.activity(Window::Hour).await.unwrap();
    assert_eq!(
        minutes_from_noon(&folded, 14, |point| point.backlog.due_reminders),
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0],
        "folded, the minutes keep what was due in them"
    );
    let completed: i64 = folded
        .points
        .iter()
        .map(|point| point.finished.completed)
        .sum();
    assert_eq!(completed, 2, "the command that set the ring, and the ring");
    runtime.close().await;
}

#[tokio::test]
async fn a_dead_letter_kept_past_the_retention_of_finished_messages_stays_in_the_days_chart() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    // Finished messages are kept an hour; dead letters, for operators, the default 30 days.
    let runtime = harness
        .builder()
        .await
        .actor::<Station>()
        .limits(solid_objects::Limits::new().retention(Duration::from_secs(3600)))
        .retry(
            RetryPolicy::new()
                .base_delay(Duration::from_secs(1))
                .max_attempts(2),
        )
        .start()
        .await
        .expect("starts");
    let testing = runtime.testing();
    let admin = runtime.admin();
    // 12:00: a stumble fails twice and is a dead letter.
    runtime
        .reference::<Station>("s4")
        .enqueue()
        .stumble()
        .await
        .unwrap();
    assert_eq!(testing.drain().await.unwrap().failed.len(), 1);
    harness.clock.set(noon(0, 20));
    assert_eq!(testing.drain().await.unwrap().dead.len(), 1);
    let day_of = |activity: &Activity| noons_half_hour(activity).finished.dead;
    harness.clock.set(noon(30, 10));
    assert_eq!(day_of(&admin.activity(Window::Day).await.unwrap()), 1);

    // 14:30: the upkeep folds the minutes and prunes what finished over an hour ago.
    harness.clock.set(noon(150, 10));
    testing.upkeep().await.unwrap();
    let dead = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    assert_eq!(dead.len(), 1, "the dead letter is kept for operators");
    assert_eq!(
        day_of(&admin.activity(Window::Day).await.unwrap()),
        1,
        "the day's chart still counts the dead letter the operators still see"
    );
    runtime.close().await;
}

/// A runtime of stations that keeps finished messages for `retention`.
async fn keeping_finished_messages(harness: &Harness, retention: Duration) -> Runtime {
    harness
        .builder()
        .await
        .actor::<Station>()
        .limits(solid_objects::Limits::new().retention(retention))
        .start()
        .await
        .expect("starts")
}

#[tokio::test]
async fn a_turn_not_folded_yet_stays_in_the_chart_when_retention_is_shorter_than_the_fold_lag() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    // Finished messages are kept a minute: shorter than the two minutes after which the
    // workers fold a minute into the tallies.
    let runtime = keeping_finished_messages(&harness, Duration::from_secs(60)).await;
    let admin = runtime.admin();
    // 12:00:10: a work completes.
    runtime.reference::<Station>("s5").work().await.unwrap();
    // 12:01:30: the chart counts it in its minute.
    harness.clock.set(noon(1, 30));
    let completed =
        |activity: &Activity| minutes_from_noon(activity, 2, |point| point.finished.completed);
    assert_eq!(
        completed(&admin.activity(Window::FifteenMinutes).await.unwrap()),
        [1, 0]
    );
    // The upkeep folds the minutes that ended two minutes ago (none yet: 12:00 ended 90
    // seconds ago), then prunes what finished over a minute ago.
    runtime.testing().upkeep().await.unwrap();
    assert_eq!(
        completed(&admin.activity(Window::FifteenMinutes).await.unwrap()),
        [1, 0],
        "the minute that passed keeps the turn the chart counted in it"
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_operators_prune_keeps_the_turns_the_days_chart_counts_that_no_worker_folded_yet() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    // Finished messages are kept an hour; no worker runs (nor folds) until the operator
    // prunes.
    let runtime = keeping_finished_messages(&harness, Duration::from_secs(3600)).await;
    let admin = runtime.admin();
    // 12:00:10: a work completes.
    runtime.reference::<Station>("s6").work().await.unwrap();
    let day_of = |activity: &Activity| noons_half_hour(activity).finished.completed;
    // 14:30: the day's chart counts it in noon's half hour; the operator prunes what
    // finished over an hour ago.
    harness.clock.set(noon(150, 10));
    assert_eq!(day_of(&admin.activity(Window::Day).await.unwrap()), 1);
    let pruned = admin.prune().await.unwrap();
    assert_eq!(pruned.finished_messages, 1, "{pruned:?}");
    assert_eq!(
        day_of(&admin.activity(Window::Day).await.unwrap()),
        1,
        "the day's chart keeps the turn it counted: retention never prunes the last 25 hours' tallies"
    );
    runtime.close().await;
}

/// Another program of the application on the harness's database: a transaction that wrote a
/// row of its own (a ledger entry) and is still open, and the pool it came from.
async fn a_transaction_left_open(
    harness: &Harness,
) -> (sqlx::AnyPool, sqlx::Transaction<'static, sqlx::Any>) {
    let pool = support::connect(harness).await;
    sqlx::raw_sql("CREATE TABLE app_ledger (entry BIGINT)")
        .execute(&pool)
        .await
        .unwrap();
    let mut open = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO app_ledger (entry) VALUES (1)")
        .execute(&mut *open)
        .await
        .unwrap();
    (pool, open)
}

/// The fold mark, read by `pool`: every row that finished before it is in the tallies.
async fn fold_mark(pool: &sqlx::AnyPool) -> i64 {
    sqlx::query_scalar("SELECT folded_until FROM solid_activity_folded")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_transaction_another_program_left_open_holds_back_the_fold_a_minute_at_most() {
    let harness = Harness::new();
    // SQLite has one writer: a write transaction left open holds every turn, not only folds.
    if harness.backend() == support::Backend::Sqlite {
        return;
    }
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    runtime.reference::<Station>("s1").work().await.unwrap();
    // Another program began a transaction (a ledger entry) and has not ended it.
    let (pool, open) = a_transaction_left_open(&harness).await;
    // 12:05:10: the minutes to 12:03 are due to be folded (on PostgreSQL the fold is left
    // for a later pass); at 12:06:20 those to 12:04, the transaction still open.
    harness.clock.set(noon(5, 10));
    runtime.testing().upkeep().await.unwrap();
    harness.clock.set(noon(6, 20));
    runtime.testing().upkeep().await.unwrap();
    assert_eq!(
        fold_mark(&pool).await,
        noon(4, 0).timestamp_micros(),
        "a minute after they were due, the minutes that ended are folded though another \
         program's transaction is open"
    );
    open.rollback().await.unwrap();
    pool.close().await;
    runtime.close().await;
}

#[tokio::test]
async fn a_transaction_another_program_left_open_holds_back_a_prune_a_minute_at_most() {
    let harness = Harness::new();
    // SQLite has one writer: a write transaction left open holds every turn, not only prunes.
    if harness.backend() == support::Backend::Sqlite {
        return;
    }
    harness.clock.set(noon(0, 10));
    // Finished messages are kept an hour.
    let runtime = keeping_finished_messages(&harness, Duration::from_secs(3600)).await;
    runtime.reference::<Station>("s7").work().await.unwrap();
    // Another program began a transaction (a ledger entry) and has not ended it.
    let (pool, open) = a_transaction_left_open(&harness).await;
    // 14:30: the operator prunes what finished over an hour ago (on PostgreSQL its fold is
    // left for a later pass, and it deletes nothing yet); and again at 14:31:20.
    harness.clock.set(noon(150, 10));
    let first = runtime.admin().prune().await.unwrap();
    harness.clock.set(noon(151, 20));
    let pruned = runtime.admin().prune().await.unwrap();
    assert_eq!(
        first.finished_messages + pruned.finished_messages,
        1,
        "what retention no longer keeps goes, though another program's transaction is open: \
         {pruned:?}"
    );
    open.rollback().await.unwrap();
    pool.close().await;
    runtime.close().await;
}

/// An alarm clock whose rings are planned and cancelled by key: the reminders a turn
/// unschedules, for the charts' cases of deleted reminders.
#[actor]
#[derive(Default)]
struct Alarm {
    rang: u32,
}

#[actor]
impl Alarm {
    /// Plans a ring at `at` (seconds since the epoch) under `key`.
    #[command]
    fn plan(&mut self, turn: &mut Turn<Self>, key: String, at: i64) {
        let due = DateTime::from_timestamp(at, 0).expect("a time");
        turn.schedule(due, key).ring();
    }

    /// Cancels the ring under `key`.
    #[command]
    fn cancel(&mut self, turn: &mut Turn<Self>, key: String) {
        turn.unschedule(key).ring();
    }

    /// Cancels the ring under `key`, then fails: nothing of the turn is kept.
    #[command]
    fn cancel_and_fail(&mut self, turn: &mut Turn<Self>, key: String) -> Result<(), Failure> {
        turn.unschedule(key).ring();
        Err(Failure::permanent("the alarm is jammed"))
    }

    /// Cancels the ring under `key`, then refuses: the rejection is kept, not the cancel.
    #[command]
    fn cancel_and_refuse(&mut self, turn: &mut Turn<Self>, key: String) -> Result<(), Rejection> {
        turn.unschedule(key).ring();
        Err(reject!(jammed, "The alarm is jammed"))
    }

    /// Rings every `minutes` from now on, under the key `key`: each occurrence it missed
    /// when `catching_up`, else the latest.
    #[command]
    fn ring_every(&mut self, turn: &mut Turn<Self>, minutes: i64, key: String, catching_up: bool) {
        let missed = if catching_up {
            Missed::All
        } else {
            Missed::Latest
        };
        turn.schedule_every(TimeDelta::minutes(minutes), key)
            .missed(missed)
            .ring();
    }

    /// Destroys the alarm, and its rings with it.
    #[command]
    fn scrap(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }

    #[reminder]
    fn ring(&mut self) {
        self.rang += 1;
    }
}

/// A runtime of alarms on the harness's database, whose turns have one attempt.
async fn alarms(harness: &Harness) -> Runtime {
    harness
        .builder()
        .await
        .actor::<Alarm>()
        .retry(RetryPolicy::new().max_attempts(1))
        .start()
        .await
        .expect("starts")
}

/// `count` alarms (`<prefix>0`, `<prefix>1`, ..), each with a ring `r` due at 12:01; the
/// clock then at 12:03:10, the rings overdue.
async fn alarms_ringing_at_12_01(harness: &Harness, prefix: &str, count: usize) -> Runtime {
    let runtime = alarms(harness).await;
    let at = noon(1, 0).timestamp();
    for n in 0..count {
        let alarm = runtime.reference::<Alarm>(format!("{prefix}{n}"));
        alarm.plan("r".to_owned(), at).await.unwrap();
    }
    harness.clock.set(noon(3, 10));
    runtime
}

/// The due reminders at the end of each of the five minutes from noon, read now.
async fn due_from_noon(runtime: &Runtime) -> Vec<i64> {
    let activity = runtime
        .admin()
        .activity(Window::FifteenMinutes)
        .await
        .unwrap();
    from_noon(&activity, |point| point.backlog.due_reminders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_unscheduled_while_a_worker_fires_it_is_due_until_one_of_them_ends_it() {
    const ALARMS: usize = 12;
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms_ringing_at_12_01(&harness, "a", ALARMS).await;
    // 12:03:10: the rings are overdue; a worker fires them while each alarm cancels its own,
    // all released together.
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(ALARMS + 1));
    let mut tasks = Vec::new();
    for n in 0..ALARMS {
        let (runtime, start) = (runtime.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..n * 20 {
                tokio::task::yield_now().await;
            }
            runtime
                .reference::<Alarm>(format!("a{n}"))
                .cancel("r".to_owned())
                .await
        }));
    }
    let fire = {
        let (runtime, start) = (runtime.clone(), start.clone());
        tokio::spawn(async move {
            start.wait().await;
            runtime.testing().run_due_reminders().await
        })
    };
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let fired = fire.await.unwrap().unwrap().occurrences_fired;
    let drained = runtime.testing().drain().await.unwrap();
    assert!(drained.dead.is_empty(), "{drained:?}");
    let mut rang = 0;
    for n in 0..ALARMS {
        let alarm = runtime.reference::<Alarm>(format!("a{n}"));
        assert!(alarm.reminders().await.unwrap().is_empty());
        rang += alarm.snapshot().await.unwrap().rang;
    }
    assert_eq!(
        usize::try_from(rang).unwrap(),
        fired,
        "each fired ring rang once"
    );
    harness.clock.set(noon(4, 10));
    let due = ALARMS as i64;
    assert_eq!(
        due_from_noon(&runtime).await,
        [0, due, due, 0, 0],
        "each ring was due from 12:01 until 12:03, fired ({fired}) or cancelled"
    );
    // Once folded, the same.
    harness.clock.set(noon(7, 10));
    runtime.testing().upkeep().await.unwrap();
    assert_eq!(due_from_noon(&runtime).await, [0, due, due, 0, 0]);
    runtime.close().await;
}

#[tokio::test]
async fn a_cancel_whose_call_went_away_at_any_point_leaves_the_ring_due_until_it_is_cancelled() {
    const POINTS: usize = 60;
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms_ringing_at_12_01(&harness, "c", POINTS).await;
    // Each alarm's cancel is dropped after its call was polled `n` times (and the runtime's
    // other tasks ran in between); then each cancels for good, at the same minute.
    for n in 0..POINTS {
        let alarm = runtime.reference::<Alarm>(format!("c{n}"));
        let call = alarm.cancel("r".to_owned());
        tokio::pin!(call);
        let budget = Duration::from_micros(250 * n as u64);
        let started = std::time::Instant::now();
        while started.elapsed() < budget {
            if futures_util::poll!(call.as_mut()).is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    let drained = runtime.testing().drain().await.unwrap();
    assert!(drained.dead.is_empty(), "{drained:?}");
    for n in 0..POINTS {
        let alarm = runtime.reference::<Alarm>(format!("c{n}"));
        alarm.cancel("r".to_owned()).await.unwrap();
        assert!(alarm.reminders().await.unwrap().is_empty());
    }
    harness.clock.set(noon(4, 10));
    let due = POINTS as i64;
    assert_eq!(
        due_from_noon(&runtime).await,
        [0, due, due, 0, 0],
        "each ring was due from 12:01 until it was cancelled at 12:03, once"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_cancel_in_a_turn_that_failed_or_was_refused_tallies_nothing() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms(&harness).await;
    let alarm = runtime.reference::<Alarm>("jammed");
    alarm
        .plan("r".to_owned(), noon(1, 0).timestamp())
        .await
        .unwrap();
    harness.clock.set(noon(2, 10));
    assert!(alarm.cancel_and_fail("r".to_owned()).await.is_err());
    assert!(alarm.cancel_and_refuse("r".to_owned()).await.is_err());
    assert_eq!(
        alarm.reminders().await.unwrap().len(),
        1,
        "the ring is still planned"
    );
    harness.clock.set(noon(4, 10));
    assert_eq!(
        due_from_noon(&runtime).await,
        [0, 1, 1, 1, 1],
        "the ring has been due since 12:01 and still is"
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_alarm_destroyed_with_rings_due_in_several_minutes_counts_each_until_then() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms(&harness).await;
    let alarm = runtime.reference::<Alarm>("several");
    // Rings due at 12:00:59.999999 (in 12:00), 12:01:00 twice, 12:02:00 (exactly the minute
    // it is destroyed in is 12:03), 12:03:05 (the same minute: never due at a minute's end),
    // and 12:30 (not due).
    let second = |minute, second| noon(minute, second).timestamp();
    alarm.plan("a".to_owned(), second(0, 59)).await.unwrap();
    alarm.plan("b".to_owned(), second(1, 0)).await.unwrap();
    alarm.plan("c".to_owned(), second(1, 0)).await.unwrap();
    alarm.plan("d".to_owned(), second(2, 0)).await.unwrap();
    alarm.plan("e".to_owned(), second(3, 0)).await.unwrap();
    alarm.plan("f".to_owned(), second(30, 0)).await.unwrap();
    harness.clock.set(noon(3, 10));
    alarm.scrap().await.unwrap();
    harness.clock.set(noon(4, 10));
    assert_eq!(
        due_from_noon(&runtime).await,
        [1, 3, 4, 0, 0],
        "each ring was due from its minute until 12:03"
    );
    harness.clock.set(noon(7, 10));
    runtime.testing().upkeep().await.unwrap();
    assert_eq!(due_from_noon(&runtime).await, [1, 3, 4, 0, 0]);
    runtime.close().await;
}

#[tokio::test]
async fn a_recurring_ring_cancelled_while_overdue_was_due_from_its_occurrence_until_then() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms(&harness).await;
    let alarm = runtime.reference::<Alarm>("recurring");
    // Due at 12:05:10, every five minutes; no worker fires it; cancelled at 12:07:30.
    alarm.ring_every(5, "five".to_owned(), false).await.unwrap();
    harness.clock.set(noon(7, 30));
    alarm.cancel("five".to_owned()).await.unwrap();
    harness.clock.set(noon(9, 10));
    let activity = runtime
        .admin()
        .activity(Window::FifteenMinutes)
        .await
        .unwrap();
    assert_eq!(
        minutes_from_noon(&activity, 10, |point| point.backlog.due_reminders),
        [0, 0, 0, 0, 0, 1, 1, 0, 0, 0]
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_recurring_ring_that_catches_up_every_missed_occurrence_keeps_the_minutes_it_was_due() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms(&harness).await;
    let admin = runtime.admin();
    // Due at 12:02:10, 12:04:10, 12:06:10, ...; no worker fires it until 12:07, when each
    // occurrence it missed fires.
    runtime
        .reference::<Alarm>("catching-up")
        .ring_every(2, "two".to_owned(), true)
        .await
        .unwrap();
    harness.clock.set(noon(7, 0));
    let due =
        |activity: &Activity| minutes_from_noon(activity, 7, |point| point.backlog.due_reminders);
    let before = due(&admin.activity(Window::FifteenMinutes).await.unwrap());
    assert_eq!(
        before,
        [0, 0, 1, 1, 1, 1, 1],
        "while it waits, the ring is due from 12:02:10"
    );
    let fired = runtime.testing().run_due_reminders().await.unwrap();
    assert_eq!(fired.occurrences_fired, 3);
    let after = due(&admin.activity(Window::FifteenMinutes).await.unwrap());
    assert_eq!(
        after, before,
        "the minutes that passed keep what was due in them once the missed occurrences fire"
    );
    // Once their turns ran and the minutes were folded, the same.
    runtime.testing().drain().await.unwrap();
    harness.clock.set(noon(10, 10));
    runtime.testing().upkeep().await.unwrap();
    let folded = due(&admin.activity(Window::FifteenMinutes).await.unwrap());
    assert_eq!(
        folded, before,
        "folded, the minutes keep what was due in them"
    );
    runtime.close().await;
}

/// The due reminders at each point of the hour's and the day's windows, read now, from
/// 04:00 to 04:43 the next morning (the hour's) and up to the half hour from 04:00 (the
/// day's): points both 04:45 and 04:50 see, whose ends are past at both.
async fn due_in_the_hour_and_the_day(runtime: &Runtime) -> Vec<(DateTime<Utc>, i64)> {
    let admin = runtime.admin();
    let mut due = Vec::new();
    for (window, from, until) in [
        (Window::Hour, noon(960, 0), noon(1003, 0)),
        (Window::Day, noon(-60, 0), noon(960, 0)),
    ] {
        let activity = admin.activity(window).await.unwrap();
        due.extend(
            activity
                .points
                .iter()
                .filter(|point| point.at >= from && point.at <= until)
                .map(|point| (point.at, point.backlog.due_reminders)),
        );
    }
    due
}

#[tokio::test]
async fn rings_that_catch_up_a_thousand_missed_minutes_or_more_keep_the_minutes_they_were_due() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = alarms(&harness).await;
    // One ring a minute from 12:01:10; another from 12:05:10. Neither fires until 4:45 the
    // next morning: the first missed 1,004 occurrences (the last Missed::CATCH_UP of them
    // fire), the second exactly Missed::CATCH_UP; each occurrence in a minute of its own.
    runtime
        .reference::<Alarm>("more-than-caught-up")
        .ring_every(1, "each".to_owned(), true)
        .await
        .unwrap();
    harness.clock.set(noon(4, 10));
    runtime
        .reference::<Alarm>("just-caught-up")
        .ring_every(1, "each".to_owned(), true)
        .await
        .unwrap();
    harness.clock.set(noon(1005, 0));
    let before = due_in_the_hour_and_the_day(&runtime).await;
    assert_eq!(
        before.iter().map(|(_, due)| *due).max(),
        Some(2),
        "while they wait, both rings are due: {before:?}"
    );
    let fired = runtime.testing().run_due_reminders().await.unwrap();
    assert_eq!(fired.occurrences_fired, 2 * Missed::CATCH_UP);
    assert_eq!(
        due_in_the_hour_and_the_day(&runtime).await,
        before,
        "the minutes that passed keep what was due in them once the missed occurrences fire"
    );
    runtime.testing().drain().await.unwrap();
    harness.clock.set(noon(1010, 10));
    runtime.testing().upkeep().await.unwrap();
    assert_eq!(
        due_in_the_hour_and_the_day(&runtime).await,
        before,
        "folded, the minutes keep what was due in them"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn turns_whose_group_commits_after_a_fold_passed_their_minute_are_counted() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let runtime = harness
        .builder()
        .await
        .actor::<Porter>()
        .group_commit(GroupCommit::default().max_wait(Duration::from_secs(8)))
        .start()
        .await
        .expect("starts");
    // Upkeep may wait for the open group's row locks (MySQL's prune of finished messages)
    // until the group's budget cuts its last member off.
    let hot = runtime
        .reference::<Porter>("hot")
        .timeout(Duration::from_secs(60));
    let (lead, free, held) = ("fold-group-lead", "fold-group-free", "fold-group-held");
    support::gates::gate(free).open();
    assert_eq!(hot.carry(free.to_owned()).await.unwrap(), 1);
    // A group at 12:00:10: its leader's turn and a member's are written in its transaction,
    // stamped 12:00, and its last member waits in its handler, the transaction open.
    let leader = spawned_carry(&hot, lead).await;
    support::gates::gate(lead).reached(1).await;
    let member = spawned_carry(&hot, free).await;
    let last = spawned_carry(&hot, held).await;
    support::gates::gate(lead).open();
    support::gates::gate(held).reached(1).await;
    // Five minutes later the workers fold the minutes that ended two minutes ago, 12:00
    // among them, while the group is still open; then the group commits.
    harness.clock.set(noon(5, 10));
    let fold = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.testing().upkeep().await })
    };
    if harness.backend().is_server() {
        fold.await.unwrap().unwrap();
        support::gates::gate(held).open();
    } else {
        // SQLite's fold waits for the group's write lock.
        support::gates::gate(held).open();
        fold.await.unwrap().unwrap();
    }
    let answers = [leader, member, last].map(|call| async { call.await.unwrap().unwrap() });
    let mut carried = Vec::new();
    for answer in answers {
        carried.push(answer.await);
    }
    assert_eq!(carried, [2, 3, 4]);
    harness.clock.set(noon(10, 10));
    runtime.testing().upkeep().await.unwrap();
    let completed = completed_each_minute_of_the_hour(&runtime).await;
    assert_eq!(
        completed.iter().sum::<i64>(),
        4,
        "the first carry and the group's three are in the chart: {completed:?}"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_that_commits_while_another_runtime_folds_its_minute_is_counted() {
    const TURNS: usize = 6;
    const ROUNDS: u32 = 8;
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let porters = || async {
        harness
            .builder()
            .await
            .actor::<Porter>()
            .start()
            .await
            .expect("starts")
    };
    // One runtime runs the turns, another (a second process) folds.
    let (carrying, folding) = (porters().await, porters().await);
    for round in 0..ROUNDS {
        // Each round: the carries start at 12:00:10 (then 12:05:10, ...) and wait in their
        // handlers; it is five minutes later, the carries go on and the other runtime's
        // workers fold the minutes that ended two minutes ago, all released together.
        let name = format!("activity-fold-race-{round}");
        let gate = support::gates::gate(&name);
        let mut calls = Vec::new();
        for n in 0..TURNS {
            let (runtime, name) = (carrying.clone(), name.clone());
            calls.push(tokio::spawn(async move {
                runtime
                    .reference::<Porter>(format!("p{n}"))
                    .carry(name)
                    .await
            }));
        }
        // On SQLite one turn at a time runs its handler (the others wait for the writer).
        let held = if harness.backend().is_server() {
            TURNS
        } else {
            1
        };
        gate.reached(u32::try_from(held).unwrap()).await;
        harness.clock.set(noon(5 * i64::from(round + 1), 10));
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let fold = {
            let (runtime, start) = (folding.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                runtime.testing().upkeep().await
            })
        };
        start.wait().await;
        gate.open();
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap(), round + 1);
        }
        fold.await.unwrap().unwrap();
    }
    harness.clock.set(noon(5 * i64::from(ROUNDS) + 5, 10));
    folding.testing().upkeep().await.unwrap();
    let completed = completed_each_minute_of_the_hour(&folding).await;
    assert_eq!(
        completed.iter().sum::<i64>(),
        i64::try_from(TURNS).unwrap() * i64::from(ROUNDS),
        "every carry is in the chart, whichever side of the fold it committed on: {completed:?}"
    );
    carrying.close().await;
    folding.close().await;
}
