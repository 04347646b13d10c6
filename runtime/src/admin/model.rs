//! What the administration API reads and returns: plain records, serialisable for scripts.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::client::message::MessageRef;
use crate::client::shared::Runtime;
pub use crate::store::admin_rows::EffectStatus;

/// One actor type: how many actors it has, and how much of its work waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActorTypeSummary {
    /// The stored type name.
    pub actor_type: String,
    /// Actors with a row, a ready message or a dead letter.
    pub actors: i64,
    /// Of those, how many an operator paused.
    pub paused: i64,
    /// Ready messages across its mailboxes.
    pub ready_messages: i64,
    /// Its dead letters.
    pub dead_letters: i64,
}

/// One actor, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActorSummary {
    /// The stored type name.
    pub actor_type: String,
    /// The actor's id.
    pub actor_id: String,
    /// How many turns changed its state (0 before the first).
    pub revision: i64,
    /// Which life of the actor this is (destroying it starts the next).
    pub incarnation: i64,
    /// The version of its state type that wrote the stored state.
    pub state_version: i64,
    /// Ready messages in its mailbox.
    pub mailbox_depth: i64,
    /// When a turn last committed its state.
    pub last_activity: Option<DateTime<Utc>>,
    /// When an operator paused it; `None`: it runs.
    pub paused_at: Option<DateTime<Utc>>,
}

/// Which actors [`Admin::actors`](super::Admin::actors) lists, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActorFilter {
    /// Only this type.
    pub actor_type: Option<String>,
    /// Only ids that start with this.
    pub id_prefix: Option<String>,
    /// Start after this actor (the last one of the previous page), in (type, id) order.
    pub after: Option<(String, String)>,
    /// At most this many (1 to 1000; 100 if zero).
    pub limit: u32,
}

impl ActorFilter {
    /// Every actor, 100 at a time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only actors of this type.
    pub fn actor_type(mut self, actor_type: impl Into<String>) -> Self {
        self.actor_type = Some(actor_type.into());
        self
    }

    /// Only actors whose id starts with `prefix`.
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    /// The page after the actor `(actor_type, actor_id)`.
    pub fn after(mut self, actor_type: impl Into<String>, actor_id: impl Into<String>) -> Self {
        self.after = Some((actor_type.into(), actor_id.into()));
        self
    }

    /// At most `limit` actors per page.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// A page of actors; `next` is the filter for the page after it, if there may be one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActorPage {
    /// The actors, in (type, id) order.
    pub actors: Vec<ActorSummary>,
    /// Whether more actors may follow (the page was full).
    pub more: bool,
}

/// The message at the head of a mailbox: the next to run, or the one holding the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MailboxHead {
    /// The message's id.
    pub message_id: i64,
    /// Its operation.
    pub operation: String,
    /// Failed attempts so far.
    pub attempts: i64,
    /// The last attempt's error, or why it waits (an operation this build does not know).
    pub last_error: Option<String>,
    /// When it may run next: its next attempt after a failure, or its delay.
    pub next_attempt_at: DateTime<Utc>,
    /// When it was enqueued.
    pub enqueued_at: DateTime<Utc>,
}

/// Everything about one actor an operator needs when it is stuck.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ActorDetails {
    /// Its row, as listings show it.
    pub summary: ActorSummary,
    /// Its committed state as JSON; `None` before its first turn.
    pub state: Option<Value>,
    /// The head of its mailbox.
    pub head: Option<MailboxHead>,
    /// Its scheduled reminders, the next due first.
    pub reminders: Vec<ReminderSummary>,
    /// Its effects that have not run to the end: waiting, running or dead.
    pub effects: Vec<EffectSummary>,
    /// Its newest messages, newest first: at most 20, found among the newest 10,000
    /// messages of every actor (a bounded read, whatever the table's size).
    pub recent_messages: Vec<MessageSummary>,
}

/// One message, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MessageSummary {
    /// The message's id.
    pub message_id: i64,
    /// Its actor's type.
    pub actor_type: String,
    /// Its actor's id.
    pub actor_id: String,
    /// Its operation.
    pub operation: String,
    /// `ready`, `completed`, `rejected`, `dead` or `destroyed`.
    pub status: String,
    /// Failed attempts.
    pub attempts: i64,
    /// The last attempt's error, or why it waits.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub enqueued_at: DateTime<Utc>,
    /// When it finished; `None` while it is ready.
    pub finished_at: Option<DateTime<Utc>>,
    /// For a dead letter an operator retried: the message the retry enqueued.
    pub retried_as: Option<i64>,
}

