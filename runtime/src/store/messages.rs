//! The statements of `solid_messages`, the mailboxes, and the traits that run them on any
//! backend: [`MessageReads`] outside a transaction, [`MessageWrites`] inside one.
//!
//! Each statement is a named item here, written once with numbered parameters; where
//! backends spell one differently, its item is a function of the [`Dialect`].

use async_trait::async_trait;

use super::activity_tallies::finish_stamp;
use super::dialect::PerDialect;
use super::failed_attempts::record_failed_attempt;
use super::query::{built, query, Dialect, Query, Value};
use super::{
    rows, ActorKey, MessageLookup, MessageProgress, MessageRecord, NewMessage, ReadConnections,
    UnknownHead, WriteConnection,
};
use crate::error::{Error, Result};

/// The message with id `$1`.
pub(crate) const MESSAGE_BY_ID: &str =
    "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
            status, attempts, available_at, result, last_error, created_at, finished_at,
            retried_as, incarnation, scheduled_for
     FROM solid_messages WHERE id = $1";

/// The message with request id `$1`.
pub(crate) const MESSAGE_BY_REQUEST_ID: &str =
    "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
            status, attempts, available_at, result, last_error, created_at, finished_at,
            retried_as, incarnation, scheduled_for
     FROM solid_messages WHERE request_id = $1";

/// The message of the actor (`$1`, `$2`) with idempotency key `$3`.
pub(crate) const MESSAGE_BY_IDEMPOTENCY_KEY: &str =
    "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
            status, attempts, available_at, result, last_error, created_at, finished_at,
            retried_as, incarnation, scheduled_for
     FROM solid_messages WHERE actor_type = $1 AND actor_id = $2 AND idempotency_key = $3";

/// The head of a mailbox: its oldest ready message (`$1`, `$2`: the actor) that is due at
/// `$3` or has been tried.
///
/// A message sent or enqueued with a delay is not in line until it
/// is due, so it holds back nothing; one waiting out its retry backoff is, and holds the
/// messages behind it.
pub(crate) const HEAD_OF_MAILBOX: &str = concat!(
    "SELECT id, operation, arguments, attempts, available_at,
            incarnation AS message_incarnation, scheduled_for",
    traced!(read "traceparent"),
    "
     FROM solid_messages
     WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
       AND (attempts > 0 OR available_at <= $3)
     ORDER BY id LIMIT 1"
);

/// Actors whose head message is due at `$2` and whose `type:operation` is in the JSON array
/// `$1`, and who are not paused, oldest head first, at most `$3`.
pub(crate) fn ready_actors(dialect: Dialect) -> &'static str {
    static READY_ACTORS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT m.actor_type, m.actor_id FROM solid_messages m
             WHERE m.status = 'ready' AND m.available_at <= $2
               AND {} IN ({})
               AND NOT EXISTS (
                 SELECT 1 FROM solid_messages e
                 WHERE e.actor_type = m.actor_type AND e.actor_id = m.actor_id
                   AND e.status = 'ready' AND e.id < m.id
                   AND (e.attempts > 0 OR e.available_at <= $2))
               AND NOT EXISTS (
                 SELECT 1 FROM solid_instances p
                 WHERE p.actor_type = m.actor_type AND p.actor_id = m.actor_id
                   AND p.paused_at IS NOT NULL)
             ORDER BY m.id LIMIT $3",
            dialect.concat(&["m.actor_type", "':'", "m.operation"]),
            dialect.json_texts("$1"),
        )
    });
    READY_ACTORS.get(dialect)
}

/// How many ready messages each actor type has.
pub(crate) const MAILBOX_DEPTHS: &str = "SELECT actor_type, COUNT(*) AS depth FROM solid_messages
     WHERE status = 'ready' GROUP BY actor_type";

/// Heads of mailboxes that carry no note yet, of the types in the JSON array `$2`, whose
/// `type:operation` is not in the JSON array `$1`, at most `$3`.
pub(crate) fn unknown_operations(dialect: Dialect) -> &'static str {
    static UNKNOWN_OPERATIONS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT m.id, m.actor_type, m.operation FROM solid_messages m
             WHERE m.status = 'ready' AND m.last_error IS NULL
               AND {} NOT IN ({})
               AND m.actor_type IN ({})
               AND NOT EXISTS (
                 SELECT 1 FROM solid_messages e
                 WHERE e.actor_type = m.actor_type AND e.actor_id = m.actor_id
                   AND e.status = 'ready' AND e.id < m.id)
             ORDER BY m.id LIMIT $3",
            dialect.concat(&["m.actor_type", "':'", "m.operation"]),
            dialect.json_texts("$1"),
            dialect.json_texts("$2"),
        )
    });
    UNKNOWN_OPERATIONS.get(dialect)
}

