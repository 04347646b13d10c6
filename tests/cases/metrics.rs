//! Metrics: what the runtime records through the `metrics` facade, read back as the
//! Prometheus text an application would serve. One test drives every kind of event on a
//! manual clock. A process has one global recorder, shared by every case that reads metrics
//! (`support::prometheus`); this file's actor types (`Instrument`, `Buzzer`) are its own, so
//! the counts it reads are its own.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::metrics::{
    CALL_DURATION, EFFECT_OUTBOX_AGE, MAILBOX_DEPTH, MESSAGES_COMPLETED, MESSAGES_DEAD,
    MESSAGES_ENQUEUED, MESSAGES_FAILED, MESSAGES_REJECTED, REMINDER_LATENESS, TURN_DURATION,
};
use solid_objects::prelude::*;
use solid_objects::{Effect, EffectContext};
use support::fixtures::started_with;
use support::operator::dead_letters;
use support::rejection_code;
use support::workers::fire_due_reminders;

/// Tells the outside world something.
#[derive(Serialize, Deserialize)]
struct Announce;

impl Effect for Announce {
    const NAME: &'static str = "announce";
    type Output = ();
}

/// An actor with one command for each way a message can end.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Instrument {
    total: i64,
}

#[actor]
impl Instrument {
    #[command]
    fn add(&mut self, amount: i64) -> Result<i64, Rejection> {
        if amount <= 0 {
            return Err(reject!(not_positive, "Add a positive amount"));
        }
        self.total += amount;
        Ok(self.total)
    }

    #[command]
    fn fail(&mut self) -> Result<(), Failure> {
        Err(Failure::retryable("not today"))
    }

    #[command]
    fn ring_later(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now() + TimeDelta::minutes(1), "bell")
            .ring();
    }

    #[reminder]
    fn ring(&mut self, turn: &mut Turn<Self>) {
        turn.send::<Buzzer>("front").chime();
    }

    #[command]
    fn ping(&mut self, turn: &mut Turn<Self>) {
        turn.emit(Announce).on_success().pinged();
    }

    #[reply]
    fn pinged(&mut self, _done: ()) {}

    #[query]
    fn total(&self) -> i64 {
        self.total
    }
}

/// Another actor type, which a reminder's turn sends a message to.
#[actor]
#[derive(Default)]
struct Buzzer {
    chimes: u32,
}

#[actor]
impl Buzzer {
    #[command]
    fn chime(&mut self) {
        self.chimes += 1;
    }
}

/// The samples of a Prometheus text exposition, by metric name and label set.
struct Exposition(BTreeMap<(String, BTreeMap<String, String>), f64>);

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|label| !label.is_empty())
                .map(|label| {
                    let (key, value) = label.split_once('=').expect("a label has a value");
                    (key.to_owned(), value.trim_matches('"').to_owned())
                })
                .collect();
            let value = value.parse().expect("a sample's value is a number");
            samples.insert((name.to_owned(), labels), value);
        }
        Self(samples)
    }

    /// The sample of `name` for this actor type and operation (`None` when never recorded).
    fn get(&self, name: &str, actor_type: &str, operation: &str) -> Option<f64> {
        let labels = [("actor_type", actor_type), ("operation", operation)]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        self.0.get(&(name.to_owned(), labels)).copied()
    }

    fn count(&self, name: &str, actor_type: &str, operation: &str) -> f64 {
        self.get(name, actor_type, operation).unwrap_or(0.0)
    }

    fn depth(&self, actor_type: &str) -> Option<f64> {
        let labels = [("actor_type".to_owned(), actor_type.to_owned())].into();
        self.0.get(&(MAILBOX_DEPTH.to_owned(), labels)).copied()
    }
}

