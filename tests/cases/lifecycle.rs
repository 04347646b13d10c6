//! Actors that live for years: typed rejections, destroy and incarnations, state versions
//! and migrations, recurring reminders, and effects that report back to their actor.

use crate::support;

use std::time::Duration;

use crate::support::subscription::{assert_destroyed, Subscription};
use axum_core::response::IntoResponse;
use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use support::fixtures::{start_with_policy, started_on};
use support::operator::{dead_letters, prune};
use support::policies::CallersOnly;
use support::workers::fire_due_reminders;
use support::{count, Harness};

/// Why a hold is refused, as a caller can match on it.
#[derive(Debug, PartialEq, Rejection)]
enum HoldError {
    #[rejection(message = "Only {left} seats are left")]
    NotEnoughSeats { left: u32 },
    #[rejection(status = 422)]
    InvalidSeats,
    #[rejection(code = "sold_out")]
    Gone(String),
}

#[derive(Default, Serialize, Deserialize)]
struct Seats {
    left: u32,
}

#[actor]
#[derive(Default)]
struct Venue {
    seats: Seats,
}

#[actor]
impl Venue {
    #[command]
    fn open(&mut self, seats: u32) {
        self.seats.left = seats;
    }

    #[command]
    fn hold(&mut self, seats: i64) -> Result<u32, HoldError> {
        let seats = u32::try_from(seats).map_err(|_| HoldError::InvalidSeats)?;
        if self.seats.left == 0 {
            return Err(HoldError::Gone("the show is sold out".to_owned()));
        }
        if seats > self.seats.left {
            return Err(HoldError::NotEnoughSeats {
                left: self.seats.left,
            });
        }
        self.seats.left -= seats;
        Ok(self.seats.left)
    }
}

#[tokio::test]
async fn a_typed_rejection_reaches_the_caller_as_its_own_enum() {
    let (_harness, runtime, venue) = started_on::<Venue>("v").await;
    venue.open(3).await.unwrap();

    let too_many = venue.hold(5).await.unwrap_err();
    let negative = venue.hold(-1).await.unwrap_err();
    let queued = venue.enqueue().hold(4).await.unwrap();
    queued.wait(TimeDelta::seconds(5)).await.unwrap_err();
    let later = queued.result().await.unwrap_err();
    venue.hold(3).await.unwrap();
    let gone = venue.hold(1).await.unwrap_err();

    assert_eq!(
        too_many.rejection::<HoldError>(),
        Some(HoldError::NotEnoughSeats { left: 3 })
    );
    assert_eq!(
        too_many.to_string(),
        "rejected: not_enough_seats: Only 3 seats are left"
    );
    assert_eq!(
        negative.rejection::<HoldError>(),
        Some(HoldError::InvalidSeats)
    );
    assert_eq!(
        later.rejection::<HoldError>(),
        Some(HoldError::NotEnoughSeats { left: 3 })
    );
    assert_eq!(
        gone.rejection::<HoldError>(),
        Some(HoldError::Gone("the show is sold out".to_owned()))
    );
    assert!(matches!(&gone, Error::Rejected(rejection) if rejection.code() == "sold_out"));
    runtime.close().await;
}

