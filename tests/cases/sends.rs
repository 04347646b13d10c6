//! Messages between actors: `turn.send::<B>(id).command(..)` commits with the sending turn,
//! in order, or not at all.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use solid_objects::prelude::*;
use support::fixtures::{started, started_on};
use support::{count, rejection_code};

/// Stock of one product: reservations by order.
#[actor]
#[derive(Default)]
struct Stock {
    reserved: BTreeMap<String, u32>,
    arrivals: Vec<String>,
}

#[actor]
impl Stock {
    #[command]
    fn reserve(&mut self, order_id: String, quantity: u32) -> u32 {
        self.arrivals.push(order_id.clone());
        *self.reserved.entry(order_id).or_default() += quantity;
        self.reserved.values().sum()
    }
}

/// An order that reserves its lines in the stock actors.
#[actor]
#[derive(Default)]
struct Order {
    lines: Vec<(String, u32)>,
    placed: bool,
    follow_ups: u32,
}

#[actor]
impl Order {
    #[command]
    fn place(
        &mut self,
        turn: &mut Turn<Self>,
        lines: Vec<(String, u32)>,
    ) -> Result<usize, Rejection> {
        if lines.is_empty() {
            return Err(reject!(empty_order, "An order needs at least one line"));
        }
        let order_id = turn.actor_id().to_owned();
        for (sku, quantity) in &lines {
            turn.send::<Stock>(sku).reserve(order_id.clone(), *quantity);
        }
        turn.send::<Order>(order_id).follow_up();
        self.lines = lines;
        self.placed = true;
        Ok(self.lines.len())
    }

    #[command]
    fn place_then_fail(&mut self, turn: &mut Turn<Self>, sku: String) -> Result<(), Failure> {
        let order_id = turn.actor_id().to_owned();
        turn.send::<Stock>(sku).reserve(order_id, 1);
        Err(Failure::permanent("the payment service said no"))
    }

    /// Asks the stock to reserve later, under a key: a duplicate run of this command (a late
    /// or repeated delivery) sends nothing more.
    #[command]
    fn reserve_later(&mut self, turn: &mut Turn<Self>, sku: String, minutes: i64) {
        let order_id = turn.actor_id().to_owned();
        turn.send::<Stock>(sku)
            .delay(TimeDelta::minutes(minutes))
            .idempotency_key(format!("reserve/{order_id}"))
            .reserve(order_id, 1);
    }

    #[command]
    fn follow_up(&mut self) -> u32 {
        self.follow_ups += 1;
        self.follow_ups
    }
}

#[tokio::test]
async fn a_turn_sends_its_messages_when_it_commits_and_they_run_in_order() {
    let (harness, runtime, order) = started_on::<Order>("o-1").await;
    let second = runtime.reference::<Order>("o-2");

    let lines = vec![("apple".to_owned(), 2), ("pear".to_owned(), 1)];
    assert_eq!(order.place(lines).await.unwrap(), 2);
    second.place(vec![("apple".to_owned(), 5)]).await.unwrap();
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'ready'").await,
        5,
        "three reservations and two follow-ups wait in their mailboxes"
    );

    assert_eq!(runtime.testing().drain().await.unwrap().turns, 5);
    let apple = runtime
        .reference::<Stock>("apple")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(apple.arrivals, ["o-1", "o-2"]);
    assert_eq!(apple.reserved["o-1"], 2);
    assert_eq!(apple.reserved["o-2"], 5);
    let pear = runtime.reference::<Stock>("pear").snapshot().await.unwrap();
    assert_eq!(pear.reserved["o-1"], 1);
    assert_eq!(
        order.snapshot().await.unwrap().follow_ups,
        1,
        "a message to itself"
    );
    assert_eq!(
        order.follow_up().await.unwrap(),
        2,
        "its mailbox counts stay right"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_rejected_or_failed_turn_sends_nothing() {
    let (harness, runtime, order) = started_on::<Order>("o-1").await;

    assert_eq!(rejection_code(order.place(Vec::new()).await), "empty_order");
    assert!(matches!(
        order.place_then_fail("apple").await,
        Err(Error::HandlerFailed { retry_at: None, .. })
    ));

    assert_eq!(
        count(&harness, "solid_messages WHERE actor_type = 'Stock'").await,
        0
    );
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 0);
    runtime.close().await;
}

#[tokio::test]
async fn a_worker_runs_what_other_actors_sent_even_if_nothing_referenced_the_target() {
    let (harness, runtime) = started().await;
    let order = runtime.reference::<Order>("o-1");
    order.place(vec![("plum".to_owned(), 3)]).await.unwrap();
    runtime.close().await;

    let runtime = harness
        .builder()
        .await
        .actor::<Stock>()
        .actor::<Order>()
        .start()
        .await
        .unwrap();
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 2);
    let plum = runtime.reference::<Stock>("plum").snapshot().await.unwrap();
    assert_eq!(plum.reserved["o-1"], 3);
    runtime.close().await;
}

#[tokio::test]
async fn a_delayed_send_waits_and_a_keyed_send_arrives_once() {
    let (harness, runtime, order) = started_on::<Order>("o-1").await;
    let stock = runtime.reference::<Stock>("sku-1");

    order.reserve_later("sku-1", 10).await.unwrap();
    runtime
        .testing()
        .deliver::<Order>(
            "o-1",
            OrderMessage::ReserveLater {
                sku: "sku-1".into(),
                minutes: 10,
            },
        )
        .await
        .unwrap();
    runtime.testing().drain().await.unwrap();
    let before = stock.snapshot().await.unwrap().arrivals;
    harness.advance_minutes(11);
    runtime.testing().drain().await.unwrap();

    assert!(
        before.is_empty(),
        "the delayed message ran early: {before:?}"
    );
    assert_eq!(stock.snapshot().await.unwrap().arrivals, ["o-1"]);
    assert_eq!(
        count(&harness, "solid_messages WHERE actor_id = 'sku-1'").await,
        1
    );
    runtime.close().await;
}

/// A delayed send holds back that message, not its target.
/// A delayed message waits in the target's mailbox with `available_at` in the future; other
/// senders' messages and callers' synchronous calls to the target run meanwhile (else any actor
/// could stop a shared actor for a century with `.delay(TimeDelta::days(36500))`), and the
/// delayed message runs once it is due.
#[tokio::test]
async fn a_delayed_send_does_not_hold_the_target_for_other_callers() {
    let (harness, runtime, shopper) = started_on::<Order>("alice").await;
    shopper.reserve_later("w-1", 24 * 365 * 60).await.unwrap();

    // Another customer reserves now, synchronously.
    let warehouse = runtime
        .reference::<Stock>("w-1")
        .timeout(Duration::from_millis(500));
    let now = warehouse.reserve("bob", 1).await;
    assert!(
        matches!(now, Ok(1)),
        "a delayed message from one sender holds the warehouse for a year: {now:?}"
    );
    // The delayed message still runs, once it is due.
    runtime.testing().drain().await.unwrap();
    assert_eq!(warehouse.snapshot().await.unwrap().arrivals, ["bob"]);
    harness.advance_minutes(24 * 365 * 60 + 1);
    runtime.testing().drain().await.unwrap();
    assert_eq!(
        warehouse.snapshot().await.unwrap().arrivals,
        ["bob", "alice"]
    );
}
