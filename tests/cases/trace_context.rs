//! The trace context across the durable boundary (feature `opentelemetry`): a message stores
//! the `traceparent` of the span that enqueued or sent it, a reminder that of the turn that
//! scheduled it, an effect that of the turn that emitted it, and an effect's reply that of
//! the effect's run; the span that takes each up later is a child of that span, in the same
//! trace. A stored `traceparent` that is not a valid one (of at most 55 bytes) is no parent
//! at all, and never fails a turn.

use crate::support;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, EffectContext};
use support::telemetry::{request_span, Finished, Telemetry};
use support::{Backend, Harness};
use tracing::dispatcher::DefaultGuard;
use tracing::Instrument;

/// The `traceparent` of the caller of the request that starts each trace.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER: &str = "b7ad6b7169203331";

/// Takes an order: reminds itself at once, sends the warehouse a message, and asks for a
/// label whose number comes back as a reply.
#[actor]
#[derive(Default)]
struct Desk {
    reminded: bool,
    label: Option<String>,
}

#[actor]
impl Desk {
    #[command]
    fn order(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now(), "follow-up").remind();
        turn.send::<Warehouse>("main").pick();
        let order = turn.actor_id().to_owned();
        turn.emit(Label { order }).on_success().labelled();
    }

    #[reminder]
    fn remind(&mut self) {
        self.reminded = true;
    }

    #[reply]
    fn labelled(&mut self, label: String) {
        self.label = Some(label);
    }
}

/// Picks what the desk ordered.
#[actor]
#[derive(Default)]
struct Warehouse {
    picked: u32,
}

#[actor]
impl Warehouse {
    #[command]
    fn pick(&mut self) {
        self.picked += 1;
    }
}

/// A shipping label for an order.
#[derive(Serialize, Deserialize)]
struct Label {
    order: String,
}

impl Effect for Label {
    const NAME: &'static str = "label";
    type Output = String;
}

/// A fresh harness, and a runtime on its database that prints labels, started while a
/// fresh telemetry is this thread's subscriber (it stays so while the guard lives).
async fn start_traced() -> (Harness, Telemetry, DefaultGuard, Runtime) {
    let harness = Harness::new();
    let telemetry = Telemetry::new();
    let current = telemetry.enter();
    let runtime = harness
        .builder()
        .await
        .effect(
            |label: Label, _: EffectContext| async move { Ok(format!("label-{}", label.order)) },
        )
        .start()
        .await
        .expect("the runtime starts");
    (harness, telemetry, current, runtime)
}

/// Runs the reminders, the messages and the effects until none is left, and the replies.
async fn run_everything(runtime: &Runtime) {
    let testing = runtime.testing();
    testing.drain().await.unwrap();
    testing.run_due_reminders().await.unwrap();
    testing.drain().await.unwrap();
    testing.run_effects().await.unwrap();
    testing.drain().await.unwrap();
}

/// The one span named `name` that ran `operation` among `spans`.
fn one<'s>(spans: &'s [Finished], name: &str, operation: &str) -> &'s Finished {
    let found: Vec<&Finished> = spans
        .iter()
        .filter(|span| span.name == name && span.operation == operation)
        .collect();
    assert_eq!(found.len(), 1, "one {name} {operation} in {spans:#?}");
    found[0]
}

/// The `traceparent` column of the messages of operation `operation` to the actor `id`, as
/// stored.
async fn stored(harness: &Harness, id: &str, operation: &str) -> Vec<Option<String>> {
    let sql = "SELECT traceparent FROM solid_messages WHERE actor_id = ? AND operation = ?";
    support::column(harness, sql, &[id, operation]).await
}

#[tokio::test]
async fn a_message_a_reminder_an_effect_and_its_reply_continue_the_trace_that_caused_them() {
    let (harness, telemetry, _current, runtime) = start_traced().await;
    let request = request_span("/orders", TRACEPARENT);
    runtime
        .reference::<Desk>("d-1")
        .enqueue()
        .order()
        .instrument(request.clone())
        .await
        .unwrap();
    drop(request);
    run_everything(&runtime).await;
    let desk = runtime.reference::<Desk>("d-1").snapshot().await.unwrap();
    assert!(desk.reminded);
    assert_eq!(desk.label.as_deref(), Some("label-d-1"));
    let warehouse = runtime.reference::<Warehouse>("main");
    assert_eq!(warehouse.snapshot().await.unwrap().picked, 1);
    runtime.close().await;

    let spans = telemetry.finished_with("request").await;
    let request = one(&spans, "request", "-");
    let order = one(&spans, "turn", "order");
    let chain = [
        (request, CALLER),
        (order, request.span_id.as_str()),
        (one(&spans, "turn", "pick"), order.span_id.as_str()),
        (one(&spans, "turn", "remind"), order.span_id.as_str()),
        (one(&spans, "effect", "label"), order.span_id.as_str()),
    ];
    for (span, parent) in chain {
        assert_eq!(span.parent_id, parent, "{span:?} follows what caused it");
    }
    let label = one(&spans, "effect", "label");
    assert_eq!(one(&spans, "turn", "labelled").parent_id, label.span_id);
    assert_eq!(spans.len(), 6, "no other span: {spans:#?}");
    for span in &spans {
        assert_eq!(span.trace_id, TRACE_ID, "{span:?} is the request's");
    }
    let enqueued = stored(&harness, "d-1", "order").await;
    let expected = format!("00-{TRACE_ID}-{}-01", request.span_id);
    assert_eq!(
        enqueued,
        [Some(expected)],
        "the enqueued message stores its caller"
    );
}

