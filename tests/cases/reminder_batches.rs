//! A worker pass fires due reminders in batches: however many are due, a batch costs one
//! statement to take them, one per 500 messages appended and one or two to delete or move
//! them, on every backend; every occurrence still rings once, in order.

use crate::support;

use std::time::Duration;

use solid_objects::prelude::*;
use support::Harness;

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
    // Batches of 1,000: [take, 2 inserts, delete], [take, insert, delete, move], [take].
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
    assert_eq!(
        firing
            .testing()
            .run_due_reminders()
            .await
            .unwrap()
            .occurrences_fired,
        HOURLY
    );
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
