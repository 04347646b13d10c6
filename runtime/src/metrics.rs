//! What the runtime records through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! The runtime records and exports nothing by itself: an application that wants these
//! installs a recorder of its choice (`metrics-exporter-prometheus`, an OpenTelemetry
//! bridge, ...) before it starts the runtime, and every runtime in the process records into
//! it. Without one, recording costs next to nothing. A recorder installed before
//! [`Builder::start`](crate::Builder::start) also gets each metric's description and unit.
//! `examples/metrics_prometheus.rs` serves them to Prometheus on an axum endpoint.
//!
//! Labels are bounded: `actor_type` is an actor's stored type name
//! ([`ActorState::TYPE_NAME`]), `operation` the stored name of a command, query, reminder or
//! effect. Actor ids, message ids and payloads are never labels. Durations are measured on
//! the process's monotonic clock; lateness and age by the runtime's [`Clock`](crate::Clock).
//!
//! | name | kind | labels | what it measures |
//! | --- | --- | --- | --- |
//! | `solid_objects_messages_enqueued_total` | counter | `actor_type`, `operation` | messages committed to a mailbox: enqueues, calls, messages from other actors, fired reminders, effect replies and operators' retries of dead letters |
//! | `solid_objects_messages_completed_total` | counter | `actor_type`, `operation` | messages whose handler returned a value, committed |
//! | `solid_objects_messages_rejected_total` | counter | `actor_type`, `operation` | messages whose handler rejected them, committed |
//! | `solid_objects_messages_failed_total` | counter | `actor_type`, `operation` | failed attempts counted on a message (a panic, an error, a turn timeout, a write that failed), the last attempt of a dead letter included |
//! | `solid_objects_messages_dead_total` | counter | `actor_type`, `operation` | messages that became dead letters |
//! | `solid_objects_turn_conflicts_total` | counter | `actor_type` | turns that conflicted with another transaction (Galera certification, a PostgreSQL serialization failure or deadlock) and ran again or waited for a later pass; never counted as failed attempts |
//! | `solid_objects_commits_in_doubt_total` | counter | `actor_type` | turns whose `COMMIT` went unanswered, whose message was read back to learn whether it was kept |
//! | `solid_objects_turn_duration_seconds` | histogram | `actor_type`, `operation` | one turn: its handler and its commit (or the end of a turn that committed nothing), in seconds |
//! | `solid_objects_call_duration_seconds` | histogram | `actor_type`, `operation` | a synchronous call or query as its caller waits for it, the turns of earlier messages included, whatever its answer, in seconds |
//! | `solid_objects_reminder_lateness_seconds` | histogram | `actor_type`, `operation` | how long after its due time a reminder fired into its actor's mailbox, in seconds (`operation`: the reminder) |
//! | `solid_objects_effect_outbox_age_seconds` | histogram | `actor_type`, `operation` | how long an effect had been in the outbox when an attempt at it started, in seconds (`actor_type`: the actor that emitted it; `operation`: the effect's [`Effect::NAME`]) |
//! | `solid_objects_mailbox_depth` | gauge | `actor_type` | unfinished messages of an actor type (waiting, delayed or waiting for a retry), sampled by the workers (and [`Testing::drain`](crate::Testing::drain)) at most every 5 seconds, for each actor type the runtime knows |
//!
//! An enqueued message ends as completed, rejected or dead (or destroyed with its actor), so
//! `enqueued - completed - rejected - dead` is about what waits. Turns also emit a
//! `tracing` span, `turn`, with OpenTelemetry's messaging fields: `messaging.system`
//! (`solid_objects`), `messaging.operation.type` (`process`), `messaging.destination.name`
//! (the actor type), `messaging.operation.name` and `messaging.message.id` (none for a
//! call's turn on an empty mailbox, whose message is written with it), besides `actor_id` and
//! `outcome`; each attempt at an effect runs in a span `effect` (`effect`: its kind,
//! `effect_id`, `actor_type`, `actor_id`, `attempt`). With the `opentelemetry` feature, a
//! turn's span continues the trace of the span that sent its message, and an effect's that of
//! the turn that emitted it, in whichever process they run ([the operating
//! guide](crate::guide::operating#traces-across-the-durable-boundary)).
//!
//! [`ActorState::TYPE_NAME`]: crate::ActorState::TYPE_NAME
//! [`Effect::NAME`]: crate::Effect::NAME

use std::time::Duration;

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

/// Counter: messages committed to a mailbox.
pub const MESSAGES_ENQUEUED: &str = "solid_objects_messages_enqueued_total";
/// Counter: messages completed.
pub const MESSAGES_COMPLETED: &str = "solid_objects_messages_completed_total";
/// Counter: messages rejected.
pub const MESSAGES_REJECTED: &str = "solid_objects_messages_rejected_total";
/// Counter: failed attempts counted on messages.
pub const MESSAGES_FAILED: &str = "solid_objects_messages_failed_total";
/// Counter: messages that became dead letters.
pub const MESSAGES_DEAD: &str = "solid_objects_messages_dead_total";
/// Counter: turns that conflicted with another transaction.
pub const TURN_CONFLICTS: &str = "solid_objects_turn_conflicts_total";
/// Counter: turns whose commit went unanswered.
pub const COMMITS_IN_DOUBT: &str = "solid_objects_commits_in_doubt_total";
/// Histogram: the duration of one turn, in seconds.
pub const TURN_DURATION: &str = "solid_objects_turn_duration_seconds";
/// Histogram: a synchronous call's or query's latency as its caller sees it, in seconds.
pub const CALL_DURATION: &str = "solid_objects_call_duration_seconds";
/// Histogram: how late reminders fired, in seconds.
pub const REMINDER_LATENESS: &str = "solid_objects_reminder_lateness_seconds";
/// Histogram: an effect's age when an attempt at it started, in seconds.
pub const EFFECT_OUTBOX_AGE: &str = "solid_objects_effect_outbox_age_seconds";
/// Gauge: unfinished messages by actor type, as last sampled.
pub const MAILBOX_DEPTH: &str = "solid_objects_mailbox_depth";