#[tokio::test]
async fn a_hostile_traceparent_is_never_stored_nor_followed_and_never_breaks_a_turn() {
    let (harness, telemetry, _current, runtime) = start_traced().await;
    let oversized = format!("00-{}", "z".repeat(10_000));
    // A valid one with more after it: the store reads 56 characters, one too many.
    let valid_then_more = format!("{TRACEPARENT}{}", "0".repeat(10_000));
    let hostile = [
        "not a traceparent",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-and-more",
        &oversized,
        &valid_then_more,
    ];
    for (index, traceparent) in hostile.iter().enumerate() {
        let desk = runtime.reference::<Desk>(format!("hostile-{index}"));
        // A request whose header is not a valid one starts a trace of its own: what the
        // message stores is that trace's context, never the header.
        let request = request_span("/orders", traceparent);
        desk.enqueue().order().instrument(request).await.unwrap();
        let id = format!("hostile-{index}");
        let [Some(written)] = &stored(&harness, &id, "order").await[..] else {
            panic!("the message stores its request's context");
        };
        assert!(
            written.len() == 55 && written.starts_with("00-"),
            "{written:?}"
        );
        assert_ne!(&written[3..35], TRACE_ID, "a trace of its own");

        // Whatever else the column comes to hold is no parent.
        corrupt_with(&harness, "solid_messages", &id, traceparent).await;
        runtime.testing().drain().await.unwrap();
        corrupt_with(&harness, "solid_reminders", &id, traceparent).await;
        corrupt_with(&harness, "solid_effects", &id, traceparent).await;
        run_everything(&runtime).await;
        let desk = desk.snapshot().await.unwrap();
        assert!(desk.reminded, "{traceparent:?}");
        assert_eq!(desk.label, Some(format!("label-{id}")), "{traceparent:?}");
    }
    runtime.close().await;

    // The turns and effects that read a hostile column are roots: run outside any span,
    // they have no parent to continue.
    let spans = telemetry.finished();
    for operation in ["order", "remind"] {
        let turns: Vec<&Finished> = spans
            .iter()
            .filter(|span| span.operation == operation)
            .collect();
        assert_eq!(turns.len(), hostile.len());
        assert!(turns.iter().all(|span| span.is_root()), "{turns:#?}");
    }
    let effects: Vec<&Finished> = spans.iter().filter(|span| span.name == "effect").collect();
    assert!(effects.iter().all(|span| span.is_root()), "{effects:#?}");
    assert!(spans.iter().all(|span| span.trace_id != TRACE_ID));
}

/// Writes `value` into the `traceparent` column of the rows of `table` for the actor id
/// `id`, over NULL: SQLite holds any text, a server refuses one longer than the column's 55
/// characters, and what it refuses it does not hold.
async fn corrupt_with(harness: &Harness, table: &str, id: &str, value: &str) {
    let pool = support::connect(harness).await;
    let clear = format!("UPDATE {table} SET traceparent = NULL WHERE actor_id = ?");
    sqlx::query(&harness.sql(&clear))
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    let write = format!("UPDATE {table} SET traceparent = ? WHERE actor_id = ?");
    let written = sqlx::query(&harness.sql(&write))
        .bind(value)
        .bind(id)
        .execute(&pool)
        .await;
    pool.close().await;
    if harness.backend() == Backend::Sqlite || value.len() <= 55 {
        written.unwrap();
    }
}

#[tokio::test]
async fn each_of_many_callers_of_one_actor_at_once_is_the_parent_of_the_turn_of_its_message() {
    const CALLERS: usize = 12;
    let (_harness, telemetry, _current, runtime) = start_traced().await;
    // Each caller in a trace of its own, all calling the one warehouse at once.
    let traceparent = |n: usize| format!("00-{:032x}-{:016x}-01", n + 1, n + 1);
    let calls = support::together(CALLERS, |n| {
        let warehouse = runtime.reference::<Warehouse>("main");
        let request = request_span("/picks", &traceparent(n));
        async move { warehouse.pick().instrument(request).await }
    })
    .await;
    for call in calls {
        call.unwrap();
    }
    runtime.close().await;

    let spans = telemetry
        .finished_once(|spans| {
            spans.iter().filter(|span| span.name == "request").count() == CALLERS
        })
        .await;
    let turns: Vec<&Finished> = spans
        .iter()
        .filter(|span| span.name == "turn" && span.operation == "pick")
        .collect();
    assert_eq!(turns.len(), CALLERS, "a turn per call: {spans:#?}");
    let orphans: Vec<String> = spans
        .iter()
        .filter(|span| span.name == "request")
        .filter(|request| {
            let children: Vec<&&Finished> = turns
                .iter()
                .filter(|turn| turn.parent_id == request.span_id)
                .collect();
            children.len() != 1 || children[0].trace_id != request.trace_id
        })
        .map(|request| request.trace_id.clone())
        .collect();
    assert!(
        orphans.is_empty(),
        "each caller's trace goes on in the turn of its message; not those of {} of \
         {CALLERS} callers: {orphans:?}; turns: {turns:#?}",
        orphans.len()
    );
}
