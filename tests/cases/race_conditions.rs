//! Every actor scenario under "What the tests prove" in the race-conditions guide.

use crate::support;
#[path = "../../examples/event_tickets/tickets.rs"]
mod tickets;

use solid_objects::Runtime;
use support::workers::fire_due_reminders;
use support::{rejection_code, together, Harness};
use tickets::{EventTickets, EventTicketsMessage, EventTicketsRef, HoldOutcome};

async fn event(harness: &Harness, seats: u32) -> (Runtime, EventTicketsRef) {
    let runtime = harness.start().await;
    let event = runtime.reference::<EventTickets>("concert");
    assert_eq!(event.open_sales(seats).await.unwrap(), seats);
    (runtime, event)
}

fn held(hold_id: &str) -> HoldOutcome {
    HoldOutcome::Held {
        hold_id: hold_id.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_holds_against_three_seats_hold_exactly_three() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;

    let outcomes = together(10, |buyer| {
        let event = event.clone();
        async move {
            event
                .hold(format!("buyer-{buyer}"), format!("hold-{buyer}"))
                .await
                .unwrap()
        }
    })
    .await;

    let holds = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, HoldOutcome::Held { .. }))
        .count();
    let sold_out = outcomes
        .iter()
        .filter(|outcome| **outcome == HoldOutcome::SoldOut)
        .count();
    assert_eq!((holds, sold_out), (3, 7));
    let state = event.snapshot().await.unwrap();
    assert_eq!(state.seats_available, 0);
    assert_eq!(state.holds.len(), 3);
    runtime.close().await;
}

#[tokio::test]
async fn after_a_restart_nothing_runs_at_nine_minutes_and_the_expiry_runs_at_eleven() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;
    assert_eq!(event.hold("ana", "h-1").await.unwrap(), held("h-1"));
    runtime.close().await;

    let runtime = harness.start().await;
    let event = runtime.reference::<EventTickets>("concert");
    harness.advance_minutes(9);
    assert_eq!(fire_due_reminders(&runtime).await, 0);
    assert_eq!(event.seats_available().await.unwrap(), 2);

    harness.advance_minutes(2);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert_eq!(event.seats_available().await.unwrap(), 3);
    assert!(event.snapshot().await.unwrap().holds.is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn a_stale_expiry_leaves_the_buyers_new_hold_alone() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;
    event.hold("ana", "h-1").await.unwrap();
    let first_deadline = event.snapshot().await.unwrap().holds["ana"].expires_at;
    harness.advance_minutes(11);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert_eq!(event.hold("ana", "h-2").await.unwrap(), held("h-2"));

    let stale = EventTicketsMessage::Expire {
        buyer: "ana".into(),
        hold_id: "h-1".into(),
        expires_at: first_deadline,
    };
    runtime
        .testing()
        .deliver::<EventTickets>("concert", stale)
        .await
        .unwrap();

    let state = event.snapshot().await.unwrap();
    assert_eq!(state.holds["ana"].hold_id, "h-2");
    assert_eq!(state.seats_available, 2);
    runtime.close().await;
}

#[tokio::test]
async fn two_identical_holds_and_two_identical_confirmations_sell_one_seat() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;

    assert_eq!(event.hold("ana", "h-1").await.unwrap(), held("h-1"));
    assert_eq!(event.hold("ana", "h-1").await.unwrap(), held("h-1"));
    event.confirm("ana", "h-1").await.unwrap();
    event.confirm("ana", "h-1").await.unwrap();

    let state = event.snapshot().await.unwrap();
    assert_eq!(state.sold, vec!["h-1".to_owned()]);
    assert_eq!(state.seats_available, 2);
    assert!(state.holds.is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn a_confirmation_after_expiry_is_rejected_with_no_hold() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;
    event.hold("ana", "h-1").await.unwrap();
    harness.advance_minutes(11);
    assert_eq!(fire_due_reminders(&runtime).await, 1);

    assert_eq!(rejection_code(event.confirm("ana", "h-1").await), "no_hold");
    let state = event.snapshot().await.unwrap();
    assert!(state.sold.is_empty());
    assert_eq!(state.seats_available, 3);
    runtime.close().await;
}

#[tokio::test]
async fn past_the_deadline_before_the_reminder_another_buyer_gets_the_seat() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 1).await;
    event.hold("ana", "h-1").await.unwrap();
    assert_eq!(
        event.hold("ben", "h-2").await.unwrap(),
        HoldOutcome::SoldOut
    );
    harness.advance_minutes(11);

    assert_eq!(rejection_code(event.confirm("ana", "h-1").await), "no_hold");
    assert_eq!(event.hold("ben", "h-2").await.unwrap(), held("h-2"));
    let state = event.snapshot().await.unwrap();
    assert!(state.sold.is_empty());
    assert_eq!(state.seats_available, 0);
    assert_eq!(state.holds.keys().collect::<Vec<_>>(), vec!["ben"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_retry_with_the_same_hold_id_after_the_deadline_makes_a_fresh_hold_that_survives_the_old_expiry(
) {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;
    event.hold("ana", "h-1").await.unwrap();
    let old_deadline = event.snapshot().await.unwrap().holds["ana"].expires_at;
    harness.advance_minutes(11);

    assert_eq!(event.hold("ana", "h-1").await.unwrap(), held("h-1"));
    let fresh_deadline = event.snapshot().await.unwrap().holds["ana"].expires_at;
    assert!(fresh_deadline > old_deadline);
    let old_expiry = EventTicketsMessage::Expire {
        buyer: "ana".into(),
        hold_id: "h-1".into(),
        expires_at: old_deadline,
    };
    runtime
        .testing()
        .deliver::<EventTickets>("concert", old_expiry)
        .await
        .unwrap();

    let state = event.snapshot().await.unwrap();
    assert_eq!(state.holds["ana"].expires_at, fresh_deadline);
    assert_eq!(state.seats_available, 2);
    assert_eq!(fire_due_reminders(&runtime).await, 0);
    runtime.close().await;
}

#[tokio::test]
async fn a_stale_form_is_rejected_with_stale_revision() {
    let harness = Harness::new();
    let (runtime, event) = event(&harness, 3).await;

    assert_eq!(event.update_details("Spring concert", 0).await.unwrap(), 1);
    assert_eq!(
        rejection_code(event.update_details("Autumn concert", 0).await),
        "stale_revision"
    );

    let state = event.snapshot().await.unwrap();
    assert_eq!(state.title, "Spring concert");
    assert_eq!(state.revision, 1);
    runtime.close().await;
}