/// The label holding an actor's stored type name.
pub const ACTOR_TYPE: &str = "actor_type";
/// The label holding the stored name of a command, query, reminder or effect.
pub const OPERATION: &str = "operation";

/// How often, at most, the workers of one runtime sample the mailbox depth.
pub(crate) const DEPTH_SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Gives the installed recorder each metric's description and unit.
pub(crate) fn describe() {
    let counters = [
        (MESSAGES_ENQUEUED, "Messages committed to a mailbox"),
        (
            MESSAGES_COMPLETED,
            "Messages whose handler returned a value",
        ),
        (MESSAGES_REJECTED, "Messages whose handler rejected them"),
        (MESSAGES_FAILED, "Failed attempts counted on messages"),
        (MESSAGES_DEAD, "Messages that became dead letters"),
        (
            TURN_CONFLICTS,
            "Turns that conflicted with another transaction, never counted as failures",
        ),
        (COMMITS_IN_DOUBT, "Turns whose commit went unanswered"),
    ];
    for (name, description) in counters {
        describe_counter!(name, Unit::Count, description);
    }
    let histograms = [
        (TURN_DURATION, "The duration of one turn"),
        (
            CALL_DURATION,
            "A synchronous call's latency, as its caller waits",
        ),
        (
            REMINDER_LATENESS,
            "How long after its due time a reminder fired",
        ),
        (
            EFFECT_OUTBOX_AGE,
            "An effect's age when an attempt at it started",
        ),
    ];
    for (name, description) in histograms {
        describe_histogram!(name, Unit::Seconds, description);
    }
    describe_gauge!(
        MAILBOX_DEPTH,
        Unit::Count,
        "Unfinished messages, by actor type"
    );
}

/// A message committed to `actor_type`'s mailbox, `count` times over.
pub(crate) fn enqueued(actor_type: &str, operation: &str, count: u64) {
    counter!(MESSAGES_ENQUEUED, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .increment(count);
}

/// A message completed.
pub(crate) fn completed(actor_type: &str, operation: &str) {
    counter!(MESSAGES_COMPLETED, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .increment(1);
}

/// A message rejected.
pub(crate) fn rejected(actor_type: &str, operation: &str) {
    counter!(MESSAGES_REJECTED, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .increment(1);
}

/// A failed attempt counted on a message, which `dead` says was its last.
pub(crate) fn failed(actor_type: &str, operation: &str, dead: bool) {
    counter!(MESSAGES_FAILED, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .increment(1);
    if dead {
        counter!(MESSAGES_DEAD, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
            .increment(1);
    }
}

/// A turn of `actor_type` conflicted with another transaction.
pub(crate) fn turn_conflict(actor_type: &str) {
    counter!(TURN_CONFLICTS, ACTOR_TYPE => actor_type.to_owned()).increment(1);
}

/// A turn of `actor_type` committed without an answer.
pub(crate) fn commit_in_doubt(actor_type: &str) {
    counter!(COMMITS_IN_DOUBT, ACTOR_TYPE => actor_type.to_owned()).increment(1);
}

/// One turn took `elapsed`.
pub(crate) fn turn_duration(actor_type: &str, operation: &str, elapsed: Duration) {
    histogram!(TURN_DURATION, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .record(elapsed);
}

/// A synchronous call or query took `elapsed`, as its caller waited.
pub(crate) fn call_duration(actor_type: &str, operation: &str, elapsed: Duration) {
    histogram!(CALL_DURATION, ACTOR_TYPE => actor_type.to_owned(), OPERATION => operation.to_owned())
        .record(elapsed);
}

/// A reminder fired `late` after it was due (zero if it was not late).
pub(crate) fn reminder_lateness(actor_type: &str, reminder: &str, late: Duration) {
    histogram!(REMINDER_LATENESS, ACTOR_TYPE => actor_type.to_owned(), OPERATION => reminder.to_owned())
        .record(late);
}

/// An attempt at an effect started when the effect was `age` old.
pub(crate) fn effect_outbox_age(actor_type: &str, effect: &str, age: Duration) {
    histogram!(EFFECT_OUTBOX_AGE, ACTOR_TYPE => actor_type.to_owned(), OPERATION => effect.to_owned())
        .record(age);
}

/// `actor_type` has `depth` unfinished messages.
pub(crate) fn mailbox_depth(actor_type: &str, depth: i64) {
    // A count of rows is far below 2^53: exact as a float.
    gauge!(MAILBOX_DEPTH, ACTOR_TYPE => actor_type.to_owned()).set(depth as f64);
}

/// The time from `earlier` to `later` in microseconds, as a duration (zero if negative).
pub(crate) fn micros_between(earlier: i64, later: i64) -> Duration {
    Duration::from_micros(u64::try_from(later.saturating_sub(earlier)).unwrap_or(0))
}
