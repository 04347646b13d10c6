//! Reading reminders: `turn.reminder(key).<reminder>()` tells a handler when one is due,
//! counting what its own turn staged; `reference.reminders()` lists them for operators,
//! authorised as a query.

use crate::support;

use std::time::Duration;

use solid_objects::policy::{Denied, Request, RequestKind};
use solid_objects::prelude::*;
use solid_objects::ScheduledReminder;
use support::fixtures::{started_on, started_with};
use support::workers::fire_due_reminders;

#[actor]
#[derive(Default)]
struct Counter {
    expired: Vec<String>,
    digests: u32,
}

#[actor]
impl Counter {
    #[command]
    fn hold(&mut self, turn: &mut Turn<Self>, hold_id: String, minutes: i64) {
        turn.schedule(turn.now() + TimeDelta::minutes(minutes), hold_id)
            .expire();
    }

    #[command]
    fn release(&mut self, turn: &mut Turn<Self>, hold_id: String) {
        turn.unschedule(hold_id).expire();
    }

    #[command]
    fn release_all(&mut self, turn: &mut Turn<Self>) {
        turn.unschedule_all().expire();
    }

    /// When `hold_id` expires, as the stored reminder says.
    #[command]
    async fn expires_at(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
    ) -> Result<Option<DateTime<Utc>>, TurnError> {
        Ok(turn.reminder(hold_id).expire().await?)
    }

    /// Pushes an existing hold back ten minutes; false if there is none.
    #[command]
    async fn extend(&mut self, turn: &mut Turn<Self>, hold_id: String) -> Result<bool, TurnError> {
        let Some(due) = turn.reminder(hold_id.clone()).expire().await? else {
            return Ok(false);
        };
        turn.schedule(due + TimeDelta::minutes(10), hold_id)
            .expire();
        Ok(true)
    }

    /// What the lookup sees after this turn stages `change` for `hold_id`.
    #[command]
    async fn stage_then_look(
        &mut self,
        turn: &mut Turn<Self>,
        hold_id: String,
        change: String,
    ) -> Result<Option<DateTime<Utc>>, TurnError> {
        match change.as_str() {
            "schedule" => turn
                .schedule(turn.now() + TimeDelta::minutes(1), hold_id.clone())
                .expire(),
            "cancel" => turn.unschedule(hold_id.clone()).expire(),
            "cancel_all" => turn.unschedule_all().expire(),
            "cancel_other_reminder" => turn.unschedule_all().digest(),
            _ => {}
        }
        Ok(turn.reminder(hold_id).expire().await?)
    }

    #[command]
    fn start_digests(&mut self, turn: &mut Turn<Self>) {
        turn.schedule_every(TimeDelta::hours(1), "daily")
            .missed(Missed::All)
            .digest();
    }

    #[reminder]
    fn expire(&mut self, turn: &mut Turn<Self>) {
        self.expired.push(turn.now().to_rfc3339());
    }

    #[reminder]
    fn digest(&mut self) {
        self.digests += 1;
    }
}

#[tokio::test]
async fn a_handler_reads_when_a_reminder_is_due_and_moves_it() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    let now = harness.clock.now();

    assert_eq!(counter.expires_at("h-1").await.unwrap(), None);
    counter.hold("h-1", 15).await.unwrap();
    assert_eq!(
        counter.expires_at("h-1").await.unwrap(),
        Some(now + TimeDelta::minutes(15))
    );
    assert_eq!(
        counter.expires_at("h-2").await.unwrap(),
        None,
        "another key"
    );

    assert!(counter.extend("h-1").await.unwrap());
    assert!(!counter.extend("h-2").await.unwrap());
    assert_eq!(
        counter.expires_at("h-1").await.unwrap(),
        Some(now + TimeDelta::minutes(25))
    );

    harness.advance_minutes(20);
    assert_eq!(fire_due_reminders(&runtime).await, 0);
    harness.advance_minutes(5);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert_eq!(counter.expires_at("h-1").await.unwrap(), None, "it fired");

    counter.hold("h-3", 5).await.unwrap();
    counter.release("h-3").await.unwrap();
    assert_eq!(counter.expires_at("h-3").await.unwrap(), None);
    runtime.close().await;
}

