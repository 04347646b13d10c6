//! The race-conditions guide: one `EventTickets` actor per event.
//!
//! `cargo run --example event_tickets` releases ten buyers at once against three seats and
//! shows that exactly three hold one, then walks a hold through expiry on a manual clock.

mod tickets;

use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use tickets::{EventTickets, HoldOutcome};
use tokio::sync::Barrier;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::starting_now();
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("events.db"))
        .clock(clock.clone())
        .policy(AllowAll)
        .set_default() // `Actor::reference(id)` below reaches this runtime
        .start()
        .await?;
    let event = EventTickets::reference("concert");
    event.open_sales(3).await?;

    let barrier = Arc::new(Barrier::new(10));
    let buyers: Vec<_> = (0..10)
        .map(|buyer| {
            let event = event.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                event
                    .hold(format!("buyer-{buyer}"), format!("hold-{buyer}"))
                    .await
            })
        })
        .collect();
    let mut held = 0;
    for buyer in buyers {
        if matches!(buyer.await??, HoldOutcome::Held { .. }) {
            held += 1;
        }
    }
    println!("10 buyers at once against 3 seats: {held} hold one");
    assert_eq!(held, 3, "exactly as many holds as seats");

    clock.advance(Duration::from_secs(11 * 60));
    let fired = runtime
        .testing()
        .run_due_reminders()
        .await?
        .occurrences_fired;
    let free = event.seats_available().await?;
    println!("11 minutes later {fired} holds expired; {free} seats are free again");
    assert_eq!(
        (fired, free),
        (3, 3),
        "every hold expired and gave its seat back"
    );
    runtime.close().await;
    Ok(())
}
