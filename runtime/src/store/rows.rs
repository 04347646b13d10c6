//! Rows to values, shared by every backend: the column names are the same everywhere.

use sqlx::{ColumnIndex, Database, Decode, Row, Type};

use super::{
    ClaimedEffect, DeadEffectRecord, DueReminder, Instance, MessageRecord, PendingEffects,
    ReminderRecord, StateNotice, StoredMessage, StoredStatus, UnknownHead, Version,
};
use crate::error::{Error, Result};
use crate::turn::Missed;

/// The columns every backend decodes: text, integers and their `NULL`able forms.
pub(crate) trait Columns<DB: Database>: for<'r> Decode<'r, DB> + Type<DB> {}

impl<DB: Database, T: for<'r> Decode<'r, DB> + Type<DB>> Columns<DB> for T {}

/// An actor's row of `solid_instances`.
pub(crate) fn instance<R>(row: &R) -> Result<Instance>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    Ok(Instance {
        state: row.try_get("state")?,
        revision: row.try_get("revision")?,
        incarnation: row.try_get("incarnation")?,
        state_version: row.try_get("state_version")?,
        paused: row.try_get::<Option<i64>, _>("paused_at")?.is_some(),
    })
}

/// An actor's version, from the columns `actor_type`, `actor_id`, `incarnation`, `revision`.
pub(crate) fn state_notice<R>(row: &R) -> Result<StateNotice>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    i64: Columns<R::Database>,
{
    Ok(StateNotice {
        actor_type: row.try_get("actor_type")?,
        actor_id: row.try_get("actor_id")?,
        version: Version {
            incarnation: row.try_get("incarnation")?,
            revision: row.try_get("revision")?,
        },
    })
}

/// The head of a mailbox.
pub(crate) fn stored_message<R>(row: &R) -> Result<StoredMessage>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    Ok(StoredMessage {
        id: row.try_get("id")?,
        operation: row.try_get("operation")?,
        arguments: row.try_get("arguments")?,
        attempts: row.try_get("attempts")?,
        available_at: row.try_get("available_at")?,
        incarnation: row.try_get("message_incarnation")?,
        scheduled_for: row.try_get("scheduled_for")?,
    })
}

/// An actor's row (`state`, `revision`, both `NULL` if it has none) beside the head of its
/// mailbox (the head's columns, `NULL` if it is empty), as one outer-joined row.
#[cfg(feature = "sqlite")]
pub(crate) fn locked_actor<R>(row: &R) -> Result<super::LockedActor>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    let fresh = Instance::default();
    let instance = Instance {
        state: row.try_get("state")?,
        revision: row.try_get::<Option<i64>, _>("revision")?.unwrap_or(0),
        incarnation: row
            .try_get::<Option<i64>, _>("incarnation")?
            .unwrap_or(fresh.incarnation),
        state_version: row
            .try_get::<Option<i64>, _>("state_version")?
            .unwrap_or(fresh.state_version),
        paused: row.try_get::<Option<i64>, _>("paused_at")?.is_some(),
    };
    let head = match row.try_get::<Option<i64>, _>("id")? {
        Some(_) => Some(stored_message(row)?),
        None => None,
    };
    Ok(super::LockedActor { instance, head })
}

/// A whole message row.
pub(crate) fn message<R>(row: &R) -> Result<MessageRecord>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    let status: String = row.try_get("status")?;
    let id: i64 = row.try_get("id")?;
    Ok(MessageRecord {
        id,
        actor_type: row.try_get("actor_type")?,
        actor_id: row.try_get("actor_id")?,
        operation: row.try_get("operation")?,
        arguments: row.try_get("arguments")?,
        request_id: row.try_get("request_id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        status: StoredStatus::parse(&status).ok_or_else(|| {
            Error::Database(sqlx::Error::Protocol(format!(
                "message {id} has an unknown status {status:?}"
            )))
        })?,
        attempts: row.try_get("attempts")?,
        available_at: row.try_get("available_at")?,
        result: row.try_get("result")?,
        last_error: row.try_get("last_error")?,
        created_at: row.try_get("created_at")?,
        finished_at: row.try_get("finished_at")?,
        retried_as: row.try_get("retried_as")?,
        incarnation: row.try_get("incarnation")?,
        scheduled_for: row.try_get("scheduled_for")?,
    })
}

