//! Rows to the store's row types, shared by every backend: the column names are the same
//! everywhere.

use super::admin_rows::{
    ActorRow, ActorTypeRow, AdminEventRow, EffectRow, EffectStatus, MailboxDepthRow,
    MailboxHeadRow, ScheduledReminderRow, StalledRow,
};
use super::query::{get, Row};
use super::{
    ClaimedEffect, DueReminder, Instance, MessageRecord, PendingEffects, ReminderRecord,
    StateNotice, StoredArguments, StoredMessage, StoredStatus, UnknownHead, Version,
};
use crate::error::{Error, Result};
use crate::trace_context::TraceContext;

/// A ready message's or a scheduled reminder's operation and arguments.
pub(crate) fn stored_arguments(row: &Row) -> Result<StoredArguments> {
    Ok(StoredArguments {
        id: get(row, "id")?,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        operation: get(row, "operation")?,
        arguments: get(row, "arguments")?,
    })
}

/// An actor's row of `solid_instances`.
pub(crate) fn instance(row: &Row) -> Result<Instance> {
    Ok(Instance {
        state: get(row, "state")?,
        revision: get(row, "revision")?,
        incarnation: get(row, "incarnation")?,
        state_version: get(row, "state_version")?,
        paused: get::<Option<i64>>(row, "paused_at")?.is_some(),
    })
}

/// An actor's version, from the columns `actor_type`, `actor_id`, `incarnation`, `revision`.
pub(crate) fn state_notice(row: &Row) -> Result<StateNotice> {
    Ok(StateNotice {
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        version: Version {
            incarnation: get(row, "incarnation")?,
            revision: get(row, "revision")?,
        },
    })
}

/// The head of a mailbox.
pub(crate) fn stored_message(row: &Row) -> Result<StoredMessage> {
    Ok(StoredMessage {
        id: get(row, "id")?,
        operation: get(row, "operation")?,
        arguments: get(row, "arguments")?,
        attempts: get(row, "attempts")?,
        available_at: get(row, "available_at")?,
        incarnation: get(row, "message_incarnation")?,
        scheduled_for: get(row, "scheduled_for")?,
        trace: trace_context(row),
    })
}

/// The trace context in a row's `traceparent` column, with the `opentelemetry` feature: none
/// unless it holds a valid one (whatever else it holds, of whatever type, is no context and
/// no error); without the feature the column is not read.
fn trace_context(row: &Row) -> TraceContext {
    #[cfg(feature = "opentelemetry")]
    return get::<Option<String>>(row, "traceparent")
        .ok()
        .flatten()
        .map_or(TraceContext::NONE, |stored| {
            TraceContext::from_traceparent(&stored)
        });
    #[cfg(not(feature = "opentelemetry"))]
    {
        let _ = row;
        TraceContext::NONE
    }
}

/// An actor's row (`state`, `revision`, both `NULL` if it has none) beside the head of its
/// mailbox (the head's columns, `NULL` if it is empty), as one outer-joined row.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn locked_actor(row: &Row) -> Result<super::LockedActor> {
    let fresh = Instance::default();
    let instance = Instance {
        state: get(row, "state")?,
        revision: get::<Option<i64>>(row, "revision")?.unwrap_or(0),
        incarnation: get::<Option<i64>>(row, "incarnation")?.unwrap_or(fresh.incarnation),
        state_version: get::<Option<i64>>(row, "state_version")?.unwrap_or(fresh.state_version),
        paused: get::<Option<i64>>(row, "paused_at")?.is_some(),
    };
    let head = match get::<Option<i64>>(row, "id")? {
        Some(_) => Some(stored_message(row)?),
        None => None,
    };
    Ok(super::LockedActor { instance, head })
}