#[tokio::test]
async fn a_typed_rejection_answers_http_with_the_status_its_variant_names() {
    use axum_core::response::IntoResponse;

    let (_harness, runtime, venue) = started_on::<Venue>("v").await;
    venue.open(3).await.unwrap();

    let invalid = venue.hold(-1).await.unwrap_err();
    // Read back from the stored result, as a later reader or an idempotent replay sees it.
    let queued = venue.enqueue().hold(-2).await.unwrap();
    queued.wait(TimeDelta::seconds(5)).await.unwrap_err();
    let stored = queued.result().await.unwrap_err();
    let too_many = venue.hold(5).await.unwrap_err();

    let statuses = [invalid, stored, too_many].map(|error| error.into_response().status().as_u16());
    assert_eq!(
        statuses,
        [422, 422, 409],
        "#[rejection(status = 422)] answers 422, a variant without a status 409"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_destroyed_actor_starts_a_new_incarnation_that_sees_nothing_of_the_old_one() {
    let (harness, runtime, subscription) = started_on::<Subscription>("s-1").await;
    assert_eq!(subscription.start("gold").await.unwrap(), 1);
    let queued = subscription.enqueue().start("late").await.unwrap();

    subscription.destroy().await.unwrap();
    harness.advance_minutes(10);
    runtime.testing().run_due_reminders().await.unwrap();

    assert_destroyed(&queued).await;
    let state = subscription.snapshot().await.unwrap();
    assert_eq!((state.plan.as_str(), state.reminders_seen), ("", 0));
    assert_eq!(subscription.start("silver").await.unwrap(), 2);
    assert_eq!(subscription.plan().await.unwrap(), ("silver".to_owned(), 2));
    runtime.close().await;
}

#[tokio::test]
async fn a_turn_that_destroys_its_actor_ends_its_pending_messages_and_reminders() {
    let (harness, runtime, subscription) = started_on::<Subscription>("s-1").await;
    subscription.start("gold").await.unwrap();
    subscription.renew_hourly(false).await.unwrap();
    let cancel = subscription.enqueue().cancel().await.unwrap();
    let after = subscription.enqueue().start("queued after").await.unwrap();

    runtime.testing().drain().await.unwrap();
    harness.advance_minutes(120);
    let fired = fire_due_reminders(&runtime).await;

    assert_eq!(cancel.result().await.unwrap(), Some(0));
    assert!(
        matches!(after.status().await.unwrap(), MessageStatus::Destroyed),
        "a message queued behind the destroying turn is destroyed with the actor"
    );
    assert_eq!(fired, 0, "the old incarnation's reminders are gone");
    let state = subscription.snapshot().await.unwrap();
    assert_eq!(state.reminders_seen, 0);
    assert!(state.renewals.is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn destroying_is_denied_unless_the_policy_allows_it() {
    let harness = Harness::new();
    let runtime = start_with_policy(&harness, CallersOnly).await;
    let subscription = runtime.reference::<Subscription>("s-1");
    subscription.start("gold").await.unwrap();

    let destroyed = subscription.destroy().await;

    assert!(
        matches!(destroyed, Err(Error::Unauthorized { .. })),
        "{destroyed:?}"
    );
    assert_eq!(subscription.snapshot().await.unwrap().plan, "gold");
    runtime.close().await;
}

async fn renewals_after_an_outage(all: bool) -> Vec<i64> {
    let (harness, runtime, subscription) = started_on::<Subscription>("s-1").await;
    subscription.renew_hourly(all).await.unwrap();
    let start = harness.clock.now();
    runtime.close().await;

    harness.advance_minutes(10 * 60);
    let runtime = harness.start().await;
    let subscription = runtime.reference::<Subscription>("s-1");
    runtime.testing().run_due_reminders().await.unwrap();
    let renewals = subscription.snapshot().await.unwrap().renewals;
    runtime.close().await;
    renewals
        .into_iter()
        .map(|at| (at - start.timestamp()) / 3600)
        .collect()
}

#[tokio::test]
async fn an_hourly_reminder_after_a_ten_hour_outage_fires_once_or_ten_times_in_order() {
    assert_eq!(renewals_after_an_outage(false).await, [10]);
    assert_eq!(
        renewals_after_an_outage(true).await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    );
}

#[tokio::test]
async fn a_recurring_reminder_goes_on_until_it_is_cancelled() {
    let (harness, runtime, subscription) = started_on::<Subscription>("s-1").await;
    subscription.renew_hourly(false).await.unwrap();

    for _ in 0..3 {
        harness.advance_minutes(60);
        runtime.testing().run_due_reminders().await.unwrap();
    }
    subscription.stop_renewing().await.unwrap();
    harness.advance_minutes(180);
    let after_cancel = fire_due_reminders(&runtime).await;

    assert_eq!(subscription.snapshot().await.unwrap().renewals.len(), 3);
    assert_eq!(after_cancel, 0);
    runtime.close().await;
}

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

/// A dead reminder occurrence of a destroyed incarnation, retried by an operator, never lands on the next.
/// "A message or reminder from an old incarnation never lands on the new one": the retried
/// message keeps its incarnation and ends destroyed.
#[tokio::test]
async fn a_dead_reminder_of_a_destroyed_incarnation_retried_by_an_operator_never_runs_on_the_next()
{
    let (harness, runtime, meter) = started_on::<Meter>("m").await;
    assert_eq!(meter.install(true).await.unwrap(), 1);
    harness.advance_minutes(60);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    let dead = dead_letters(&runtime).await;
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

/// A recurring reminder's occurrence that died and is retried by an operator keeps its scheduled time.
/// "The occurrence's scheduled time is available to the handler", on the retry too:
/// `turn.scheduled_at()` is the time it was scheduled for.
#[tokio::test]
async fn a_retried_reminder_occurrence_keeps_its_scheduled_time() {
    let (harness, runtime, meter) = started_on::<Meter>("m").await;
    meter.install(true).await.unwrap();
    harness.advance_minutes(60);
    let scheduled = harness.clock.now().timestamp();
    runtime.testing().run_due_reminders().await.unwrap();
    let dead = dead_letters(&runtime).await;
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

/// Messages a destroy ended are finished, and pruned after the retention period.
/// `Admin::prune` deletes finished messages older than the retention period; a
/// destroyed message (and a stale reminder occurrence or effect reply of an old incarnation) is
/// one, so actors destroyed and recreated for years do not grow `solid_messages` for ever.
#[tokio::test]
async fn destroyed_messages_are_pruned_after_the_retention_period() {
    let (harness, runtime, meter) = started_on::<Meter>("m").await;
    for _ in 0..3 {
        meter.enqueue().add().await.unwrap();
    }
    meter.destroy().await.unwrap();
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'destroyed'").await,
        3
    );

    harness.clock.advance(Duration::from_secs(400 * 24 * 3600));
    prune(&runtime).await;

    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'destroyed'").await,
        0,
        "destroyed messages a year past the retention period are still stored"
    );
}

/// A caller waiting on a message that a destroy ended gets `Error::Destroyed`, a client error over HTTP.
/// Through the axum integration the client can tell "that actor was destroyed" (a 4xx answer)
/// from a crash (a 500 logged as a server error).
#[tokio::test]
async fn a_destroyed_message_answers_http_clients_with_a_client_error() {
    let (_harness, _runtime, meter) = started_on::<Meter>("m").await;
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
