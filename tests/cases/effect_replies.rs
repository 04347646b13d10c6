//! Effect outcomes back to the actor: `turn.emit(e).on_success().<reply>()` delivers the
//! handler's output, `.on_failure().<reply>()` an `EffectFailure<E>` (which carries the
//! effect, and the id `turn.emit(..).id()` gave the emitting turn) once the effect failed
//! for good, each as a message enqueued in the transaction that records the outcome, in the
//! incarnation that emitted the effect; no caller can send a `#[reply]` itself.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::EffectFailure;
use support::{count, execute, Harness};

#[derive(Serialize, Deserialize)]
struct ChargeCard {
    cents: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Charged {
    charge_id: String,
    cents: i64,
}

impl Effect for ChargeCard {
    const NAME: &'static str = "charge_card";
    type Output = Charged;
}

#[derive(Serialize, Deserialize)]
struct Notify;

impl Effect for Notify {
    const NAME: &'static str = "notify";
    type Output = ();
}

#[actor]
#[derive(Debug, Default)]
struct Order {
    log: Vec<String>,
    /// The ids of the charges emitted, in order.
    charging: Vec<String>,
    /// The charges that failed for good: their ids and amounts.
    unpaid: Vec<(String, i64)>,
}

#[actor]
impl Order {
    #[command]
    fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) -> Result<(), Rejection> {
        if cents == 0 {
            turn.emit(ChargeCard { cents }).on_success().charged();
            return Err(reject!(nothing_to_pay, "Nothing to pay"));
        }
        let emitted = turn.emit(ChargeCard { cents });
        self.charging.push(emitted.id().to_owned());
        emitted.on_success().charged().on_failure().charge_failed();
        self.log.push(format!("charging {cents}"));
        Ok(())
    }

    /// Emits without naming any reply.
    #[command]
    fn pay_quietly(&mut self, turn: &mut Turn<Self>, cents: i64) {
        turn.emit(ChargeCard { cents });
    }

    #[command]
    fn notify(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Notify).on_success().notified();
    }

    #[command]
    fn note(&mut self, entry: String) {
        self.log.push(entry);
    }

    #[reply]
    fn charged(&mut self, turn: &mut Turn<Self>, receipt: Charged) {
        self.log.push(format!(
            "paid {} by {} in incarnation {}",
            receipt.cents,
            receipt.charge_id,
            turn.incarnation()
        ));
    }

    #[reply]
    fn charge_failed(&mut self, failure: EffectFailure<ChargeCard>) {
        self.unpaid
            .push((failure.effect_id.clone(), failure.effect.cents));
        self.log.push(format!(
            "unpaid after {} attempt(s) of {}: {}",
            failure.attempts, failure.name, failure.error
        ));
    }

    #[reply]
    fn notified(&mut self, _done: ()) {
        self.log.push("notified".to_owned());
    }
}

/// A card processor whose first `failures` calls time out; a charge of 13 cents is
/// declined for good, and one of 99 answers with an id too large to store.
fn processor(harness: &Harness, failures: u32) -> impl std::future::Future<Output = Runtime> + '_ {
    let failures = Arc::new(AtomicU32::new(failures));
    async move {
        harness
            .store()
            .await
            .clock(harness.clock.clone())
            .policy(AllowAll)
            .effect(move |charge: ChargeCard, context: EffectContext| {
                let failures = Arc::clone(&failures);
                async move {
                    if charge.cents == 13 {
                        return Err(Failure::permanent("card declined"));
                    }
                    if failures.load(Ordering::SeqCst) > 0 {
                        failures.fetch_sub(1, Ordering::SeqCst);
                        return Err(Failure::retryable("the processor timed out"));
                    }
                    let charge_id = if charge.cents == 99 {
                        "x".repeat(2 * 1024 * 1024)
                    } else {
                        format!("ch-{}", context.attempt())
                    };
                    Ok(Charged {
                        charge_id,
                        cents: charge.cents,
                    })
                }
            })
            .effect(|_: Notify, _: EffectContext| async { Ok(()) })
            .start()
            .await
            .expect("the runtime starts")
    }
}

#[tokio::test]
async fn the_output_of_a_succeeded_effect_reaches_the_command_named_for_it() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();
    order.note("after paying").await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    assert_eq!(
        order.snapshot().await.unwrap().log,
        [
            "charging 250",
            "after paying",
            "paid 250 by ch-1 in incarnation 1"
        ]
    );
    // Once per outcome: nothing runs again, nothing more arrives.
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    assert_eq!(count(&harness, "solid_messages").await, 3);
    runtime.close().await;
}

