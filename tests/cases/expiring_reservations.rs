//! Every scenario under "What the tests prove" in the expiring-reservations guide.

/// The guide's actor, which tests/servers/ also drives.
#[path = "../../examples/seat_inventory/inventory.rs"]
pub(crate) mod inventory;
use crate::support;

use inventory::{HoldStatus, SeatInventory, SeatInventoryMessage};
use solid_objects::Runtime;
use support::fixtures::started_with;
use support::workers::fire_due_reminders;
use support::{held_and_rejected, rejection_code, together, Harness};

/// A show with `capacity` seats on a fresh runtime.
async fn show(harness: &Harness, capacity: u32) -> (Runtime, inventory::SeatInventoryRef) {
    let runtime = harness.start().await;
    let show = runtime.reference::<SeatInventory>("show-42");
    assert_eq!(show.open_show(capacity).await.unwrap(), capacity);
    (runtime, show)
}

/// Eight buyers each hold one seat (hold `h-<n>` for buyer `buyer-<n>`) of the show that
/// `show_of(n)` refers to, all released together; their answers in buyer order.
pub(crate) async fn eight_holds_of_one_seat(
    show_of: impl Fn(usize) -> inventory::SeatInventoryRef,
) -> Vec<solid_objects::Result<HoldStatus>> {
    together(8, |buyer| {
        let show = show_of(buyer);
        async move {
            show.hold(format!("h-{buyer}"), format!("buyer-{buyer}"), 1)
                .await
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_holds_against_five_seats_hold_five_and_reject_three() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;

    let results = eight_holds_of_one_seat(|_| show.clone()).await;

    let (held, rejected) = held_and_rejected(results);
    assert_eq!(held, 5);
    assert_eq!(rejected, vec!["not_enough_seats"; 3]);
    assert_eq!(show.seats_left().await.unwrap(), 0);
    assert_eq!(show.snapshot().await.unwrap().holds.len(), 5);
    runtime.close().await;
}

#[tokio::test]
async fn a_hold_retry_takes_its_seats_once() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;

    let first = show.hold("h-1", "ana", 2).await.unwrap();
    let retry = show.hold("h-1", "ana", 2).await.unwrap();

    assert_eq!(first, retry);
    assert_eq!(show.seats_left().await.unwrap(), 3);
    assert_eq!(show.snapshot().await.unwrap().holds.len(), 1);
    runtime.close().await;
}

#[tokio::test]
async fn an_extension_moves_the_reminder_to_the_new_deadline() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 2).await.unwrap();
    show.extend_hold("h-1").await.unwrap();

    harness.advance_minutes(16);
    assert_eq!(fire_due_reminders(&runtime).await, 0);
    assert_eq!(show.seats_left().await.unwrap(), 3);
    assert!(show.snapshot().await.unwrap().holds.contains_key("h-1"));

    harness.advance_minutes(5);
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert_eq!(show.seats_left().await.unwrap(), 5);
    assert!(show.snapshot().await.unwrap().holds.is_empty());
    runtime.close().await;
}

#[tokio::test]
async fn an_expiry_for_the_old_deadline_changes_nothing_after_an_extension() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    let HoldStatus::Held { expires_at: old } = show.hold("h-1", "ana", 2).await.unwrap() else {
        panic!("the hold is held");
    };
    let extended = show.extend_hold("h-1").await.unwrap();
    let before = show.snapshot().await.unwrap();

    let stale = SeatInventoryMessage::Expire {
        hold_id: "h-1".into(),
        expires_at: old,
    };
    let seats = runtime
        .testing()
        .deliver::<SeatInventory>("show-42", stale)
        .await
        .unwrap();

    assert_eq!(seats, 3);
    let after = show.snapshot().await.unwrap();
    assert_eq!(after.holds, before.holds);
    assert_eq!(
        HoldStatus::Held {
            expires_at: after.holds["h-1"].expires_at
        },
        extended
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_third_extension_is_rejected_with_extension_limit() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 1).await.unwrap();
    show.extend_hold("h-1").await.unwrap();
    show.extend_hold("h-1").await.unwrap();

    assert_eq!(
        rejection_code(show.extend_hold("h-1").await),
        "extension_limit"
    );
    assert_eq!(show.snapshot().await.unwrap().holds["h-1"].extensions, 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_confirmation_retry_returns_the_same_result_and_cancels_the_reminder() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 2).await.unwrap();

    let first = show.confirm("h-1").await.unwrap();
    let retry = show.confirm("h-1").await.unwrap();

    assert_eq!(first, HoldStatus::Confirmed);
    assert_eq!(retry, HoldStatus::Confirmed);
    let state = show.snapshot().await.unwrap();
    assert_eq!(state.confirmed.len(), 1);
    assert_eq!(state.confirmed["h-1"], 2);
    assert!(state.holds.is_empty());
    harness.advance_minutes(16);
    assert_eq!(fire_due_reminders(&runtime).await, 0);
    assert_eq!(show.seats_left().await.unwrap(), 3);
    runtime.close().await;
}

