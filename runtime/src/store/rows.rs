//! Rows to values, shared by every backend: the column names are the same everywhere.

use sqlx::{ColumnIndex, Database, Row};

use super::{
    ClaimedEffect, DueReminder, Instance, MessageRecord, PendingEffects, ReminderRecord,
    StateNotice, StoredMessage, StoredStatus, UnknownHead, Version,
};
use crate::actor::turn::Missed;
use crate::error::{Error, Result};

/// A column's value, read by name or position: text, integers and their `NULL`able forms.
///
/// MySQL marks text in a binary collation (`utf8mb4_nopad_bin`, which keeps ids byte-exact)
/// as binary, and sqlx reads no binary column as a `String`: the MySQL backend reads text
/// through its own [`Text`](super::mysql::Text) instead.
pub(crate) trait Column<DB: Database>: Sized {
    fn get<R, I>(row: &R, index: I) -> sqlx::Result<Self>
    where
        R: Row<Database = DB>,
        I: ColumnIndex<R>;
}

/// Columns read the way sqlx reads them.
macro_rules! decoded_columns {
    ($database:ty: $($value:ty),*) => {
        $(
            impl Column<$database> for $value {
                fn get<R, I>(row: &R, index: I) -> sqlx::Result<Self>
                where
                    R: Row<Database = $database>,
                    I: ColumnIndex<R>,
                {
                    row.try_get(index)
                }
            }
        )*
    };
}

#[cfg(feature = "sqlite")]
decoded_columns!(sqlx::Sqlite: i64, Option<i64>, String, Option<String>);
#[cfg(feature = "postgres")]
decoded_columns!(sqlx::Postgres: i64, Option<i64>, String, Option<String>);
#[cfg(feature = "mysql")]
decoded_columns!(sqlx::MySql: i64, Option<i64>);

/// One column of `row`.
pub(crate) fn get<T, R, I>(row: &R, index: I) -> sqlx::Result<T>
where
    R: Row,
    I: ColumnIndex<R>,
    T: Column<R::Database>,
{
    T::get(row, index)
}

/// A ready message's or a scheduled reminder's operation and arguments.
pub(crate) fn stored_arguments<R>(row: &R) -> Result<super::admin::StoredArguments>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
{
    Ok(super::admin::StoredArguments {
        id: get(row, "id")?,
        actor_type: get(row, "actor_type")?,
        actor_id: get(row, "actor_id")?,
        operation: get(row, "operation")?,
        arguments: get(row, "arguments")?,
    })
}

/// An actor's row of `solid_instances`.
pub(crate) fn instance<R>(row: &R) -> Result<Instance>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
    Ok(Instance {
        state: get(row, "state")?,
        revision: get(row, "revision")?,
        incarnation: get(row, "incarnation")?,
        state_version: get(row, "state_version")?,
        paused: get::<Option<i64>, _, _>(row, "paused_at")?.is_some(),
    })
}

/// An actor's version, from the columns `actor_type`, `actor_id`, `incarnation`, `revision`.
pub(crate) fn state_notice<R>(row: &R) -> Result<StateNotice>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
{
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
pub(crate) fn stored_message<R>(row: &R) -> Result<StoredMessage>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
    Ok(StoredMessage {
        id: get(row, "id")?,
        operation: get(row, "operation")?,
        arguments: get(row, "arguments")?,
        attempts: get(row, "attempts")?,
        available_at: get(row, "available_at")?,
        incarnation: get(row, "message_incarnation")?,
        scheduled_for: get(row, "scheduled_for")?,
    })
}

/// An actor's row (`state`, `revision`, both `NULL` if it has none) beside the head of its
/// mailbox (the head's columns, `NULL` if it is empty), as one outer-joined row.
#[cfg(feature = "sqlite")]
pub(crate) fn locked_actor<R>(row: &R) -> Result<super::LockedActor>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
    let fresh = Instance::default();
    let instance = Instance {
        state: get(row, "state")?,
        revision: get::<Option<i64>, _, _>(row, "revision")?.unwrap_or(0),
        incarnation: get::<Option<i64>, _, _>(row, "incarnation")?.unwrap_or(fresh.incarnation),
        state_version: get::<Option<i64>, _, _>(row, "state_version")?
            .unwrap_or(fresh.state_version),
        paused: get::<Option<i64>, _, _>(row, "paused_at")?.is_some(),
    };
    let head = match get::<Option<i64>, _, _>(row, "id")? {
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
    String: Column<R::Database>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
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
/// row whose other columns do not read, or whose interval (not positive) or catch-up policy
/// (not one the runtime writes) it could not fire as scheduled.
pub(crate) fn due_reminder<R>(row: &R) -> Result<Result<DueReminder>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
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
    String: Column<R::Database>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
    Option<i64>: Column<R::Database>,
{
    Ok(ReminderRecord {
        name: get(row, "name")?,
        key: get(row, "key")?,
        due_at: get(row, "due_at")?,
        every: get(row, "every_micros")?,
        missed: get(row, "missed")?,
    })
}

/// The head of a mailbox whose operation is unknown: `id, actor_type, operation`.
pub(crate) fn unknown_head<R>(row: &R) -> Result<UnknownHead>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
{
    Ok(UnknownHead {
        id: get(row, "id")?,
        actor_type: get(row, "actor_type")?,
        operation: get(row, "operation")?,
    })
}

/// `(actor_type, actor_id)` pairs.
pub(crate) fn actors<R>(rows: &[R]) -> Result<Vec<(String, String)>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
{
    rows.iter()
        .map(|row| Ok((get(row, "actor_type")?, get(row, "actor_id")?)))
        .collect()
}

/// Unfinished messages by actor type: `actor_type, depth`.
pub(crate) fn depths<R>(rows: &[R]) -> Result<Vec<(String, i64)>>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
{
    rows.iter()
        .map(|row| Ok((get(row, "actor_type")?, get(row, "depth")?)))
        .collect()
}

/// An effect claimed by `UPDATE .. RETURNING`.
pub(crate) fn claimed_effect<R>(row: &R) -> Result<ClaimedEffect>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    Option<String>: Column<R::Database>,
    i64: Column<R::Database>,
{
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
    })
}

/// Unfinished effects of one kind: `name, count, oldest_created_at`.
pub(crate) fn pending_effects<R>(row: &R) -> Result<PendingEffects>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Column<R::Database>,
    i64: Column<R::Database>,
{
    Ok(PendingEffects {
        name: get(row, "name")?,
        count: get(row, "count")?,
        oldest_created_at: get(row, "oldest_created_at")?,
    })
}
