//! The expiring-reservations guide: one `SeatInventory` actor per show.
//!
//! `cargo run --example seat_inventory` walks a show through holds, an extension, a payment
//! (an effect that confirms the hold after it charged), and an expiry on a manual clock, and
//! prints each step.

mod inventory;

use std::time::Duration;

use inventory::{ChargeHold, HoldStatus, SeatInventory};
use solid_objects::prelude::*;
use solid_objects::EffectContext;

/// The payment provider's side of `ChargeHold`: charge once per effect id, then confirm.
async fn charge(charge: ChargeHold, context: EffectContext) -> Result<(), Failure> {
    println!(
        "  provider: charge {} for {} seat(s), idempotency key {}",
        charge.buyer,
        charge.seats,
        context.id()
    );
    let show = context
        .runtime()
        .reference::<SeatInventory>(context.actor_id());
    match show.confirm(charge.hold_id).await {
        Ok(_) => Ok(()),
        Err(Error::Rejected(rejection)) => {
            println!("  provider: refund {} ({rejection})", charge.buyer);
            Ok(())
        }
        Err(error) => Err(Failure::retryable(error)),
    }
}

/// Moves `clock` on by `minutes` and fires the reminders then due; returns how many fired.
async fn fire_after(runtime: &Runtime, clock: &ManualClock, minutes: u64) -> Result<usize, Error> {
    clock.advance(Duration::from_secs(minutes * 60));
    Ok(runtime
        .testing()
        .run_due_reminders()
        .await?
        .occurrences_fired)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::starting_now();
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("shows.db"))
        .clock(clock.clone())
        .policy(AllowAll)
        .effect(charge)
        .set_default() // `Actor::reference(id)` below reaches this runtime
        .start()
        .await?;
    let show = SeatInventory::reference("show-42");

    println!("open with 5 seats: {} left", show.open_show(5).await?);
    let held = show.hold("h-ana", "ana", 2).await?;
    println!("ana holds 2: {held:?}");
    println!(
        "ana's retry takes nothing more: {:?}",
        show.hold("h-ana", "ana", 2).await?
    );
    show.hold("h-ben", "ben", 2).await?;
    match show.hold("h-cy", "cy", 2).await {
        Err(Error::Rejected(rejection)) => println!("cy wants 2: {rejection}"),
        other => println!("cy wants 2: unexpected {other:?}"),
    }
    println!("ben extends: {:?}", show.extend_hold("h-ben").await?);
    println!("ana pays: {:?}", show.pay("h-ana").await?);
    runtime.testing().run_effects().await?;
    assert!(show.snapshot().await?.confirmed.contains_key("h-ana"));
    assert_eq!(show.confirm("h-ana").await?, HoldStatus::Confirmed);
    println!("ana is confirmed; {} left", show.seats_left().await?);

    let fired = fire_after(&runtime, &clock, 16).await?;
    println!(
        "16 minutes later, {fired} reminders fired; {} left",
        show.seats_left().await?
    );
    let fired = fire_after(&runtime, &clock, 5).await?;
    println!(
        "21 minutes later, {fired} reminder fired; {} left",
        show.seats_left().await?
    );
    let state = show.snapshot().await?;
    println!("confirmed: {:?}, holds: {:?}", state.confirmed, state.holds);
    runtime.close().await;
    Ok(())
}
