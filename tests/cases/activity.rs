//! The figures behind the operators' charts on every backend: each minute's completed,
//! rejected and dead messages and failed attempts, what was waiting at its end (ready
//! messages, due reminders, pending effects) and how late reminders ran, for the whole
//! database and for one actor; an idle window says so; and on a million finished messages
//! the overview's time, printed. Time moves only through the manual clock.

use crate::support;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use solid_objects::admin::{Activity, ActivityPoint, DeadLetterFilter, EffectFilter, Window};
use solid_objects::prelude::*;
use solid_objects::RetryPolicy;
use support::actors::Noted;
use support::charts::{noon, Station};
use support::{Backend, Harness};
use tower::ServiceExt;

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
    let half_hour = day
        .points
        .iter()
        .find(|point| point.at == noon(0, 0))
        .unwrap();
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
#[ignore = "an operator's retry of a dead reminder message keeps the reminder's due time, so the \
            charts count the reminder as due from then until the retry, and its lateness again"]
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
#[ignore = "an operator's retry of a dead effect makes its row ready again with its first \
            emission time, so the charts count it as pending for the whole time it lay dead"]
async fn an_effect_retried_after_it_died_was_not_pending_while_it_lay_dead() {
    let harness = Harness::new();
    harness.clock.set(noon(0, 10));
    let courier_up = Arc::new(AtomicBool::new(false));
    let up = Arc::clone(&courier_up);
    let runtime = harness
        .builder()
        .await
        .actor::<Station>()
        .effect(move |_: Noted, _| {
            let up = up.load(Ordering::SeqCst);
            async move {
                match up {
                    true => Ok(()),
                    false => Err(Failure::permanent("the courier is away")),
                }
            }
        })
        .start()
        .await
        .expect("starts");
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
    courier_up.store(true, Ordering::SeqCst);
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
#[ignore = "a reminder deleted before it fired (its actor destroyed, or unscheduled) leaves no \
            row, so the minutes it was due and unfired vanish from the backlog afterwards"]
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

/// Finished messages written straight into the tables in one statement each, to time the
/// overview on a large database: `rows` messages spread evenly over `(from, until]` (one in a
/// hundred a fired reminder, one in a thousand a dead letter), a failed attempt for every
/// hundredth, and an effect done for every tenth.
fn bulk_history(backend: Backend, rows: i64, (from, until): (i64, i64)) -> Vec<String> {
    let series = match backend {
        Backend::Postgres => {
            format!("SELECT n FROM generate_series(CAST(1 AS BIGINT), {rows}) AS n")
        }
        Backend::Sqlite | Backend::MariaDb => format!(
            "WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers \
             WHERE n < {rows}) SELECT n FROM numbers"
        ),
    };
    // MariaDB stops a recursive statement after max_recursive_iterations (1000 on the test
    // server): these may go on.
    let insert = match backend {
        Backend::MariaDb => format!("SET STATEMENT max_recursive_iterations = {rows} FOR INSERT"),
        Backend::Sqlite | Backend::Postgres => "INSERT".to_owned(),
    };
    let step = (until - from) / rows;
    let mut statements = Vec::new();
    statements.push(format!(
        "{insert} INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
             status, attempts, available_at, result, created_at, finished_at, scheduled_for)
         SELECT 'Bulk', CONCAT('b-', n % 1000), 'work', '[]', CONCAT('bulk-', n),
                CASE WHEN n % 1000 = 0 THEN 'dead' ELSE 'completed' END,
                CASE WHEN n % 100 = 0 THEN 1 ELSE 0 END,
                {from} + n * {step}, 'null', {from} + n * {step} - 2000000,
                {from} + n * {step},
                CASE WHEN n % 100 = 1 THEN {from} + n * {step} - 5000000 END
         FROM ({series}) AS numbers"
    ));
    statements.push(format!(
        "{insert} INTO solid_failed_attempts (message_id, actor_type, actor_id, failed_at)
         SELECT n, 'Bulk', CONCAT('b-', n % 1000), {from} + n * {step} - 1000000
         FROM ({series}) AS numbers WHERE n % 100 = 0"
    ));
    statements.push(format!(
        "{insert} INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
             attempts, available_at, created_at, finished_at)
         SELECT CONCAT('effect-', n), 'Bulk', CONCAT('b-', n % 1000), 'post', '{{}}', 'done', 1,
                {from} + n * {step}, {from} + n * {step} - 1000000, {from} + n * {step}
         FROM ({series}) AS numbers WHERE n % 10 = 0"
    ));
    // The statistics a server's own upkeep gathers after such a load (autovacuum's analyze;
    // InnoDB's, which it keeps up to date by itself). SQLite keeps none unless asked, and the
    // runtime does not ask.
    if backend == Backend::Postgres {
        statements.push("ANALYZE".to_owned());
    }
    statements
}