/// An actor's count of ready messages, for the busiest mailboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MailboxDepth {
    /// The actor's type.
    pub actor_type: String,
    /// The actor's id.
    pub actor_id: String,
    /// Ready messages in its mailbox.
    pub ready: i64,
}

/// What an operator's first page shows: how much work waits and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Overview {
    /// The runtime clock's time when it was read.
    pub now: DateTime<Utc>,
    /// The counts of [`Admin::status`](super::Admin::status), of the statuses that wait or
    /// failed for good only: ready and dead messages; ready, running and dead effects.
    pub status: Status,
    /// Every actor type with its actors, ready messages and dead letters.
    pub actor_types: Vec<ActorTypeSummary>,
    /// The actors with the most ready messages, the deepest first.
    pub busiest: Vec<MailboxDepth>,
    /// Messages that finished in the last hour, by status.
    pub finished_last_hour: Vec<(String, i64)>,
}

/// A scheduled reminder of some actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReminderSummary {
    /// The actor's type.
    pub actor_type: String,
    /// The actor's id.
    pub actor_id: String,
    /// The reminder's name.
    pub name: String,
    /// Its key.
    pub key: String,
    /// When it is due.
    pub due_at: DateTime<Utc>,
    /// For a recurring reminder, its interval in milliseconds.
    pub every_ms: Option<i64>,
}

/// Which reminders [`Admin::reminders`](super::Admin::reminders) lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReminderFilter {
    /// Only this actor type.
    pub actor_type: Option<String>,
    /// Only this actor (with `actor_type`).
    pub actor_id: Option<String>,
    /// Only reminders due at or before this time (overdue ones, with now).
    pub due_before: Option<DateTime<Utc>>,
    /// At most this many (1 to 1000; 100 if zero), the next due first.
    pub limit: u32,
}

impl ReminderFilter {
    /// Every reminder, the next 100 due.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only reminders of this actor type.
    pub fn actor_type(mut self, actor_type: impl Into<String>) -> Self {
        self.actor_type = Some(actor_type.into());
        self
    }

    /// Only reminders of this actor (give its type too).
    pub fn actor_id(mut self, actor_id: impl Into<String>) -> Self {
        self.actor_id = Some(actor_id.into());
        self
    }

    /// Only reminders due at or before `at`.
    pub fn due_before(mut self, at: DateTime<Utc>) -> Self {
        self.due_before = Some(at);
        self
    }

    /// At most `limit` reminders.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// The most characters of stored arguments a listing shows: longer ones are cut there and
/// end with `…`.
pub const SHOWN_ARGUMENTS_CHARS: usize = 4096;

/// An effect, as operators see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EffectSummary {
    /// Its row id (what `retry_effect` takes).
    pub id: i64,
    /// Its effect id, the key a handler deduplicates on.
    pub effect_id: String,
    /// The actor whose turn emitted it: its type.
    pub actor_type: String,
    /// And its id.
    pub actor_id: String,
    /// The effect's kind.
    pub name: String,
    /// What it was asked to do: its stored value as JSON, cut at
    /// [`SHOWN_ARGUMENTS_CHARS`] (then a string ending with `…`).
    pub arguments: Value,
    /// Where it is in its life.
    pub status: EffectStatus,
    /// Attempts made.
    pub attempts: i64,
    /// When it may run (ready), or when its runner's lease ends (running).
    pub available_at: DateTime<Utc>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// When its turn committed it.
    pub created_at: DateTime<Utc>,
}

/// Which effects [`Admin::effects`](super::Admin::effects) lists.
///
/// By default ([`EffectFilter::new`]): every status, kind and actor, the oldest 100.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectFilter {
    /// Only effects with one of these statuses; every status if empty.
    pub statuses: Vec<EffectStatus>,
    /// Only this actor type.
    pub actor_type: Option<String>,
    /// Only this actor (with `actor_type`).
    pub actor_id: Option<String>,
    /// Only this kind.
    pub name: Option<String>,
    /// At most this many (1 to 1000; 100 if zero), oldest first.
    pub limit: u32,
}

impl Default for EffectFilter {
    fn default() -> Self {
        Self {
            statuses: Vec::new(),
            actor_type: None,
            actor_id: None,
            name: None,
            limit: 100,
        }
    }
}