/// The start of a multi-row insert of messages: the rows (`VALUES ..`) follow.
const INSERT_MESSAGES: &str = concat!(
    "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments,
                     request_id, idempotency_key, status, attempts, available_at, result,
                     last_error, created_at, finished_at, incarnation, scheduled_for",
    traced!(", traceparent"),
    ") "
);

/// How many values each row of [`INSERT_MESSAGES`] binds.
const INSERTED_COLUMNS: usize = if cfg!(feature = "opentelemetry") {
    16
} else {
    15
};

/// The place of `finished_at` among [`INSERT_MESSAGES`]' columns, which is stamped no
/// earlier than the fold mark ([`finish_stamp`]).
const FINISHED_AT_COLUMN: usize = 12;

/// What follows one inserted message to return its id (PostgreSQL, SQLite).
const RETURNING_ID: &str = " RETURNING id";

/// What follows one inserted message so that a taken idempotency key inserts nothing
/// (PostgreSQL, SQLite), returning the id of a row it did insert.
const UNLESS_KEY_TAKEN: &str = " ON CONFLICT (actor_type, actor_id, idempotency_key)
                                 WHERE idempotency_key IS NOT NULL DO NOTHING
                             RETURNING id";

/// The same on MySQL: a taken key inserts nothing, and so gives no id (its row counts as
/// affected: sqlx asks MySQL to count the rows it found).
const UNLESS_KEY_TAKEN_MYSQL: &str = " ON DUPLICATE KEY UPDATE id = id";

/// Binds a message's `progress` as the next six parameters, in the order of its columns in
/// [`update_message`]: status, attempts, available_at, result, last_error, finished_at.
pub(crate) fn bind_progress<'q>(statement: Query<'q>, progress: &MessageProgress<'q>) -> Query<'q> {
    statement
        .bind(progress.status.as_str())
        .bind(progress.attempts)
        .bind(progress.available_at)
        .bind(progress.result)
        .bind(progress.last_error.map(storable_text))
        .bind(progress.finished_at)
}

/// Records a message's progress (`$1` to `$6`; its finish no earlier than the fold mark:
/// [`finish_stamp`]) if message `$7` is still ready with `$8` attempts.
pub(crate) fn update_message(dialect: Dialect) -> &'static str {
    static UPDATE_MESSAGE: PerDialect = PerDialect::new(|dialect| {
        format!(
            "UPDATE solid_messages
             SET status = $1, attempts = $2, available_at = $3, result = $4, last_error = $5,
                 finished_at = {finished_at}
             WHERE id = $7 AND status = 'ready' AND attempts = $8",
            finished_at = finish_stamp(dialect, "$6"),
        )
    });
    UPDATE_MESSAGE.get(dialect)
}

/// [`update_message`]'s statement, or, where a simulation put back
/// [`Defect::StaleHeadAfterLockWait`](crate::simulation::Defect::StaleHeadAfterLockWait), the
/// same without its check that the row is still ready at the attempts the turn read.
fn update_message_query<'q>(dialect: Dialect) -> Query<'q> {
    #[cfg(feature = "simulation")]
    if crate::simulation::reintroduced(crate::simulation::Defect::StaleHeadAfterLockWait) {
        let unguarded =
            update_message(dialect).replace("status = 'ready' AND attempts = $8", "$8 = $8");
        return super::query::built(unguarded, Vec::new());
    }
    query(update_message(dialect))
}

/// Counts a pass that left ready message `$2` unrun, noting (`$1`) why.
pub(crate) const RECORD_STALL: &str =
    "UPDATE solid_messages SET stalls = stalls + 1, last_error = $1
     WHERE id = $2 AND status = 'ready'";

/// Notes (`$1`) why ready message `$2` waits.
pub(crate) const NOTE_MESSAGE: &str =
    "UPDATE solid_messages SET last_error = $1 WHERE id = $2 AND status = 'ready'";