#[tokio::test]
async fn messages_turns_calls_reminders_and_effects_are_counted_by_actor_type_and_operation() {
    // Installed before the runtime starts, so it also gets the descriptions.
    let prometheus = support::prometheus();
    let (harness, runtime) = started_with(|builder| {
        builder
            .actor::<Instrument>()
            .actor::<Buzzer>()
            .effect(|_: Announce, _: EffectContext| async { Ok(()) })
    })
    .await;
    let meter = runtime.reference::<Instrument>("m-1");

    // Three enqueued messages: the first drain samples the mailbox depth, then runs them.
    for amount in [1, 2, 3] {
        meter.enqueue().add(amount).await.unwrap();
    }
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 3);
    // Two synchronous calls on an empty mailbox: one completes, one is rejected.
    assert_eq!(meter.add(4).await.unwrap(), 10);
    assert_eq!(rejection_code(meter.add(0).await), "not_positive");
    // A failing command: a failed attempt, then (after its backoff) its last, dead.
    assert!(meter.fail().await.is_err());
    harness.clock.advance(Duration::from_secs(1));
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    assert_eq!(dead_letters(&runtime).await.len(), 1);
    // A reminder due in a minute fires 30 seconds late and sends a message to a Buzzer.
    meter.ring_later().await.unwrap();
    harness.clock.advance(Duration::from_secs(90));
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    let buzzer = runtime.reference::<Buzzer>("front");
    assert_eq!(buzzer.snapshot().await.unwrap().chimes, 1);
    // An effect that waits 10 seconds in the outbox, whose success goes back to the Instrument.
    meter.ping().await.unwrap();
    harness.clock.advance(Duration::from_secs(10));
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    // A query: a synchronous call, and no message.
    assert_eq!(meter.total().await.unwrap(), 10);

    let text = prometheus.render();
    let metrics = Exposition::parse(&text);
    let counted =
        |name: &str, actor_type: &str, operation: &str| metrics.count(name, actor_type, operation);
    // Enqueued: 3 enqueues and 2 calls of `add`, every other command once, the fired
    // reminder, the message sent to the Buzzer and the effect's reply.
    for (actor_type, operation, enqueued) in [
        ("Instrument", "add", 5.0),
        ("Instrument", "fail", 1.0),
        ("Instrument", "ring_later", 1.0),
        ("Instrument", "ring", 1.0),
        ("Instrument", "ping", 1.0),
        ("Instrument", "pinged", 1.0),
        ("Buzzer", "chime", 1.0),
    ] {
        assert_eq!(
            counted(MESSAGES_ENQUEUED, actor_type, operation),
            enqueued,
            "{actor_type}.{operation} enqueued, in:\n{text}"
        );
        let ended = if operation == "fail" { 0.0 } else { enqueued };
        let completed = if operation == "add" { 4.0 } else { ended };
        assert_eq!(
            counted(MESSAGES_COMPLETED, actor_type, operation),
            completed,
            "{actor_type}.{operation} completed, in:\n{text}"
        );
    }
    assert_eq!(counted(MESSAGES_REJECTED, "Instrument", "add"), 1.0);
    assert_eq!(counted(MESSAGES_FAILED, "Instrument", "fail"), 2.0);
    assert_eq!(counted(MESSAGES_DEAD, "Instrument", "fail"), 1.0);
    assert_eq!(counted(MESSAGES_FAILED, "Instrument", "add"), 0.0);
    assert_eq!(counted(MESSAGES_ENQUEUED, "Instrument", "total"), 0.0);

    // Histograms (summaries in this exporter): how many were observed, and by the manual
    // clock how late and how old.
    let observed =
        |name: &str, operation: &str| counted(&format!("{name}_count"), "Instrument", operation);
    assert_eq!(observed(TURN_DURATION, "add"), 5.0, "{text}");
    assert_eq!(observed(TURN_DURATION, "fail"), 2.0, "{text}");
    assert_eq!(observed(CALL_DURATION, "add"), 2.0, "{text}");
    assert_eq!(observed(CALL_DURATION, "fail"), 1.0, "{text}");
    assert_eq!(observed(CALL_DURATION, "total"), 1.0, "{text}");
    assert_eq!(observed(REMINDER_LATENESS, "ring"), 1.0, "{text}");
    let late = counted(&format!("{REMINDER_LATENESS}_sum"), "Instrument", "ring");
    assert_eq!(late, 30.0, "{text}");
    assert_eq!(observed(EFFECT_OUTBOX_AGE, "announce"), 1.0, "{text}");
    let age = counted(
        &format!("{EFFECT_OUTBOX_AGE}_sum"),
        "Instrument",
        "announce",
    );
    assert_eq!(age, 10.0, "{text}");

    // The depth the first worker pass saw: the three enqueued messages.
    assert_eq!(metrics.depth("Instrument"), Some(3.0), "{text}");
    assert_eq!(metrics.depth("Buzzer"), Some(0.0), "{text}");
    // Ids are never labels.
    assert!(!text.contains("m-1") && !text.contains("front"), "{text}");
    assert!(
        text.contains(&format!("# HELP {MESSAGES_ENQUEUED} ")),
        "the recorder got the descriptions: {text}"
    );
    runtime.close().await;
}