#[tokio::test]
async fn the_lookup_counts_what_its_own_turn_staged() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    let now = harness.clock.now();
    counter.hold("h", 30).await.unwrap();

    let look = |change: &'static str| counter.stage_then_look("h", change);
    assert_eq!(
        look("schedule").await.unwrap(),
        Some(now + TimeDelta::minutes(1))
    );
    assert_eq!(look("cancel").await.unwrap(), None);
    counter.hold("h", 30).await.unwrap();
    assert_eq!(look("cancel_all").await.unwrap(), None);
    counter.hold("h", 30).await.unwrap();
    assert_eq!(
        look("cancel_other_reminder").await.unwrap(),
        Some(now + TimeDelta::minutes(30)),
        "cancelling another reminder leaves this one"
    );
    assert_eq!(
        look("nothing").await.unwrap(),
        Some(now + TimeDelta::minutes(30))
    );
    runtime.close().await;
}

#[tokio::test]
async fn unschedule_all_cancels_every_key_of_one_reminder_only() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    for hold in ["a", "b", "c"] {
        counter.hold(hold, 10).await.unwrap();
    }
    counter.start_digests().await.unwrap();

    counter.release_all().await.unwrap();

    let left: Vec<_> = counter
        .reminders()
        .await
        .unwrap()
        .into_iter()
        .map(|reminder| reminder.name)
        .collect();
    assert_eq!(left, ["digest"]);
    harness.advance_minutes(60);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    let state = counter.snapshot().await.unwrap();
    assert!(state.expired.is_empty());
    assert_eq!(state.digests, 1);
    runtime.close().await;
}

#[tokio::test]
async fn an_operator_lists_an_actors_reminders_next_due_first_across_restarts() {
    let (harness, runtime, counter) = started_on::<Counter>("c").await;
    let now = harness.clock.now();
    counter.hold("late", 90).await.unwrap();
    counter.hold("early", 5).await.unwrap();
    counter.start_digests().await.unwrap();
    runtime.close().await;

    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("c");
    let listed = counter.reminders().await.unwrap();

    let seen: Vec<_> = listed
        .iter()
        .map(|reminder| {
            (
                reminder.name.as_str(),
                reminder.key.as_str(),
                reminder.due_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("expire", "early", now + TimeDelta::minutes(5)),
            ("digest", "daily", now + TimeDelta::hours(1)),
            ("expire", "late", now + TimeDelta::minutes(90)),
        ]
    );
    let digest: &ScheduledReminder = &listed[1];
    assert_eq!(digest.every, Some(Duration::from_secs(3600)));
    assert_eq!(digest.missed, Some(Missed::All));
    assert_eq!((listed[0].every, listed[0].missed), (None, None));

    assert!(runtime
        .reference::<Counter>("other")
        .reminders()
        .await
        .unwrap()
        .is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn listing_reminders_is_authorised_as_a_query() {
    struct CommandsOnly;
    impl Policy for CommandsOnly {
        fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
            Ok(())
        }
        fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied> {
            assert_eq!(request.kind, RequestKind::Reminders);
            assert_eq!(request.operation, "reminders");
            Err(Denied::new("operators only"))
        }
    }
    let (_harness, runtime) = started_with(|builder| builder.policy(CommandsOnly)).await;
    let counter = runtime.reference::<Counter>("c");
    counter.hold("h", 5).await.unwrap();

    let listed = counter.reminders().await;

    assert!(
        matches!(listed, Err(Error::Unauthorized { .. })),
        "{listed:?}"
    );
    runtime.close().await;
}

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

/// A lookup after `turn.destroy()` in the same turn says the reminder is not due.
/// `turn.reminder(key).<r>().await` counts what this turn has staged so far; a staged destroy
/// removes every reminder at commit, so the lookup says `None`, as the listing does after the
/// commit.
#[tokio::test]
async fn a_lookup_after_turn_destroy_says_no_reminder_is_due() {
    let (_harness, _runtime, alarm) = started_on::<Alarm>("a").await;
    alarm.arm().await.unwrap();

    let still_due = alarm.retire().await.unwrap();
    let listed = alarm.reminders().await.unwrap().len();
    assert_eq!(
        (still_due, listed),
        (false, 0),
        "the turn was told its reminder is due; after its commit {listed} reminders exist"
    );
}