impl EffectFilter {
    /// Every effect, the oldest 100.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only effects with this status (call again to add another).
    pub fn status(mut self, status: EffectStatus) -> Self {
        if !self.statuses.contains(&status) {
            self.statuses.push(status);
        }
        self
    }

    /// Only effects that have not run to the end: ready or running.
    pub fn pending(self) -> Self {
        self.status(EffectStatus::Ready)
            .status(EffectStatus::Running)
    }

    /// Only effects emitted by actors of this type.
    pub fn actor_type(mut self, actor_type: impl Into<String>) -> Self {
        self.actor_type = Some(actor_type.into());
        self
    }

    /// Only effects emitted by this actor (give its type too).
    pub fn actor_id(mut self, actor_id: impl Into<String>) -> Self {
        self.actor_id = Some(actor_id.into());
        self
    }

    /// Only effects of this kind.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// At most `limit` effects.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// Which dead letters [`Admin::dead_letters`](super::Admin::dead_letters) lists and
/// [`Admin::redrive`](super::Admin::redrive) enqueues again.
///
/// By default ([`DeadLetterFilter::new`]): every actor type, operation and time, not those
/// an operator already retried (`include_retried: false`), the oldest 100 (`limit: 100`), as
/// its `Debug` output shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterFilter {
    /// Only this actor type.
    pub actor_type: Option<String>,
    /// Only this operation.
    pub operation: Option<String>,
    /// Only those whose last error contains this text.
    pub error_contains: Option<String>,
    /// Only those that died at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only those that died before this time.
    pub until: Option<DateTime<Utc>>,
    /// Listing only: also those an operator already retried (a redrive never takes them).
    pub include_retried: bool,
    /// Listing only: at most this many (1 to 1000; 100 if zero), oldest first.
    pub limit: u32,
}

impl Default for DeadLetterFilter {
    fn default() -> Self {
        Self {
            actor_type: None,
            operation: None,
            error_contains: None,
            since: None,
            until: None,
            include_retried: false,
            limit: 100,
        }
    }
}

impl DeadLetterFilter {
    /// Every dead letter not retried yet, the oldest 100.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only this actor type.
    pub fn actor_type(mut self, actor_type: impl Into<String>) -> Self {
        self.actor_type = Some(actor_type.into());
        self
    }

    /// Only this operation.
    pub fn operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Only those whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Only those that died in `[since, until)`.
    pub fn between(mut self, since: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self.until = Some(until);
        self
    }

    /// Lists those an operator already retried too.
    pub fn include_retried(mut self) -> Self {
        self.include_retried = true;
        self
    }

    /// At most `limit` per listing.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// A dead letter, as operators list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DeadLetterSummary {
    /// The message's id (what `retry_dead_letter` takes).
    pub message_id: i64,
    /// The request id its caller gave it or was given (what
    /// [`Runtime::message`](crate::Runtime::message) finds it by).
    pub request_id: String,
    /// Its actor's type.
    pub actor_type: String,
    /// Its actor's id.
    pub actor_id: String,
    /// Its operation.
    pub operation: String,
    /// Its arguments: their stored value as JSON, cut at [`SHOWN_ARGUMENTS_CHARS`] (then a
    /// string ending with `…`).
    pub arguments: Value,
    /// Attempts made.
    pub attempts: i64,
    /// The last attempt's error.
    pub error: String,
    /// When it became a dead letter.
    pub failed_at: Option<DateTime<Utc>>,
    /// The message an operator's retry enqueued, if it was retried.
    pub retried_as: Option<i64>,
}

impl DeadLetterSummary {
    /// A handle on the message on `runtime`: its status, and its result once an operator's
    /// retry ran it ([`MessageRef::status`] follows the retry).
    pub fn message(&self, runtime: &Runtime) -> MessageRef {
        MessageRef::from_parts(
            runtime.clone(),
            &self.actor_type,
            &self.actor_id,
            self.message_id,
            self.request_id.clone(),
        )
    }
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Redriven {
    /// Dead letters enqueued again by this redrive.
    pub retried: u64,
    /// The new messages' ids, in the order they were enqueued.
    pub message_ids: Vec<i64>,
}

/// How many rows a prune deletes (or, previewed, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PruneCounts {
    /// Completed, rejected and destroyed messages past the retention period.
    pub finished_messages: u64,
    /// Effects that ran, past the retention period.
    pub done_effects: u64,
    /// Dead letters past the dead retention period.
    pub dead_letters: u64,
    /// Dead effects past the dead retention period.
    pub dead_effects: u64,
    /// Records of when attempts failed (for the charts), past the retention period.
    pub failed_attempts: u64,
    /// Audit rows of administration calls past the retention period.
    pub admin_events: u64,
}

