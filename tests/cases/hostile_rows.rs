//! Stored rows hold whatever the database holds: arbitrary text in every column the runtime
//! decodes (state, arguments, results, reminder arguments, effect payloads, the trace context
//! stored with messages, reminders and effects) gets an error or a counted failure, never a
//! panic, and never a message that waits forever uncounted.

use crate::support;

use proptest::prelude::*;
use solid_objects::admin::DeadLetterFilter;
use solid_objects::prelude::*;
use solid_objects::{EffectContext, MessageStatus};
use support::effect_actors::Charge;
use support::fixtures::started_with;
use support::{Backend, Harness};

#[actor]
#[derive(Default)]
struct Ledger {
    entries: Vec<String>,
}

#[actor]
impl Ledger {
    #[command]
    fn add(&mut self, turn: &mut Turn<Self>, entry: String) -> usize {
        if entry == "remind" {
            turn.schedule(turn.now(), "soon").settle(entry.clone());
        }
        if entry == "notify" {
            turn.emit(Charge { tag: entry.clone() });
        }
        self.entries.push(entry);
        self.entries.len()
    }

    #[reminder]
    fn settle(&mut self, entry: String) {
        self.entries.push(format!("settled {entry}"));
    }
}

/// Stored text: JSON of many shapes, raw bytes, or brackets nested past what JSON reads.
fn stored_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("{}".to_owned()),
        Just(r#"{"entry": 42}"#.to_owned()),
        Just(r#"{"entries": "no"}"#.to_owned()),
        prop::collection::vec(any::<u8>(), 0..48)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', "")),
        (120_usize..260).prop_map(|depth| "[".repeat(depth) + &"]".repeat(depth)),
        ".{0,24}",
    ]
}

/// The columns the runtime decodes, each given one stored text.
#[derive(Debug, Clone)]
struct Corruption {
    state: Option<String>,
    arguments: Option<String>,
    result: Option<String>,
    reminder: Option<String>,
    payload: Option<String>,
    traceparent: Option<String>,
}

fn corruption() -> impl Strategy<Value = Corruption> {
    (
        prop::option::of(stored_text()),
        prop::option::of(stored_text()),
        prop::option::of(stored_text()),
        prop::option::of(stored_text()),
        prop::option::of(stored_text()),
        prop::option::of(stored_text()),
    )
        .prop_map(
            |(state, arguments, result, reminder, payload, traceparent)| Corruption {
                state,
                arguments,
                result,
                reminder,
                payload,
                traceparent,
            },
        )
}

async fn corrupt(harness: &Harness, column: &str, value: Option<&String>) {
    let Some(value) = value else { return };
    let pool = support::connect(harness).await;
    let written = sqlx::query(&harness.sql(column))
        .bind(value)
        .execute(&pool)
        .await;
    pool.close().await;
    // SQLite holds any text; a server refuses some (PostgreSQL a NUL byte, for one), and
    // what it refuses it does not hold, so there is nothing to survive.
    if harness.backend() == Backend::Sqlite {
        written.unwrap();
    }
}

async fn survive(corruption: Corruption) {
    let (harness, runtime) =
        started_with(|builder| builder.effect(|_: Charge, _: EffectContext| async { Ok(()) }))
            .await;
    let ledger = runtime.reference::<Ledger>("l");
    ledger.add("remind").await.unwrap();
    ledger.add("notify").await.unwrap();
    let done = ledger.enqueue().add("done").await.unwrap();
    runtime.testing().drain().await.unwrap();
    let queued = ledger.enqueue().add("queued").await.unwrap();

    let columns = [
        ("UPDATE solid_instances SET state = ?", &corruption.state),
        (
            "UPDATE solid_messages SET arguments = ? WHERE status = 'ready'",
            &corruption.arguments,
        ),
        (
            "UPDATE solid_messages SET result = ? WHERE status <> 'ready'",
            &corruption.result,
        ),
        (
            "UPDATE solid_reminders SET arguments = ?",
            &corruption.reminder,
        ),
        ("UPDATE solid_effects SET payload = ?", &corruption.payload),
    ];
    for (column, value) in columns {
        corrupt(&harness, column, value.as_ref()).await;
    }
    for table in ["solid_messages", "solid_reminders", "solid_effects"] {
        let sql = format!("UPDATE {table} SET traceparent = ?");
        corrupt(&harness, &sql, corruption.traceparent.as_ref()).await;
    }

    let _ = ledger.snapshot().await;
    let _ = done.result().await;
    let _ = done.status().await;
    let _ = runtime.admin().dead_letters(&DeadLetterFilter::new()).await;
    let _ = runtime.testing().run_due_reminders().await;
    let _ = runtime.testing().drain().await;
    let _ = runtime.testing().run_effects().await;

    let status = queued.status().await.unwrap();
    assert!(
        !matches!(status, MessageStatus::Ready { attempts: 0, .. }),
        "a message waits uncounted: {status:?} after {corruption:?}"
    );
    let other = runtime
        .reference::<Ledger>("other")
        .add("still works")
        .await;
    assert_eq!(other.unwrap(), 1, "after {corruption:?}");
    runtime.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn arbitrary_stored_text_never_panics_or_wedges(corruption in corruption()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(survive(corruption));
    }
}