#[tokio::test]
async fn a_retried_effect_replies_once_when_it_finally_succeeds() {
    let harness = Harness::new();
    let runtime = processor(&harness, 2).await;
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();

    for _ in 0..3 {
        runtime.testing().run_effects().await.unwrap();
        runtime.testing().drain().await.unwrap();
        harness.advance_minutes(10);
    }

    assert_eq!(
        order.snapshot().await.unwrap().log,
        ["charging 250", "paid 250 by ch-3 in incarnation 1"]
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_that_fails_for_good_sends_its_failure_to_the_failure_command() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(13).await.unwrap();

    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();

    let state = order.snapshot().await.unwrap();
    assert_eq!(
        state.log,
        [
            "charging 13",
            "unpaid after 1 attempt(s) of charge_card: card declined"
        ]
    );
    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        state.unpaid,
        [(state.charging[0].clone(), 13)],
        "the failure reply carries the effect and the id its turn got from emit"
    );
    assert_eq!(dead[0].effect_id, state.charging[0]);
    runtime.close().await;
}

#[tokio::test]
async fn retryable_failures_reply_only_after_the_last_attempt() {
    let harness = Harness::new();
    let runtime = harness
        .store()
        .await
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .retry(solid_objects::RetryPolicy::default().max_attempts(3))
        .effect(|_: ChargeCard, _: EffectContext| async {
            Err::<Charged, _>(Failure::retryable("the processor timed out"))
        })
        .start()
        .await
        .unwrap();
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();

    let mut logs = Vec::new();
    for _ in 0..3 {
        runtime.testing().run_effects().await.unwrap();
        runtime.testing().drain().await.unwrap();
        logs.push(order.snapshot().await.unwrap().log.len());
        harness.advance_minutes(60);
    }

    assert_eq!(
        logs,
        [1, 1, 2],
        "the failure arrives after the third attempt only"
    );
    assert_eq!(
        order.snapshot().await.unwrap().log[1],
        "unpaid after 3 attempt(s) of charge_card: the processor timed out"
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_output_too_large_for_its_command_fails_the_effect_with_a_clear_error() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(99).await.unwrap();

    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();

    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("its output cannot go back to Order"),
        "{}",
        dead[0].last_error.as_deref().unwrap_or_default()
    );
    let log = order.snapshot().await.unwrap().log;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[1].starts_with("unpaid after 1 attempt(s)"), "{log:?}");
    runtime.close().await;
}

#[tokio::test]
async fn a_rejected_turn_emits_nothing_and_nothing_replies() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");

    assert!(order.pay(0).await.is_err());

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    assert_eq!(count(&harness, "solid_effects").await, 0);
    assert_eq!(count(&harness, "solid_messages").await, 1);
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_without_replies_and_a_unit_output_work_as_before() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay_quietly(250).await.unwrap();
    order.notify().await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 2);
    runtime.testing().drain().await.unwrap();

    assert_eq!(order.snapshot().await.unwrap().log, ["notified"]);
    runtime.close().await;
}

#[tokio::test]
async fn the_reply_of_an_effect_from_a_destroyed_incarnation_never_lands_on_the_next() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();
    order.destroy().await.unwrap();
    order.note("new incarnation").await.unwrap();

    // The effect of the committed turn still runs; its reply belongs to incarnation 1.
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    assert_eq!(order.snapshot().await.unwrap().log, ["new incarnation"]);
    let statuses: Vec<String> = sqlx_statuses(&harness).await;
    assert_eq!(
        statuses,
        ["completed", "completed", "destroyed"],
        "pay, note, the reply"
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_stored_reply_that_does_not_read_fails_the_effect_and_wedges_nothing() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();
    execute(&harness, "UPDATE solid_effects SET on_success = 'not json'").await;

    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();

    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("stored on_success reply does not read"),
        "{}",
        dead[0].last_error.as_deref().unwrap_or_default()
    );
    // Its failure reply still reaches the actor, and the actor goes on.
    order.note("later").await.unwrap();
    let log = order.snapshot().await.unwrap().log;
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[2], "later");
    runtime.close().await;
}

#[tokio::test]
async fn a_reply_waits_in_the_mailbox_as_an_ordinary_message() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    order.pay(250).await.unwrap();
    runtime.testing().run_effects().await.unwrap();

    let ready = sqlx_statuses(&harness).await;
    runtime.testing().drain().await.unwrap();

    assert_eq!(ready, ["completed", "ready"]);
    assert!(matches!(
        runtime
            .admin()
            .dead_letters(
                &solid_objects::admin::DeadLetterFilter::new()
                    .include_retried()
                    .limit(10)
            )
            .await
            .unwrap()
            .as_slice(),
        []
    ));
    runtime.close().await;
}

