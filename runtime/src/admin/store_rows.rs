//! The store's rows as the administration API's public types: every conversion from a store
//! row (times in stored microseconds, JSON as text) or into a store selection is here.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::model::{
    ActorFilter, ActorSummary, ActorTypeSummary, AdminEvent, DeadLetterFilter, EffectFilter,
    EffectStatus, EffectSummary, MailboxDepth, MailboxHead, PruneCounts, ReminderFilter,
    ReminderSummary, Status, SHOWN_ARGUMENTS_CHARS,
};
use crate::store::admin_rows::{
    ActorRow, ActorSelection, ActorTypeRow, AdminEventRow, DeadLetterSelection, EffectRow,
    EffectSelection, MailboxDepthRow, MailboxHeadRow, Pruned, ReminderSelection,
    ScheduledReminderRow, StatusRow,
};
use crate::time::{from_micros, micros};

/// A stored time that may be unset (`NULL`, or 0 for never).
fn time(micros: Option<i64>) -> Option<DateTime<Utc>> {
    micros.filter(|&micros| micros > 0).map(from_micros)
}

/// Stored JSON text as a value (text that is not JSON, as a string).
fn json(text: Option<String>) -> Option<Value> {
    text.map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Stored arguments as a listing shows them: their JSON, or, past
/// [`SHOWN_ARGUMENTS_CHARS`], their first characters as a string ending with `…`.
pub(super) fn shown_arguments(text: String) -> Value {
    match text.char_indices().nth(SHOWN_ARGUMENTS_CHARS) {
        None => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        Some((cut, _)) => Value::String(format!("{}…", &text[..cut])),
    }
}

/// Rows of the store as public values.
pub(super) fn public<R, T: From<R>>(rows: Vec<R>) -> Vec<T> {
    rows.into_iter().map(T::from).collect()
}

impl From<ActorTypeRow> for ActorTypeSummary {
    fn from(row: ActorTypeRow) -> Self {
        Self {
            actor_type: row.actor_type,
            actors: row.actors,
            paused: row.paused,
            ready_messages: row.ready_messages,
            dead_letters: row.dead_letters,
        }
    }
}

impl From<ActorRow> for ActorSummary {
    fn from(row: ActorRow) -> Self {
        Self {
            actor_type: row.actor_type,
            actor_id: row.actor_id,
            revision: row.revision.unwrap_or(0),
            incarnation: row.incarnation.unwrap_or(1),
            state_version: row.state_version.unwrap_or(1),
            mailbox_depth: row.mailbox_depth,
            last_activity: time(row.updated_at),
            paused_at: time(row.paused_at),
        }
    }
}

impl From<MailboxHeadRow> for MailboxHead {
    fn from(row: MailboxHeadRow) -> Self {
        Self {
            message_id: row.message_id,
            operation: row.operation,
            attempts: row.attempts,
            last_error: row.last_error,
            next_attempt_at: from_micros(row.available_at),
            enqueued_at: from_micros(row.created_at),
        }
    }
}

impl From<ScheduledReminderRow> for ReminderSummary {
    fn from(row: ScheduledReminderRow) -> Self {
        Self {
            actor_type: row.actor_type,
            actor_id: row.actor_id,
            name: row.name,
            key: row.key,
            due_at: from_micros(row.due_at),
            every_ms: row.every_micros.map(|every| every / 1000),
        }
    }
}

impl From<EffectRow> for EffectSummary {
    fn from(row: EffectRow) -> Self {
        Self {
            id: row.id,
            effect_id: row.effect_id,
            actor_type: row.actor_type,
            actor_id: row.actor_id,
            name: row.name,
            arguments: shown_arguments(row.payload),
            status: row.status,
            attempts: row.attempts,
            available_at: from_micros(row.available_at),
            last_error: row.last_error,
            created_at: from_micros(row.created_at),
        }
    }
}

impl From<MailboxDepthRow> for MailboxDepth {
    fn from(row: MailboxDepthRow) -> Self {
        Self {
            actor_type: row.actor_type,
            actor_id: row.actor_id,
            ready: row.ready,
        }
    }
}

impl From<StatusRow> for Status {
    fn from(row: StatusRow) -> Self {
        Self {
            messages: row.messages,
            effects: row.effects,
            reminders: row.reminders,
            reminders_due: row.reminders_due,
            paused_actors: row.paused_actors,
            oldest_due_message_at: time(row.oldest_due_message_at),
            oldest_due_reminder_at: time(row.oldest_due_reminder_at),
        }
    }
}

impl From<AdminEventRow> for AdminEvent {
    fn from(row: AdminEventRow) -> Self {
        Self {
            id: row.id,
            at: from_micros(row.at),
            caller: json(row.caller),
            action: row.action,
            resource: row.resource,
            outcome: row.outcome,
            details: json(row.details),
        }
    }
}

impl From<Pruned> for PruneCounts {
    fn from(pruned: Pruned) -> Self {
        Self {
            finished_messages: pruned.finished_messages,
            done_effects: pruned.done_effects,
            dead_letters: pruned.dead_letters,
            dead_effects: pruned.dead_effects,
            failed_attempts: pruned.failed_attempts,
            admin_events: pruned.admin_events,
        }
    }
}

impl<'a> From<&'a ActorFilter> for ActorSelection<'a> {
    fn from(filter: &'a ActorFilter) -> Self {
        Self {
            actor_type: filter.actor_type.as_deref(),
            id_prefix: filter.id_prefix.as_deref(),
            after: filter
                .after
                .as_ref()
                .map(|(actor_type, actor_id)| (actor_type.as_str(), actor_id.as_str())),
        }
    }
}

impl<'a> From<&'a ReminderFilter> for ReminderSelection<'a> {
    fn from(filter: &'a ReminderFilter) -> Self {
        Self {
            actor_type: filter.actor_type.as_deref(),
            actor_id: filter.actor_id.as_deref(),
            due_before: filter.due_before.map(micros),
        }
    }
}

impl<'a> From<&'a EffectFilter> for EffectSelection<'a> {
    fn from(filter: &'a EffectFilter) -> Self {
        Self {
            statuses: EffectStatus::ALL
                .map(|status| filter.statuses.is_empty() || filter.statuses.contains(&status)),
            actor_type: filter.actor_type.as_deref(),
            actor_id: filter.actor_id.as_deref(),
            name: filter.name.as_deref(),
        }
    }
}

impl<'a> From<&'a DeadLetterFilter> for DeadLetterSelection<'a> {
    fn from(filter: &'a DeadLetterFilter) -> Self {
        Self {
            actor_type: filter.actor_type.as_deref(),
            operation: filter.operation.as_deref(),
            error_contains: filter.error_contains.as_deref(),
            since: filter.since.map(micros),
            until: filter.until.map(micros),
            include_retried: filter.include_retried,
        }
    }
}
