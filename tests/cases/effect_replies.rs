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
use support::fixtures::started_with;
use support::operator::{dead_effects, dead_letters, last_error};
use support::workers::run_effects_and_replies;
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
async fn processor(harness: &Harness, failures: u32) -> Runtime {
    let failures = Arc::new(AtomicU32::new(failures));
    {
        harness
            .builder()
            .await
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

/// A fresh harness, a runtime on it with [`processor`]'s card processor, and order "o".
async fn order_on_processor(failures: u32) -> (Harness, Runtime, OrderRef) {
    let harness = Harness::new();
    let runtime = processor(&harness, failures).await;
    let order = runtime.reference::<Order>("o");
    (harness, runtime, order)
}

#[tokio::test]
async fn the_output_of_a_succeeded_effect_reaches_the_command_named_for_it() {
    let (harness, runtime, order) = order_on_processor(0).await;
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
    let (harness, runtime, order) = order_on_processor(2).await;
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
    let (_harness, runtime, order) = order_on_processor(0).await;
    order.pay(13).await.unwrap();

    run_effects_and_replies(&runtime).await;

    let state = order.snapshot().await.unwrap();
    assert_eq!(
        state.log,
        [
            "charging 13",
            "unpaid after 1 attempt(s) of charge_card: card declined"
        ]
    );
    let dead = dead_effects(&runtime).await;
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
    let (harness, runtime) = started_with(|builder| {
        builder
            .retry(solid_objects::RetryPolicy::default().max_attempts(3))
            .effect(|_: ChargeCard, _: EffectContext| async {
                Err::<Charged, _>(Failure::retryable("the processor timed out"))
            })
    })
    .await;
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
    let (_harness, runtime, order) = order_on_processor(0).await;
    order.pay(99).await.unwrap();

    run_effects_and_replies(&runtime).await;

    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert!(
        last_error(&dead[0]).contains("its output cannot go back to Order"),
        "{}",
        last_error(&dead[0])
    );
    let log = order.snapshot().await.unwrap().log;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[1].starts_with("unpaid after 1 attempt(s)"), "{log:?}");
    runtime.close().await;
}

#[tokio::test]
async fn a_rejected_turn_emits_nothing_and_nothing_replies() {
    let (harness, runtime, order) = order_on_processor(0).await;

    assert!(order.pay(0).await.is_err());

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 0);
    assert_eq!(count(&harness, "solid_effects").await, 0);
    // The order never lived and the call had no key: its rejection keeps no row either.
    assert_eq!(count(&harness, "solid_messages").await, 0);
    runtime.close().await;
}

#[tokio::test]
async fn an_effect_without_replies_and_a_unit_output_work_as_before() {
    let (_harness, runtime, order) = order_on_processor(0).await;
    order.pay_quietly(250).await.unwrap();
    order.notify().await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 2);
    runtime.testing().drain().await.unwrap();

    assert_eq!(order.snapshot().await.unwrap().log, ["notified"]);
    runtime.close().await;
}