/// A due reminder.
///
/// The outer error is a row without an id (nothing can be said of it); the inner one, a
/// row whose other columns do not read, or whose interval (not positive) or catch-up policy
/// (not one the runtime writes) it could not fire as scheduled.
pub(crate) fn due_reminder<R>(row: &R) -> Result<Result<DueReminder>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    let id: i64 = row.try_get("id")?;
    let read = || -> std::result::Result<DueReminder, String> {
        let column = |error: sqlx::Error| error.to_string();
        let reminder = DueReminder {
            id,
            actor_type: row.try_get("actor_type").map_err(column)?,
            actor_id: row.try_get("actor_id").map_err(column)?,
            name: row.try_get("name").map_err(column)?,
            arguments: row.try_get("arguments").map_err(column)?,
            due_at: row.try_get("due_at").map_err(column)?,
            incarnation: row.try_get("incarnation").map_err(column)?,
            every: row.try_get("every_micros").map_err(column)?,
            missed: row.try_get("missed").map_err(column)?,
        };
        if let Some(every) = reminder.every.filter(|every| *every <= 0) {
            return Err(format!(
                "its interval is {every} microseconds, not positive"
            ));
        }
        if let Some(missed) = &reminder.missed {
            Missed::read(missed).ok_or_else(|| {
                format!("its catch-up policy {missed:?} is not one the runtime writes")
            })?;
        }
        Ok(reminder)
    };
    Ok(read().map_err(|reason| Error::UnreadableReminder { id, reason }))
}

/// A scheduled reminder: `name, key, due_at, every_micros, missed`.
pub(crate) fn reminder<R>(row: &R) -> Result<ReminderRecord>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    Ok(ReminderRecord {
        name: row.try_get("name")?,
        key: row.try_get("key")?,
        due_at: row.try_get("due_at")?,
        every: row.try_get("every_micros")?,
        missed: row.try_get("missed")?,
    })
}

/// The head of a mailbox whose operation is unknown: `id, actor_type, operation`.
pub(crate) fn unknown_head<R>(row: &R) -> Result<UnknownHead>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    i64: Columns<R::Database>,
{
    Ok(UnknownHead {
        id: row.try_get("id")?,
        actor_type: row.try_get("actor_type")?,
        operation: row.try_get("operation")?,
    })
}

/// `(actor_type, actor_id)` pairs.
pub(crate) fn actors<R>(rows: &[R]) -> Result<Vec<(String, String)>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
{
    rows.iter()
        .map(|row| Ok((row.try_get("actor_type")?, row.try_get("actor_id")?)))
        .collect()
}

/// Unfinished messages by actor type: `actor_type, depth`.
pub(crate) fn depths<R>(rows: &[R]) -> Result<Vec<(String, i64)>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    i64: Columns<R::Database>,
{
    rows.iter()
        .map(|row| Ok((row.try_get("actor_type")?, row.try_get("depth")?)))
        .collect()
}

/// An effect claimed by `UPDATE .. RETURNING`.
pub(crate) fn claimed_effect<R>(row: &R) -> Result<ClaimedEffect>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
{
    Ok(ClaimedEffect {
        id: row.try_get("id")?,
        effect_id: row.try_get("effect_id")?,
        actor_type: row.try_get("actor_type")?,
        actor_id: row.try_get("actor_id")?,
        name: row.try_get("name")?,
        payload: row.try_get("payload")?,
        attempts: row.try_get("attempts")?,
        claims: row.try_get("claims")?,
        incarnation: row.try_get("incarnation")?,
        on_success: row.try_get("on_success")?,
        on_failure: row.try_get("on_failure")?,
        created_at: row.try_get("created_at")?,
    })
}

/// Unfinished effects of one kind: `name, count, oldest_created_at`.
pub(crate) fn pending_effects<R>(row: &R) -> Result<PendingEffects>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    i64: Columns<R::Database>,
{
    Ok(PendingEffects {
        name: row.try_get("name")?,
        count: row.try_get("count")?,
        oldest_created_at: row.try_get("oldest_created_at")?,
    })
}

/// A dead effect.
pub(crate) fn dead_effect<R>(row: &R) -> Result<DeadEffectRecord>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Columns<R::Database>,
    Option<String>: Columns<R::Database>,
    i64: Columns<R::Database>,
    Option<i64>: Columns<R::Database>,
{
    Ok(DeadEffectRecord {
        id: row.try_get("id")?,
        effect_id: row.try_get("effect_id")?,
        actor_type: row.try_get("actor_type")?,
        actor_id: row.try_get("actor_id")?,
        name: row.try_get("name")?,
        payload: row.try_get("payload")?,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
        finished_at: row.try_get("finished_at")?,
    })
}