#[tokio::test]
async fn a_confirmation_after_expiry_is_rejected_with_no_hold() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 2).await.unwrap();
    harness.advance_minutes(16);
    assert_eq!(fire_due_reminders(&runtime).await, 1);

    assert_eq!(rejection_code(show.confirm("h-1").await), "no_hold");
    assert!(show.snapshot().await.unwrap().confirmed.is_empty());
    assert_eq!(show.seats_left().await.unwrap(), 5);
    runtime.close().await;
}

#[tokio::test]
async fn past_the_deadline_before_the_reminder_runs_the_hold_is_gone() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 2).await.unwrap();
    harness.advance_minutes(16);

    assert_eq!(rejection_code(show.confirm("h-1").await), "no_hold");
    assert_eq!(rejection_code(show.extend_hold("h-1").await), "no_hold");
    assert_eq!(show.seats_left().await.unwrap(), 5);
    let state = show.snapshot().await.unwrap();
    assert!(state.confirmed.is_empty());
    assert!(
        state.holds.contains_key("h-1"),
        "no reminder ran, so the expired hold is still stored"
    );
    runtime.close().await;
}

#[tokio::test]
async fn holds_for_zero_or_negative_seats_are_rejected_with_invalid_seats() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 1).await.unwrap();

    assert_eq!(
        rejection_code(show.hold("h-0", "ben", 0).await),
        "invalid_seats"
    );
    assert_eq!(
        rejection_code(show.hold("h-5", "cy", -5).await),
        "invalid_seats"
    );

    assert_eq!(show.seats_left().await.unwrap(), 4);
    assert_eq!(show.snapshot().await.unwrap().holds.len(), 1);
    runtime.close().await;
}

#[tokio::test]
async fn a_hold_that_falls_due_while_the_runtime_is_stopped_expires_after_a_restart() {
    let harness = Harness::new();
    let (runtime, show) = show(&harness, 5).await;
    show.hold("h-1", "ana", 2).await.unwrap();
    runtime.close().await;
    drop(show);

    harness.advance_minutes(16);
    let runtime = harness.start().await;
    let show = runtime.reference::<SeatInventory>("show-42");
    assert_eq!(show.snapshot().await.unwrap().holds.len(), 1);

    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert!(show.snapshot().await.unwrap().holds.is_empty());
    assert_eq!(show.seats_left().await.unwrap(), 5);
    runtime.close().await;
}

/// From the guide's "Payment and other side effects": the payment is an effect, run after
/// the turn commits with a stable idempotency key, and the hold is confirmed after it.
#[tokio::test]
async fn a_payment_is_staged_as_an_effect_and_confirms_the_hold_after_it_runs() {
    use std::sync::{Arc, Mutex};

    let charged = Arc::new(Mutex::new(Vec::new()));
    let (harness, runtime) = started_with(|builder| {
        builder.effect({
            let charged = Arc::clone(&charged);
            move |charge: inventory::ChargeHold, context: solid_objects::EffectContext| {
                let charged = Arc::clone(&charged);
                async move {
                    charged.lock().unwrap().push(context.id().to_owned());
                    context
                        .runtime()
                        .reference::<SeatInventory>(context.actor_id())
                        .confirm(charge.hold_id)
                        .await?;
                    Ok::<(), solid_objects::Failure>(())
                }
            }
        })
    })
    .await;
    let show = runtime.reference::<SeatInventory>("show-42");
    show.open_show(5).await.unwrap();
    show.hold("h-1", "ana", 2).await.unwrap();

    assert!(matches!(
        show.pay("h-1").await.unwrap(),
        HoldStatus::Held { .. }
    ));
    assert!(
        show.snapshot().await.unwrap().confirmed.is_empty(),
        "not before the charge"
    );
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);

    assert_eq!(charged.lock().unwrap().len(), 1);
    assert_eq!(show.snapshot().await.unwrap().confirmed["h-1"], 2);
    harness.advance_minutes(16);
    assert_eq!(rejection_code(show.pay("h-2").await), "no_hold");
    runtime.close().await;
}