#[tokio::test]
async fn the_reply_of_an_effect_from_a_destroyed_incarnation_never_lands_on_the_next() {
    let (harness, runtime, order) = order_on_processor(0).await;
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
    let (harness, runtime, order) = order_on_processor(0).await;
    order.pay(250).await.unwrap();
    execute(&harness, "UPDATE solid_effects SET on_success = 'not json'").await;

    run_effects_and_replies(&runtime).await;

    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert!(
        last_error(&dead[0]).contains("stored on_success reply does not read"),
        "{}",
        last_error(&dead[0])
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
    let (harness, runtime, order) = order_on_processor(0).await;
    order.pay(250).await.unwrap();
    runtime.testing().run_effects().await.unwrap();

    let ready = sqlx_statuses(&harness).await;
    runtime.testing().drain().await.unwrap();

    assert_eq!(ready, ["completed", "ready"]);
    assert!(matches!(dead_letters(&runtime).await.as_slice(), []));
    runtime.close().await;
}

#[tokio::test]
async fn a_caller_cannot_forge_an_effect_reply_and_nothing_is_written() {
    let (harness, runtime, order) = order_on_processor(0).await;
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
    support::column(
        harness,
        "SELECT status FROM solid_messages ORDER BY id",
        &[],
    )
    .await
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
    let limit = 16 * 1024;
    let (_harness, runtime) = started_with(|builder| {
        builder
            .limits(solid_objects::Limits::new().max_arguments_bytes(limit))
            .effect(|_: PrintLabel, _: EffectContext| async {
                Err::<(), _>(Failure::permanent(
                    "the printer is out of ink. ".repeat(200),
                ))
            })
    })
    .await;
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

    run_effects_and_replies(&runtime).await;

    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert!(last_error(&dead[0]).starts_with("the printer is out of ink"));
    assert_eq!(
        shipment.snapshot().await.unwrap().failed,
        [text.len()],
        "the effect died, but its failure reply (the effect plus the error) was over the \
         arguments limit and was dropped: the actor never learns"
    );
    runtime.close().await;
}

/// Fetches a document whose JSON nests as deep as serde_json reads back (127 levels).
#[derive(Serialize, Deserialize)]
struct FetchTree {
    depth: usize,
}

impl Effect for FetchTree {
    const NAME: &'static str = "deep_fetch_tree";
    type Output = Value;
}

#[derive(Serialize, Deserialize)]
struct Charge {
    cents: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
}

impl Effect for Charge {
    const NAME: &'static str = "card_charge";
    type Output = Receipt;
}

#[actor]
#[derive(Debug, Default)]
struct Till {
    log: Vec<String>,
}

#[actor]
impl Till {
    #[command]
    fn fetch(&mut self, turn: &mut Turn<Self>, depth: usize) {
        turn.emit(FetchTree { depth })
            .on_success()
            .fetched()
            .on_failure()
            .fetch_failed();
    }

    #[command]
    fn pay(&mut self, turn: &mut Turn<Self>, cents: i64) {
        turn.emit(Charge { cents })
            .on_success()
            .charged()
            .on_failure()
            .charge_failed();
    }

    #[reply]
    fn fetched(&mut self, tree: Value) {
        self.log.push(format!("fetched depth {}", depth_of(&tree)));
    }

    #[reply]
    fn charged(&mut self, receipt: Receipt) {
        self.log.push(format!("charged {}", receipt.charge_id));
    }

    #[reply]
    fn fetch_failed(&mut self, failure: EffectFailure<FetchTree>) {
        self.log
            .push(format!("failed {}: {}", failure.name, failure.error));
    }

    #[reply]
    fn charge_failed(&mut self, failure: EffectFailure<Charge>) {
        self.log
            .push(format!("failed {}: {}", failure.name, failure.error));
    }

    #[command]
    fn note(&mut self, entry: String) {
        self.log.push(entry);
    }
}

/// An array nested `depth` levels deep: `[[[...]]]`.
fn nested(depth: usize) -> Value {
    (1..depth).fold(Value::Array(Vec::new()), |inner, _| {
        Value::Array(vec![inner])
    })
}

fn depth_of(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

/// A till runtime whose card processor declines a charge of 13 cents for good the first
/// `declines` times it sees it, and charges everything else.
async fn till_runtime(harness: &Harness, declines: u32) -> Runtime {
    let declines = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(declines));
    harness
        .builder()
        .await
        .effect(|fetch: FetchTree, _: EffectContext| async move { Ok(nested(fetch.depth)) })
        .effect(move |charge: Charge, context: EffectContext| {
            let declines = std::sync::Arc::clone(&declines);
            async move {
                if charge.cents == 13 && declines.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                    declines.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    return Err(Failure::permanent("card declined"));
                }
                Ok(Receipt {
                    charge_id: format!("ch-{}", context.attempt()),
                })
            }
        })
        .start()
        .await
        .expect("the runtime starts")
}

/// A fresh harness, a runtime on it as [`till_runtime`] starts it, and till "t".
async fn till_on_processor(declines: u32) -> (Harness, Runtime, TillRef) {
    let harness = Harness::new();
    let runtime = till_runtime(&harness, declines).await;
    let till = runtime.reference::<Till>("t");
    (harness, runtime, till)
}