/// A whole message row.
pub(crate) fn message(row: &Row) -> Result<MessageRecord> {
    let status: String = get(row, "status")?;
    let id: i64 = get(row, "id")?;
    Ok(MessageRecord {
        id,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        operation: get(row, "operation")?,
        arguments: get(row, "arguments")?,
        request_id: get(row, "request_id")?,
        idempotency_key: get(row, "idempotency_key")?,
        status: StoredStatus::parse(&status).ok_or_else(|| {
            Error::Database(sqlx::Error::Protocol(format!(
                "message {id} has an unknown status {status:?}"
            )))
        })?,
        attempts: get(row, "attempts")?,
        available_at: get(row, "available_at")?,
        result: get(row, "result")?,
        last_error: get(row, "last_error")?,
        created_at: get(row, "created_at")?,
        finished_at: get(row, "finished_at")?,
        retried_as: get(row, "retried_as")?,
        incarnation: get(row, "incarnation")?,
        scheduled_for: get(row, "scheduled_for")?,
    })
}

/// A due reminder.
///
/// The outer error is a row without an id (nothing can be said of it); the inner one, a
/// row whose other columns do not read, or whose interval (not positive) it could not fire
/// as scheduled. Its catch-up policy is returned as stored: the engine reads it.
pub(crate) fn due_reminder(row: &Row) -> Result<Result<DueReminder>> {
    let id: i64 = get(row, "id")?;
    let read = || -> std::result::Result<DueReminder, String> {
        let column = |error: sqlx::Error| error.to_string();
        let reminder = DueReminder {
            id,
            actor_type: get(row, "actor_type").map_err(column)?,
            actor_id: get(row, "actor_id").map_err(column)?,
            name: get(row, "name").map_err(column)?,
            arguments: get(row, "arguments").map_err(column)?,
            due_at: get(row, "due_at").map_err(column)?,
            incarnation: get(row, "incarnation").map_err(column)?,
            every: get(row, "every_micros").map_err(column)?,
            missed: get(row, "missed").map_err(column)?,
            trace: trace_context(row),
        };
        if let Some(every) = reminder.every.filter(|every| *every <= 0) {
            return Err(format!(
                "its interval is {every} microseconds, not positive"
            ));
        }
        Ok(reminder)
    };
    Ok(read().map_err(|reason| Error::UnreadableReminder { id, reason }))
}

/// A scheduled reminder: `name, key, due_at, every_micros, missed`.
pub(crate) fn reminder(row: &Row) -> Result<ReminderRecord> {
    Ok(ReminderRecord {
        name: get(row, "name")?,
        key: get(row, "key")?,
        due_at: get(row, "due_at")?,
        every: get(row, "every_micros")?,
        missed: get(row, "missed")?,
    })
}

/// The head of a mailbox whose operation is unknown: `id, actor_type, operation`.
pub(crate) fn unknown_head(row: &Row) -> Result<UnknownHead> {
    Ok(UnknownHead {
        id: get(row, "id")?,
        actor_type: get(row, "actor_type")?,
        operation: get(row, "operation")?,
    })
}

/// `(actor_type, actor_id)` pairs.
pub(crate) fn actors(rows: &[Row]) -> Result<Vec<(String, String)>> {
    rows.iter()
        .map(|row| Ok((get(row, "actor_type")?, get(row, "actor_id")?)))
        .collect()
}

/// Unfinished messages by actor type: `actor_type, depth`.
pub(crate) fn depths(rows: &[Row]) -> Result<Vec<(String, i64)>> {
    rows.iter()
        .map(|row| Ok((get(row, "actor_type")?, get(row, "depth")?)))
        .collect()
}

/// An effect claimed by `UPDATE .. RETURNING`.
pub(crate) fn claimed_effect(row: &Row) -> Result<ClaimedEffect> {
    Ok(ClaimedEffect {
        id: get(row, "id")?,
        effect_id: get(row, "effect_id")?,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        name: get(row, "name")?,
        payload: get(row, "payload")?,
        attempts: get(row, "attempts")?,
        claims: get(row, "claims")?,
        incarnation: get(row, "incarnation")?,
        on_success: get(row, "on_success")?,
        on_failure: get(row, "on_failure")?,
        created_at: get(row, "created_at")?,
        last_error: get(row, "last_error")?,
        trace: trace_context(row),
    })
}

