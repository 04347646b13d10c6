//! The rows of the operators' views and of the audit log, and what selects them: the store's
//! own types, with times in stored microseconds, decoded in [`rows`](super::rows) and turned
//! into the administration API's public types in one place (`admin/store_rows.rs`).

use serde::Serialize;

/// An actor type and its counts.
#[derive(Debug, Clone)]
pub(crate) struct ActorTypeRow {
    pub(crate) actor_type: String,
    pub(crate) actors: i64,
    pub(crate) paused: i64,
    pub(crate) ready_messages: i64,
    pub(crate) dead_letters: i64,
}

/// An actor as operators list it; an actor with only messages has no row's values.
#[derive(Debug, Clone)]
pub(crate) struct ActorRow {
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) revision: Option<i64>,
    pub(crate) incarnation: Option<i64>,
    pub(crate) state_version: Option<i64>,
    pub(crate) mailbox_depth: i64,
    pub(crate) updated_at: Option<i64>,
    pub(crate) paused_at: Option<i64>,
}

/// Which actors to list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ActorSelection<'a> {
    pub(crate) actor_type: Option<&'a str>,
    pub(crate) id_prefix: Option<&'a str>,
    /// The (type, id) the page starts after.
    pub(crate) after: Option<(&'a str, &'a str)>,
}

/// The oldest ready message of an actor.
#[derive(Debug, Clone)]
pub(crate) struct MailboxHeadRow {
    pub(crate) message_id: i64,
    pub(crate) operation: String,
    pub(crate) attempts: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) available_at: i64,
    pub(crate) created_at: i64,
}

/// A scheduled reminder as operators list it.
#[derive(Debug, Clone)]
pub(crate) struct ScheduledReminderRow {
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) due_at: i64,
    pub(crate) every_micros: Option<i64>,
}

/// Which reminders to list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReminderSelection<'a> {
    pub(crate) actor_type: Option<&'a str>,
    pub(crate) actor_id: Option<&'a str>,
    pub(crate) due_before: Option<i64>,
}

/// Where an effect is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EffectStatus {
    /// Waiting for a worker: its turn committed, or a failed attempt waits for its retry.
    Ready,
    /// Claimed by a worker, whose lease has not run out.
    Running,
    /// Its handler succeeded.
    Done,
    /// Its handler failed for good, or ran out of attempts: an operator may retry it.
    Dead,
}

impl EffectStatus {
    /// Every status, in the order an effect goes through them.
    pub const ALL: [EffectStatus; 4] = [Self::Ready, Self::Running, Self::Done, Self::Dead];

    /// The status as stored: `ready`, `running`, `done` or `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Running => "running",
            Self::Done => "done",
            Self::Dead => "dead",
        }
    }

    /// The status stored as `text`, if it is one.
    pub fn from_stored(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

impl std::fmt::Display for EffectStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An effect as operators list it.
#[derive(Debug, Clone)]
pub(crate) struct EffectRow {
    pub(crate) id: i64,
    pub(crate) effect_id: String,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) name: String,
    pub(crate) status: EffectStatus,
    pub(crate) attempts: i64,
    pub(crate) available_at: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) created_at: i64,
    /// Its payload's first 4097 characters: one more than a listing shows, so a longer
    /// one is known to be cut.
    pub(crate) payload: String,
}

/// Which effects to list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EffectSelection<'a> {
    /// Whether effects that are ready, running, done and dead are listed, in that order.
    pub(crate) statuses: [bool; 4],
    pub(crate) actor_type: Option<&'a str>,
    pub(crate) actor_id: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
}

/// Which dead letters to list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DeadLetterSelection<'a> {
    pub(crate) actor_type: Option<&'a str>,
    pub(crate) operation: Option<&'a str>,
    /// Text the error contains.
    pub(crate) error_contains: Option<&'a str>,
    /// Died at or after, and before.
    pub(crate) since: Option<i64>,
    pub(crate) until: Option<i64>,
    /// Whether dead letters an operator retried are listed too.
    pub(crate) include_retried: bool,
}

/// A ready message that passes left unrun again and again.
#[derive(Debug, Clone)]
pub(crate) struct StalledRow {
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) stalls: i64,
}

/// An actor's ready messages.
#[derive(Debug, Clone)]
pub(crate) struct MailboxDepthRow {
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) ready: i64,
}

/// Which messages and effects a status counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Every status, finished ones too: every row of both tables is counted.
    Every,
    /// What waits or failed for good: read from small indexes.
    Outstanding,
}

/// The counts behind the operators' status.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusRow {
    /// Messages by status, and effects by status.
    pub(crate) messages: Vec<(String, i64)>,
    pub(crate) effects: Vec<(String, i64)>,
    pub(crate) reminders: i64,
    pub(crate) reminders_due: i64,
    pub(crate) paused_actors: i64,
    /// When the oldest due message was enqueued, and when the earliest due reminder was due.
    pub(crate) oldest_due_message_at: Option<i64>,
    pub(crate) oldest_due_reminder_at: Option<i64>,
}

/// An audit row, its caller and details as stored (JSON text).
#[derive(Debug, Clone)]
pub(crate) struct AdminEventRow {
    pub(crate) id: i64,
    pub(crate) at: i64,
    pub(crate) caller: Option<String>,
    pub(crate) action: String,
    pub(crate) resource: String,
    pub(crate) outcome: String,
    pub(crate) details: Option<String>,
}

/// How many rows retention deleted, of each kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pruned {
    pub(crate) finished_messages: u64,
    pub(crate) done_effects: u64,
    pub(crate) dead_letters: u64,
    pub(crate) dead_effects: u64,
    /// The times of failed attempts, kept as long as finished messages.
    pub(crate) failed_attempts: u64,
    /// Audit rows of administration calls (deleted by their own statement).
    pub(crate) admin_events: u64,
}

impl Pruned {
    /// How many rows in all.
    pub(crate) fn total(&self) -> u64 {
        self.finished_messages
            + self.done_effects
            + self.dead_letters
            + self.dead_effects
            + self.failed_attempts
            + self.admin_events
    }
}

/// An audit row to write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminEventWrite<'a> {
    pub(crate) at: i64,
    pub(crate) caller: Option<&'a str>,
    pub(crate) action: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) outcome: &'a str,
    pub(crate) details: Option<&'a str>,
}