/// "Never commit what cannot be read back": an effect output at serde_json's nesting limit.
/// It passes the output's own read-back, but the reply command wraps it two levels deeper
/// (`{"operation":..,"arguments":{"tree":<output>}}`); the outcome must still reach the actor
/// (its output, or its failure), never a reply message committed unreadable.
#[tokio::test]
async fn an_effect_output_at_the_nesting_limit_still_reaches_its_actor() {
    let (_harness, runtime, till) = till_on_processor(0).await;
    till.fetch(127).await.unwrap();

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    let dead: Vec<(String, String)> = dead_letters(&runtime)
        .await
        .into_iter()
        .map(|letter| (letter.operation, letter.error))
        .collect();
    let log = till.snapshot().await.unwrap().log;
    assert_eq!(
        (dead.as_slice(), log.len()),
        (&[][..], 1),
        "the effect's outcome must reach the actor (its output, or its failure); instead the \
         reply was committed unreadable. dead letters: {dead:?}, actor log: {log:?}, dead \
         effects: {}",
        dead_effects(&runtime).await.len()
    );
}

/// A till on a fresh runtime as [`till_runtime`] starts it, whose charge of 250 cents waits to
/// run with its stored `on_success` reply overwritten by `on_success`.
async fn till_whose_stored_reply_is(on_success: &str) -> (Harness, Runtime, TillRef) {
    let (harness, runtime, till) = till_on_processor(0).await;
    till.pay(250).await.unwrap();
    let update = format!("UPDATE solid_effects SET on_success = '{on_success}'");
    execute(&harness, &update).await;
    (harness, runtime, till)
}

/// A stored `on_success` that names a command the actor does not have fails the effect for good.
/// "An unreadable stored reply fails the effect for good with a clear error", and unknown
/// operations in stored rows get a typed error and change nothing: the actor's mailbox never
/// gets an operation no build knows (as it would when a deploy renames the reply command while
/// effects emitted by the old build are still pending), and later calls to the actor go on.
#[tokio::test]
async fn a_stored_reply_naming_an_unknown_command_fails_the_effect_and_the_actor_goes_on() {
    let on_success = r#"{"operation":"refund_everything","argument":"receipt"}"#;
    let (_harness, runtime, till) = till_whose_stored_reply_is(on_success).await;

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let later = till.note("later".to_owned()).await;
    let dead_effects = dead_effects(&runtime).await;
    assert!(
        later.is_ok() && dead_effects.len() == 1,
        "the actor must go on and the effect fail for good with a clear error; the call got \
         {later:?}, dead effects: {}",
        dead_effects.len()
    );
}

/// A stored reply whose argument name is not the command's fails the effect for good.
/// The reply `{"wrong": <receipt>}` would be committed as arguments that never decode; instead
/// the effect is dead (and its failure reaches on_failure), and no dead letter is left.
#[tokio::test]
async fn a_stored_reply_with_a_wrong_argument_name_fails_the_effect_for_good() {
    let on_success = r#"{"operation":"charged","argument":"wrong"}"#;
    let (_harness, runtime, _till) = till_whose_stored_reply_is(on_success).await;

    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    runtime.testing().drain().await.unwrap();

    let dead_letters: Vec<String> = dead_letters(&runtime)
        .await
        .into_iter()
        .map(|letter| format!("{}: {}", letter.operation, letter.error))
        .collect();
    let dead_effects = dead_effects(&runtime).await.len();
    assert_eq!(
        (dead_letters.clone(), dead_effects),
        (Vec::<String>::new(), 1),
        "the effect must fail for good (and its failure reach on_failure), not commit a reply \
         that cannot be read: dead letters {dead_letters:?}"
    );
}

/// `Admin::retry_effect` revives a dead effect whose failure already went back to its
/// actor; the retry's success then reaches the `on_success` command too (documented on
/// `retry_effect`: an operator's retry is a new outcome, and an actor that treats a failure
/// as final says so in its state). Both arrive, in order, each once.
#[tokio::test]
async fn retrying_a_dead_effect_after_its_failure_went_back_reports_the_new_outcome_too() {
    let (_harness, runtime, till) = till_on_processor(1).await;
    till.pay(13).await.unwrap();
    run_effects_and_replies(&runtime).await;
    let dead = dead_effects(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        till.snapshot().await.unwrap().log,
        ["failed card_charge: card declined"]
    );

    // An operator retries the dead effect; the processor now accepts the card.
    assert!(runtime.admin().retry_effect(dead[0].id).await.unwrap());
    assert!(
        !runtime.admin().retry_effect(dead[0].id).await.unwrap(),
        "once"
    );
    run_effects_and_replies(&runtime).await;

    assert_eq!(
        till.snapshot().await.unwrap().log,
        ["failed card_charge: card declined", "charged ch-1"]
    );
}