impl PruneCounts {
    /// Every row counted.
    pub fn total(&self) -> u64 {
        self.finished_messages
            + self.done_effects
            + self.dead_letters
            + self.dead_effects
            + self.failed_attempts
            + self.admin_events
    }
}

/// How much work waits, for `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Status {
    /// Messages by status (`ready`, `completed`, `rejected`, `dead`, `destroyed`).
    pub messages: Vec<(String, i64)>,
    /// Effects by status (`ready`, `running`, `done`, `dead`).
    pub effects: Vec<(String, i64)>,
    /// Scheduled reminders.
    pub reminders: i64,
    /// Of those, how many are due now and not yet fired.
    pub reminders_due: i64,
    /// Actors an operator paused.
    pub paused_actors: i64,
    /// When the oldest message that is due now was enqueued: how far behind the workers are.
    pub oldest_due_message_at: Option<DateTime<Utc>>,
    /// When the most overdue reminder that has not fired was due: how late reminders are.
    pub oldest_due_reminder_at: Option<DateTime<Utc>>,
}

/// One administration call, as the audit table `solid_admin_events` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AdminEvent {
    /// Its row id; newer calls have larger ids.
    pub id: i64,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// Who made it: the operator's context, as given to [`Admin::context`](super::Admin::context).
    pub caller: Option<Value>,
    /// The action's name (`"pause"`, `"redrive"`, ...).
    pub action: String,
    /// What it was asked of.
    pub resource: String,
    /// `allowed`, `denied` (by the policy) or `failed` (allowed, then an error).
    pub outcome: String,
    /// What it did or why it failed, as JSON.
    pub details: Option<Value>,
}

/// What [`Admin::doctor`](super::Admin::doctor) found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DoctorReport {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The schema versions applied to this database.
    pub applied_migrations: Vec<i64>,
    /// The newest schema version this build knows.
    pub known_migration: i64,
    /// Settings that matter to the runtime, by name (server version, journal mode,
    /// synchronous, isolation, ...).
    pub settings: Vec<(String, String)>,
    /// How long a write and read of a scratch actor took, in microseconds.
    pub round_trip_micros: u64,
    /// The database clock minus this host's clock, in milliseconds (PostgreSQL; `None` on
    /// SQLite, which has this host's clock).
    pub clock_skew_ms: Option<i64>,
    /// The actor types whose stored messages and reminders were checked against this
    /// build: the types this runtime registered (none in the command-line tool, which knows
    /// no application's types).
    pub checked_actor_types: Vec<String>,
    /// Unfinished messages and scheduled reminders of those types that this build cannot
    /// decode (at most 100): each would become a dead letter (or wait) once it runs here.
    pub undecodable: Vec<Undecodable>,
    /// Effects waiting to run, by kind, whose kind has no handler in this runtime (every
    /// kind, in the command-line tool, which runs none): a problem in a runtime that
    /// registered actor types, unless another process runs them.
    pub unhandled_effects: Vec<crate::client::effect::UnhandledEffects>,
    /// What looks wrong, in words; empty when all is well.
    pub problems: Vec<String>,
}

/// A stored message or reminder whose operation or arguments this build cannot decode,
/// from [`Admin::undecodable`](super::Admin::undecodable) and the doctor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Undecodable {
    /// Whether it is an unfinished message or a scheduled reminder.
    pub kind: StoredKind,
    /// The message's id, or the reminder row's.
    pub id: i64,
    /// The actor's type.
    pub actor_type: String,
    /// The actor's id.
    pub actor_id: String,
    /// The operation (the reminder's name, for a reminder).
    pub operation: String,
    /// Why it does not decode: an operation this build does not have, or arguments that do
    /// not read as its parameters.
    pub error: String,
}

/// What kind of stored row an [`Undecodable`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoredKind {
    /// An unfinished message in a mailbox.
    Message,
    /// A scheduled reminder, not fired yet.
    Reminder,
}