/// Unfinished effects of one kind: `name, count, oldest_created_at`.
pub(crate) fn pending_effects(row: &Row) -> Result<PendingEffects> {
    Ok(PendingEffects {
        name: get(row, "name")?,
        count: get(row, "count")?,
        oldest_created_at: get(row, "oldest_created_at")?,
    })
}

/// An actor type and its counts.
pub(crate) fn actor_type(row: &Row) -> Result<ActorTypeRow> {
    Ok(ActorTypeRow {
        actor_type: get(row, "actor_type")?,
        actors: get(row, "actors")?,
        paused: get::<Option<i64>>(row, "paused")?.unwrap_or(0),
        ready_messages: get(row, "ready_messages")?,
        dead_letters: get(row, "dead_letters")?,
    })
}

/// An actor as operators list it.
pub(crate) fn listed_actor(row: &Row) -> Result<ActorRow> {
    Ok(ActorRow {
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        revision: get(row, "revision")?,
        incarnation: get(row, "incarnation")?,
        state_version: get(row, "state_version")?,
        mailbox_depth: get(row, "depth")?,
        updated_at: get(row, "updated_at")?,
        paused_at: get(row, "paused_at")?,
    })
}

/// A scheduled reminder as operators list it.
pub(crate) fn scheduled_reminder(row: &Row) -> Result<ScheduledReminderRow> {
    Ok(ScheduledReminderRow {
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        name: get(row, "name")?,
        key: get(row, "key")?,
        due_at: get(row, "due_at")?,
        every_micros: get(row, "every_micros")?,
    })
}

/// An effect as operators list it.
pub(crate) fn listed_effect(row: &Row) -> Result<EffectRow> {
    let id = get(row, "id")?;
    let status: String = get(row, "status")?;
    Ok(EffectRow {
        id,
        effect_id: get(row, "effect_id")?,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        name: get(row, "name")?,
        status: EffectStatus::from_stored(&status).ok_or_else(|| {
            Error::Database(sqlx::Error::Protocol(format!(
                "effect {id} has an unknown status {status:?}"
            )))
        })?,
        attempts: get(row, "attempts")?,
        available_at: get(row, "available_at")?,
        last_error: get(row, "last_error")?,
        created_at: get(row, "created_at")?,
        payload: get(row, "payload")?,
    })
}

/// A ready message that passes left unrun.
pub(crate) fn stalled(row: &Row) -> Result<StalledRow> {
    Ok(StalledRow {
        id: get(row, "id")?,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        stalls: get(row, "stalls")?,
    })
}

/// An actor's count of ready messages.
pub(crate) fn mailbox_depth(row: &Row) -> Result<MailboxDepthRow> {
    Ok(MailboxDepthRow {
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        ready: get(row, "ready")?,
    })
}

/// An audit row.
pub(crate) fn admin_event(row: &Row) -> Result<AdminEventRow> {
    Ok(AdminEventRow {
        id: get(row, "id")?,
        at: get(row, "at")?,
        caller: get(row, "caller")?,
        action: get(row, "action")?,
        resource: get(row, "resource")?,
        outcome: get(row, "outcome")?,
        details: get(row, "details")?,
    })
}

/// The oldest ready message of an actor.
pub(crate) fn mailbox_head(row: &Row) -> Result<MailboxHeadRow> {
    Ok(MailboxHeadRow {
        message_id: get(row, "id")?,
        operation: get(row, "operation")?,
        attempts: get(row, "attempts")?,
        last_error: get(row, "last_error")?,
        available_at: get(row, "available_at")?,
        created_at: get(row, "created_at")?,
    })
}

/// A count pair (`status`, `count`) of a row.
pub(crate) fn status_count(row: &Row) -> Result<(String, i64)> {
    Ok((get(row, "status")?, get(row, "count")?))
}