/// How many ready messages the actor (`$1`, `$2`) has, counting at most `$3`.
pub(crate) const COUNT_READY: &str = "SELECT COUNT(*) FROM (
         SELECT 1 FROM solid_messages
         WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready' LIMIT $3
     ) AS ready";

/// Ends the ready messages of the actor (`$1`, `$2`) as destroyed at `$3` (or at the fold
/// mark, if later: [`finish_stamp`]).
pub(crate) fn destroy_ready_messages(dialect: Dialect) -> &'static str {
    static DESTROY_READY_MESSAGES: PerDialect = PerDialect::new(|dialect| {
        format!(
            "UPDATE solid_messages SET status = 'destroyed', finished_at = {finished_at}
             WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'",
            finished_at = finish_stamp(dialect, "$3"),
        )
    });
    DESTROY_READY_MESSAGES.get(dialect)
}

/// Takes dead letter `$1` for a retry: clears its idempotency key and marks it retried.
pub(crate) const RELEASE_DEAD_LETTER: &str =
    "UPDATE solid_messages SET idempotency_key = NULL, retried_as = 0
     WHERE id = $1 AND status = 'dead' AND retried_as IS NULL";

/// Records that message `$1` retried dead letter `$2`, on both: the dead letter names its
/// retry, and the retry its dead letter (the charts count a retried reminder's message as a
/// message, not as a reminder that fired again).
pub(crate) const LINK_RETRY: &str = "UPDATE solid_messages
     SET retried_as = CASE WHEN id = $2 THEN $1 ELSE retried_as END,
         retry_of = CASE WHEN id = $1 THEN $2 ELSE retry_of END
     WHERE id IN ($1, $2)";

/// Deletes completed, rejected and destroyed messages that finished before `$1`, but each
/// living actor's `$2` newest finished ones with an idempotency key (an actor with no row,
/// whose calls were all rejected, keeps none past the retention).
pub(crate) const PRUNE_FINISHED: &str = "DELETE FROM solid_messages
     WHERE status IN ('completed', 'rejected', 'destroyed') AND finished_at < $1
       AND id NOT IN (
         SELECT id FROM (
           SELECT kept.id, ROW_NUMBER() OVER (
               PARTITION BY kept.actor_type, kept.actor_id
               ORDER BY kept.finished_at DESC, kept.id DESC
           ) AS recent
           FROM solid_messages kept
           WHERE kept.idempotency_key IS NOT NULL AND kept.status <> 'ready'
             AND EXISTS (SELECT 1 FROM solid_instances i
                         WHERE i.actor_type = kept.actor_type AND i.actor_id = kept.actor_id)
         ) AS keyed WHERE recent <= $2
       )";

/// Deletes dead letters that died before `$1`.
pub(crate) const PRUNE_DEAD_LETTERS: &str =
    "DELETE FROM solid_messages WHERE status = 'dead' AND finished_at < $1";

/// Most message rows one statement inserts: 15 bound values each (16 with the trace
/// context), well inside SQLite's 32,766 and PostgreSQL's 65,535 per statement.
const MESSAGES_PER_INSERT: usize = 500;

/// Most bytes of arguments one multi-row insert carries (a single larger row goes alone):
/// a statement stays far below what a server takes in one message (1 GB on PostgreSQL).
const ARGUMENT_BYTES_PER_INSERT: usize = 8 << 20;

/// `messages` cut into consecutive runs that one insert statement each carries: at most
/// [`MESSAGES_PER_INSERT`] rows and, unless one row alone exceeds it,
/// [`ARGUMENT_BYTES_PER_INSERT`] bytes of arguments.
pub(crate) fn insert_batches<'m, 'a, T>(
    messages: &'m [(T, NewMessage<'a>)],
) -> impl Iterator<Item = &'m [(T, NewMessage<'a>)]> {
    let mut rest = messages;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let mut end = 0;
        while end < rest.len().min(MESSAGES_PER_INSERT) {
            bytes += rest[end].1.arguments.len();
            if end > 0 && bytes > ARGUMENT_BYTES_PER_INSERT {
                break;
            }
            end += 1;
        }
        let (batch, after) = rest.split_at(end);
        rest = after;
        Some(batch)
    })
}