#[tokio::test]
async fn a_caller_cannot_forge_an_effect_reply_and_nothing_is_written() {
    let harness = Harness::new();
    let runtime = processor(&harness, 0).await;
    let order = runtime.reference::<Order>("o");
    let forged = || OrderMessage::Charged {
        receipt: Charged {
            charge_id: "forged".to_owned(),
            cents: 250,
        },
    };

    // The typed reference has no `charged` to call; the untyped one is refused at the door.
    let called = order.as_reference().call::<()>(forged()).await;
    let enqueued = order
        .as_reference()
        .enqueue_builder()
        .send::<()>(forged())
        .await;

    for refused in [called.map(drop), enqueued.map(drop)] {
        let error = refused.expect_err("a forged reply must be refused");
        assert!(
            matches!(&error, Error::ReplyNotCallable { actor_type: "Order", operation } if operation == "charged"),
            "{error}"
        );
        assert!(
            error.to_string().contains("only the runtime delivers it"),
            "{error}"
        );
    }
    assert_eq!(count(&harness, "solid_messages").await, 0);
    runtime.close().await;
}

/// The statuses of every message, oldest first.
async fn sqlx_statuses(harness: &Harness) -> Vec<String> {
    let pool = support::connect(harness).await;
    let statuses = sqlx::query_scalar("SELECT status FROM solid_messages ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    statuses
}

/// Prints a label: the printer refuses every label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PrintLabel {
    text: String,
}

impl Effect for PrintLabel {
    const NAME: &'static str = "print_label";
    type Output = ();
}

#[actor]
#[derive(Debug, Default)]
struct Shipment {
    failed: Vec<usize>,
}

#[actor]
impl Shipment {
    #[command]
    fn label(&mut self, turn: &mut Turn<Self>, text: String) {
        turn.emit(PrintLabel { text }).on_failure().label_failed();
    }

    #[reply]
    fn label_failed(&mut self, failure: EffectFailure<PrintLabel>) {
        self.failed.push(failure.effect.text.len());
    }
}

/// The failure reply carries the effect; an effect that was small enough to emit must be
/// small enough to come back in its failure reply, or its actor never learns it failed. An
/// effect that names a failure reply leaves 512 bytes of the arguments limit for the
/// failure's envelope (an effect that does not is refused when emitted, and nothing of its
/// turn is kept), and the failure's error text is cut to the room that is left.
#[tokio::test]
async fn the_failure_reply_of_an_effect_near_the_arguments_limit_still_arrives() {
    let harness = Harness::new();
    let limit = 16 * 1024;
    let runtime = harness
        .store()
        .await
        .clock(harness.clock.clone())
        .policy(AllowAll)
        .limits(solid_objects::Limits::new().max_arguments_bytes(limit))
        .effect(|_: PrintLabel, _: EffectContext| async {
            Err::<(), _>(Failure::permanent(
                "the printer is out of ink. ".repeat(200),
            ))
        })
        .start()
        .await
        .unwrap();
    let shipment = runtime.reference::<Shipment>("s");

    // Over the limit once the failure's room is counted: the turn fails for good (its
    // message is a dead letter), and nothing of it is kept.
    let too_big = shipment.label("x".repeat(limit - 100)).await.unwrap_err();
    assert!(
        too_big
            .to_string()
            .contains("whose failure reply carries it back")
            && too_big
                .to_string()
                .contains("over the limit of 15872 bytes"),
        "{too_big}"
    );
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    assert!(shipment.snapshot().await.unwrap().failed.is_empty());

    // The command's arguments and the effect both fit the limit, with the failure's room.
    let text = "x".repeat(limit - 512 - 40);
    shipment.label(text.clone()).await.unwrap();

    runtime.testing().run_effects().await.unwrap();
    runtime.testing().drain().await.unwrap();

    let dead = runtime
        .admin()
        .effects(
            &solid_objects::admin::EffectFilter::new()
                .status("dead")
                .limit(10),
        )
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0]
        .last_error
        .as_deref()
        .unwrap_or_default()
        .starts_with("the printer is out of ink"));
    assert_eq!(
        shipment.snapshot().await.unwrap().failed,
        [text.len()],
        "the effect died, but its failure reply (the effect plus the error) was over the \
         arguments limit and was dropped: the actor never learns"
    );
    runtime.close().await;
}