/// A page of the dashboard (`/` for the overview) over `window`, fetched from its router as a
/// browser would.
async fn fetch_page(runtime: &Runtime, page: &str, window: Window) -> String {
    let router = solid_objects::dashboard::router(runtime.clone());
    let request = HttpRequest::get(format!("{page}?window={window}"))
        .body(Body::empty())
        .expect("a request");
    let response = router.oneshot(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .expect("the page");
    String::from_utf8(body.to_vec()).expect("UTF-8")
}

#[tokio::test]
async fn the_overview_and_an_actors_page_on_a_million_finished_messages_print_their_time() {
    const MESSAGES: i64 = 1_000_000;
    let harness = Harness::new();
    if harness.backend() == Backend::MariaDb {
        // Its load alone takes about a minute there; the charts' statements on MySQL are
        // checked on the small history above.
        eprintln!("skipped on MariaDb: the million rows are timed on SQLite and PostgreSQL");
        return;
    }
    harness.clock.set(noon(0, 10));
    let runtime = runtime(&harness).await;
    // Over the day's window up to noon: the 23 and a half hours from 12:30 the day before.
    let history = (
        noon(30 - 24 * 60, 0).timestamp_micros(),
        noon(0, 0).timestamp_micros(),
    );
    let pool = support::connect(&harness).await;
    let started = Instant::now();
    for statement in bulk_history(harness.backend(), MESSAGES, history) {
        sqlx::raw_sql(&statement)
            .execute(&pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    pool.close().await;
    let loaded = started.elapsed();

    let admin = runtime.admin();
    let day = admin.activity(Window::Day).await.unwrap();
    let total: i64 = day
        .points
        .iter()
        .map(|point| point.finished.completed)
        .sum();
    assert_eq!(
        total,
        MESSAGES - MESSAGES / 1000,
        "every completed message is counted"
    );

    let mut timings = Vec::new();
    for window in Window::ALL {
        // The first read warms the caches; the second is timed.
        let mut times = Vec::new();
        for page in ["/", "/actors/Bulk/b-0"] {
            fetch_page(&runtime, page, window).await;
            let started = Instant::now();
            let shown = fetch_page(&runtime, page, window).await;
            times.push(started.elapsed().as_millis());
            assert!(shown.contains("<svg"), "{page} {window}: a chart");
        }
        let started = Instant::now();
        admin.activity(window).await.unwrap();
        timings.push(format!(
            "{window}: overview {} ms (its charts' figures {} ms), an actor's page {} ms",
            times[0],
            started.elapsed().as_millis(),
            times[1]
        ));
    }
    // To the process's stderr itself, past the test harness's capture: every run shows it.
    let _ = writeln!(
        std::io::stderr().lock(),
        "the overview on {:?} with {MESSAGES} finished messages (loaded in {} s): {}",
        harness.backend(),
        loaded.as_secs(),
        timings.join("; ")
    );
    runtime.close().await;
}