/// An error text as every backend stores it: PostgreSQL keeps no NUL byte in text, and an
/// error's text (a handler's `Failure`, a panic message) is the user's.
pub(crate) fn storable_text(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// [`INSERT_MESSAGES`] with one row per message, then `suffix`, in the dialect's
/// placeholders.
fn message_insert<'q>(
    dialect: Dialect,
    messages: &[(ActorKey<'q, 'q>, NewMessage<'q>)],
    suffix: &str,
) -> Query<'q> {
    let mut sql = String::with_capacity(INSERT_MESSAGES.len() + messages.len() * 64);
    sql.push_str(INSERT_MESSAGES);
    sql.push_str("VALUES ");
    let mut values: Vec<Value<'q>> = Vec::with_capacity(messages.len() * INSERTED_COLUMNS);
    for (row, (actor, message)) in messages.iter().enumerate() {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..INSERTED_COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            let number = row * INSERTED_COLUMNS + column + 1;
            if column == FINISHED_AT_COLUMN {
                let mut placeholder = String::new();
                dialect.push_placeholder(&mut placeholder, number);
                sql.push_str(&finish_stamp(dialect, &placeholder));
            } else {
                dialect.push_placeholder(&mut sql, number);
            }
        }
        sql.push(')');
        let progress = &message.progress;
        values.extend([
            actor.actor_type.into(),
            actor.actor_id.into(),
            message.operation.into(),
            message.arguments.into(),
            message.request_id.into(),
            message.idempotency_key.into(),
            progress.status.as_str().into(),
            progress.attempts.into(),
            progress.available_at.into(),
            progress.result.into(),
            progress.last_error.map(storable_text).into(),
            message.created_at.into(),
            progress.finished_at.into(),
            message.incarnation.into(),
            message.scheduled_for.into(),
        ]);
        #[cfg(feature = "opentelemetry")]
        values.push(message.trace.traceparent().into());
    }
    sql.push_str(suffix);
    built(sql, values)
}

/// The query that finds one message.
fn lookup(lookup: MessageLookup<'_>) -> Query<'_> {
    match lookup {
        MessageLookup::Id(id) => query(MESSAGE_BY_ID).bind(id),
        MessageLookup::RequestId(request_id) => query(MESSAGE_BY_REQUEST_ID).bind(request_id),
        MessageLookup::IdempotencyKey(actor, key) => query(MESSAGE_BY_IDEMPOTENCY_KEY)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(key),
    }
}

/// The id MySQL gave an inserted row.
fn inserted_id(id: u64) -> Result<i64> {
    i64::try_from(id).map_err(|_| {
        Error::Database(sqlx::Error::Protocol(format!(
            "an inserted id {id} beyond BIGINT"
        )))
    })
}

/// Reads of the mailboxes, outside any write transaction.
#[async_trait]
pub(crate) trait MessageReads: Send + Sync {
    /// Reads one message, outside any write transaction.
    async fn message(&self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>>;

    /// Actors whose head message is due at `now` and of an operation in `operations` (a JSON
    /// array of `"Type:operation"`), oldest head first, at most `limit` of them.
    async fn ready_actors(
        &self,
        now: i64,
        operations: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>>;

    /// How many unfinished (ready) messages each actor type has, for types that have any.
    async fn mailbox_depths(&self) -> Result<Vec<(String, i64)>>;

    /// Heads of mailboxes of the types in `types` whose operation is not in `operations`
    /// (JSON arrays, as above) and that carry no note yet, at most `limit`.
    async fn unknown_operations(
        &self,
        operations: &str,
        types: &str,
        limit: i64,
    ) -> Result<Vec<UnknownHead>>;
}

#[async_trait]
impl<S: ReadConnections> MessageReads for S {
    async fn message(&self, lookup_by: MessageLookup<'_>) -> Result<Option<MessageRecord>> {
        lookup(lookup_by)
            .fetch_optional_row(self.readers(), rows::message)
            .await
    }

    async fn ready_actors(
        &self,
        now: i64,
        operations: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>> {
        let rows = query(ready_actors(self.dialect()))
            .bind(operations)
            .bind(now)
            .bind(limit)
            .fetch_all(self.readers())
            .await?;
        rows::actors(&rows)
    }

    async fn mailbox_depths(&self) -> Result<Vec<(String, i64)>> {
        let rows = query(MAILBOX_DEPTHS).fetch_all(self.readers()).await?;
        rows::depths(&rows)
    }

    async fn unknown_operations(
        &self,
        operations: &str,
        types: &str,
        limit: i64,
    ) -> Result<Vec<UnknownHead>> {
        query(unknown_operations(self.dialect()))
            .bind(operations)
            .bind(types)
            .bind(limit)
            .fetch_rows(self.readers(), rows::unknown_head)
            .await
    }
}

/// The writes of a turn (and of an operator) to the mailboxes, inside a transaction.
#[async_trait]
pub(crate) trait MessageWrites: Send {
    /// Inserts a message row; returns its id.
    async fn insert_message(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: &NewMessage<'_>,
    ) -> Result<i64>;

    /// Inserts message rows whose ids ascend in the order given, in one statement per few
    /// hundred rows.
    async fn insert_messages(
        &mut self,
        messages: &[(ActorKey<'_, '_>, NewMessage<'_>)],
    ) -> Result<()>;

    /// Inserts a message row unless its idempotency key is taken for this actor; returns its
    /// id, or `None` if the key was taken.
    async fn insert_message_once(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: &NewMessage<'_>,
    ) -> Result<Option<i64>>;

    /// Records a message's progress, if it is still ready with `attempts` attempts (so a
    /// stale runner cannot overwrite newer progress); returns whether it did. A failed
    /// attempt's progress also records when it failed (see [`Self::record_failed_attempt`]),
    /// as [`insert_message`](Self::insert_message) does for a message whose first attempt
    /// failed.
    async fn update_message(
        &mut self,
        message_id: i64,
        attempts: i64,
        progress: &MessageProgress<'_>,
    ) -> Result<bool>;

    /// Records that an attempt at a message failed at `failed_at` (microseconds), for the
    /// operators' charts of failures over time.
    async fn record_failed_attempt(&mut self, message_id: i64, failed_at: i64) -> Result<()>;

    /// Notes why a ready message waits, without counting an attempt.
    async fn note_message(&mut self, message_id: i64, note: &str) -> Result<()>;

    /// Counts a pass that left a ready message unrun (its turn kept conflicting, or its
    /// commit kept going unanswered), noting why, without counting an attempt.
    async fn record_stall(&mut self, message_id: i64, why: &str) -> Result<()>;

    /// How many ready messages the actor has, counting at most `limit`.
    async fn count_ready(&mut self, actor: ActorKey<'_, '_>, limit: i64) -> Result<i64>;

    /// Reads one message inside this transaction.
    async fn message(&mut self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>>;

    /// Takes a dead letter for a retry: clears its idempotency key (so the retry can take
    /// it over) and marks it as retried; false if it is not a dead letter or was retried
    /// already.
    async fn release_dead_letter(&mut self, message_id: i64) -> Result<bool>;

    /// Records which message retried a dead letter.
    async fn link_retry(&mut self, message_id: i64, retry_id: i64) -> Result<()>;
}

#[async_trait]
impl<T: WriteConnection> MessageWrites for T {
    async fn insert_message(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: &NewMessage<'_>,
    ) -> Result<i64> {
        self.counters().statement();
        let dialect = self.dialect();
        let id = match dialect {
            Dialect::MySql => {
                let inserted = message_insert(dialect, &[(actor, *message)], "")
                    .execute(self.on())
                    .await?;
                inserted_id(inserted.last_insert_id)?
            }
            Dialect::Sqlite | Dialect::Postgres => {
                message_insert(dialect, &[(actor, *message)], RETURNING_ID)
                    .fetch_scalar(self.on())
                    .await?
            }
        };
        if let Some(failed_at) = message.progress.failed_at {
            self.record_failed_attempt(id, failed_at).await?;
        }
        Ok(id)
    }

    async fn insert_messages(
        &mut self,
        messages: &[(ActorKey<'_, '_>, NewMessage<'_>)],
    ) -> Result<()> {
        let dialect = self.dialect();
        for rows in insert_batches(messages) {
            self.counters().statement();
            message_insert(dialect, rows, "").execute(self.on()).await?;
        }
        Ok(())
    }

    async fn insert_message_once(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: &NewMessage<'_>,
    ) -> Result<Option<i64>> {
        self.counters().statement();
        let dialect = self.dialect();
        match dialect {
            Dialect::MySql => {
                let inserted =
                    message_insert(dialect, &[(actor, *message)], UNLESS_KEY_TAKEN_MYSQL)
                        .execute(self.on())
                        .await?;
                if inserted.last_insert_id == 0 {
                    Ok(None)
                } else {
                    inserted_id(inserted.last_insert_id).map(Some)
                }
            }
            Dialect::Sqlite | Dialect::Postgres => {
                Ok(
                    message_insert(dialect, &[(actor, *message)], UNLESS_KEY_TAKEN)
                        .fetch_optional_scalar(self.on())
                        .await?,
                )
            }
        }
    }

    async fn update_message(
        &mut self,
        message_id: i64,
        attempts: i64,
        progress: &MessageProgress<'_>,
    ) -> Result<bool> {
        self.counters().statement();
        let updated = bind_progress(update_message_query(self.dialect()), progress)
            .bind(message_id)
            .bind(attempts)
            .execute(self.on())
            .await?;
        let recorded = updated.rows_affected == 1;
        if let (true, Some(failed_at)) = (recorded, progress.failed_at) {
            self.record_failed_attempt(message_id, failed_at).await?;
        }
        Ok(recorded)
    }

    async fn record_failed_attempt(&mut self, message_id: i64, failed_at: i64) -> Result<()> {
        self.counters().statement();
        query(record_failed_attempt(self.dialect()))
            .bind(message_id)
            .bind(failed_at)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn note_message(&mut self, message_id: i64, note: &str) -> Result<()> {
        self.counters().statement();
        query(NOTE_MESSAGE)
            .bind(storable_text(note))
            .bind(message_id)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn record_stall(&mut self, message_id: i64, why: &str) -> Result<()> {
        self.counters().statement();
        query(RECORD_STALL)
            .bind(storable_text(why))
            .bind(message_id)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn count_ready(&mut self, actor: ActorKey<'_, '_>, limit: i64) -> Result<i64> {
        self.counters().statement();
        Ok(query(COUNT_READY)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(limit)
            .fetch_scalar(self.on())
            .await?)
    }

    async fn message(&mut self, lookup_by: MessageLookup<'_>) -> Result<Option<MessageRecord>> {
        self.counters().statement();
        lookup(lookup_by)
            .fetch_optional_row(self.on(), rows::message)
            .await
    }

    async fn release_dead_letter(&mut self, message_id: i64) -> Result<bool> {
        self.counters().statement();
        let released = query(RELEASE_DEAD_LETTER)
            .bind(message_id)
            .execute(self.on())
            .await?;
        Ok(released.rows_affected == 1)
    }

    async fn link_retry(&mut self, message_id: i64, retry_id: i64) -> Result<()> {
        self.counters().statement();
        query(LINK_RETRY)
            .bind(retry_id)
            .bind(message_id)
            .execute(self.on())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(arguments: &str) -> ((), NewMessage<'_>) {
        let message = NewMessage {
            operation: "ring",
            arguments,
            request_id: "r",
            idempotency_key: None,
            created_at: 0,
            progress: MessageProgress::ready(0, 0),
            incarnation: None,
            scheduled_for: None,
            trace: crate::trace_context::TraceContext::NONE,
        };
        ((), message)
    }

    fn sizes(messages: &[((), NewMessage<'_>)]) -> Vec<usize> {
        insert_batches(messages).map(<[_]>::len).collect()
    }

    #[test]
    fn inserts_are_cut_by_rows_and_by_argument_bytes() {
        let small: Vec<_> = (0..1_234).map(|_| message("{}")).collect();
        assert_eq!(sizes(&small), [500, 500, 234]);
        assert!(sizes(&[]).is_empty());

        // 8 MiB of arguments per occurrence (an application may raise the limit that far):
        // one row per statement, never the gigabyte that 140 of them would make at once.
        let big = "x".repeat(ARGUMENT_BYTES_PER_INSERT);
        let large: Vec<_> = (0..140).map(|_| message(&big)).collect();
        assert_eq!(sizes(&large), vec![1; 140]);
        let half = "x".repeat(ARGUMENT_BYTES_PER_INSERT / 2);
        let halves: Vec<_> = (0..5).map(|_| message(&half)).collect();
        assert_eq!(sizes(&halves), [2, 2, 1]);
    }
}
