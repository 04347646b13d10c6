//! The statements of the operators' views and of `solid_admin_events`, and the traits that
//! run them on any backend: [`AdminReads`] on the store's read connections, and
//! [`AdminWrites`] (pausing, the audit log, retention) inside a transaction, so they take
//! the same turn-safe path as every other write. Every value is a bound parameter.
//!
//! The rows are the store's own ([`admin_rows`](super::admin_rows)), decoded in
//! [`rows`](super::rows): the administration API turns them into its public types.

use async_trait::async_trait;

use super::admin_rows::{
    ActorRow, ActorSelection, ActorTypeRow, AdminEventRow, AdminEventWrite, Counted,
    DeadLetterSelection, EffectRow, EffectSelection, MailboxDepthRow, MailboxHeadRow, Pruned,
    ReminderSelection, ScheduledReminderRow, StalledRow, StatusRow,
};
use super::dialect::PerDialect;
use super::effects::{PRUNE_DEAD_EFFECTS, PRUNE_DONE_EFFECTS};
use super::failed_attempts::PRUNE_FAILED_ATTEMPTS;
use super::instances::{create_instance, PAUSE, PAUSE_EXISTING, RESUME};
use super::messages::{storable_text, PRUNE_DEAD_LETTERS, PRUNE_FINISHED};
use super::query::{get, query, Dialect};
use super::{
    rows, ActorKey, MessageRecord, ReadConnections, Retention, StoredArguments, WriteConnection,
};
use crate::error::Result;

// solid_instances and solid_messages: the actors.

/// Every actor type with actors (those with a row, and those with only ready messages or
/// dead letters), by name, with its counts. The ready messages and the dead letters are read
/// from their own partial indexes (one `IN` would read every message).
pub(crate) const ACTOR_TYPES: &str = "SELECT k.actor_type, COUNT(*) AS actors,
            COUNT(i.paused_at) AS paused,
            (SELECT COUNT(*) FROM solid_messages m
             WHERE m.actor_type = k.actor_type AND m.status = 'ready')
                AS ready_messages,
            (SELECT COUNT(*) FROM solid_messages m
             WHERE m.actor_type = k.actor_type AND m.status = 'dead')
                AS dead_letters
     FROM (SELECT actor_type, actor_id FROM solid_instances
           UNION SELECT actor_type, actor_id FROM solid_messages WHERE status = 'ready'
           UNION SELECT actor_type, actor_id FROM solid_messages WHERE status = 'dead') AS k
     LEFT JOIN solid_instances i ON i.actor_type = k.actor_type AND i.actor_id = k.actor_id
     GROUP BY k.actor_type ORDER BY k.actor_type";

/// A page of actors (as [`ACTOR_TYPES`] finds them) of type `$1`, with an id starting with
/// `$2`, after (`$3`, `$4`), in (type, id) order, at most `$5` (`NULL`: any).
pub(crate) const ACTORS: &str = "SELECT k.actor_type, k.actor_id, i.revision, i.incarnation,
            i.state_version, i.updated_at, i.paused_at,
            (SELECT COUNT(*) FROM solid_messages m
             WHERE m.actor_type = k.actor_type AND m.actor_id = k.actor_id
               AND m.status = 'ready') AS depth
     FROM (SELECT actor_type, actor_id FROM solid_instances
           UNION SELECT actor_type, actor_id FROM solid_messages WHERE status = 'ready'
           UNION SELECT actor_type, actor_id FROM solid_messages WHERE status = 'dead') AS k
     LEFT JOIN solid_instances i ON i.actor_type = k.actor_type AND i.actor_id = k.actor_id
     WHERE ($1 IS NULL OR k.actor_type = $1)
       AND ($2 IS NULL OR substr(k.actor_id, 1, length($2)) = $2)
       AND ($3 IS NULL OR k.actor_type > $3
            OR (k.actor_type = $3 AND k.actor_id > $4))
     ORDER BY k.actor_type, k.actor_id LIMIT $5";

/// The actor's (`$1`, `$2`) committed state.
pub(crate) const STATE: &str =
    "SELECT state FROM solid_instances WHERE actor_type = $1 AND actor_id = $2";

// solid_messages.

/// The oldest ready message of the actor (`$1`, `$2`), due or not.
pub(crate) const OLDEST_READY: &str =
    "SELECT id, operation, attempts, last_error, available_at, created_at
     FROM solid_messages
     WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
     ORDER BY id LIMIT 1";

/// Dead letters with ids in (`$1`, `$9`], of type `$2` and operation `$3`, whose error is
/// `LIKE $4` (with `!` escaping), that died in [`$5`, `$6`), retried ones only if `$7`,
/// oldest first, at most `$8` (`NULL`: any).
pub(crate) const DEAD_LETTERS_MATCHING: &str =
    "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
            status, attempts, available_at, result, last_error, created_at, finished_at,
            retried_as, incarnation, scheduled_for
     FROM solid_messages WHERE status = 'dead' AND id > $1 AND id <= $9
       AND ($2 IS NULL OR actor_type = $2) AND ($3 IS NULL OR operation = $3)
       AND ($4 IS NULL OR last_error LIKE $4 ESCAPE '!')
       AND ($5 IS NULL OR finished_at >= $5)
       AND ($6 IS NULL OR finished_at < $6)
       AND (retried_as IS NULL OR $7)
     ORDER BY id LIMIT $8";

/// Ready messages that passes left unrun at least `$1` times, the most first, at most `$2`.
pub(crate) const STALLED_MESSAGES: &str = "SELECT id, actor_type, actor_id, stalls
     FROM solid_messages WHERE status = 'ready' AND stalls >= $1
     ORDER BY stalls DESC, id LIMIT $2";

/// The highest message id so far.
pub(crate) const NEWEST_MESSAGE_ID: &str = "SELECT MAX(id) FROM solid_messages";

/// The ready messages with ids above `$1`, by id, at most `$2`.
pub(crate) const PENDING_ARGUMENTS: &str = "SELECT id, actor_type, actor_id, operation, arguments
     FROM solid_messages WHERE status = 'ready' AND id > $1
     ORDER BY id LIMIT $2";

/// The actor's (`$1`, `$2`) messages with ids above `$3`, newest first, at most `$4`.
pub(crate) const RECENT_MESSAGES: &str =
    "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
            status, attempts, available_at, result, last_error, created_at, finished_at,
            retried_as, incarnation, scheduled_for
     FROM solid_messages
     WHERE id > $3 AND actor_type = $1 AND actor_id = $2 ORDER BY id DESC LIMIT $4";

/// The actors with the most ready messages, the deepest first, at most `$1`.
pub(crate) const BUSIEST_MAILBOXES: &str =
    "SELECT actor_type, actor_id, COUNT(*) AS ready FROM solid_messages
     WHERE status = 'ready' GROUP BY actor_type, actor_id
     ORDER BY ready DESC, actor_type, actor_id LIMIT $1";

/// Messages that finished at or after `$1`, by status (a range of `solid_messages_finished`
/// for each status).
pub(crate) const FINISHED_SINCE: &str = "SELECT status, COUNT(*) AS count FROM solid_messages
     WHERE status <> 'ready' AND status IN ('completed', 'rejected', 'dead', 'destroyed')
       AND finished_at >= $1
     GROUP BY status ORDER BY status";

/// Messages and effects by status, each counted from an index that holds only them (the
/// ready messages', the finished messages', the pending effects' and the finished effects'),
/// not from their tables' rows.
pub(crate) const STATUS_COUNTS: &str = "SELECT 'messages' AS kind, status, COUNT(*) AS count
     FROM solid_messages WHERE status = 'ready' GROUP BY status
     UNION ALL
     SELECT 'messages' AS kind, status, COUNT(*) AS count
     FROM solid_messages WHERE status <> 'ready' GROUP BY status
     UNION ALL
     SELECT 'effects' AS kind, status, COUNT(*) AS count
     FROM solid_effects WHERE status IN ('ready', 'running') GROUP BY status
     UNION ALL
     SELECT 'effects' AS kind, status, COUNT(*) AS count
     FROM solid_effects WHERE status IN ('done', 'dead') GROUP BY status
     ORDER BY kind, status";

/// The messages and effects that wait or failed for good, by status: ready messages and dead
/// letters, ready, running and dead effects; each counted from an index that holds only them
/// (however many finished rows the tables keep; the `IN` names the finished effects' partial
/// index as its definition does, which SQLite needs to read it).
pub(crate) const OUTSTANDING_COUNTS: &str = "SELECT 'messages' AS kind, status, COUNT(*) AS count
     FROM solid_messages WHERE status = 'ready' GROUP BY status
     UNION ALL
     SELECT 'messages' AS kind, status, COUNT(*) AS count
     FROM solid_messages WHERE status = 'dead' GROUP BY status
     UNION ALL
     SELECT 'effects' AS kind, status, COUNT(*) AS count
     FROM solid_effects WHERE status IN ('ready', 'running') GROUP BY status
     UNION ALL
     SELECT 'effects' AS kind, status, COUNT(*) AS count
     FROM solid_effects WHERE status IN ('done', 'dead') AND status = 'dead' GROUP BY status
     ORDER BY kind, status";

/// The reminders, those due at `$1`, the paused actors, the oldest message due at `$1`, and
/// the next reminder.
pub(crate) const STATUS_DUE: &str = "SELECT (SELECT COUNT(*) FROM solid_reminders) AS reminders,
            (SELECT COUNT(*) FROM solid_reminders WHERE due_at <= $1) AS due,
            (SELECT COUNT(*) FROM solid_instances WHERE paused_at IS NOT NULL)
                AS paused,
            (SELECT MIN(created_at) FROM solid_messages
             WHERE status = 'ready' AND available_at <= $1) AS oldest_due,
            (SELECT MIN(due_at) FROM solid_reminders) AS next_reminder";

// solid_reminders.

/// Reminders of type `$1` and id `$2` due at or before `$3`, the next due first, at most
/// `$4` (`NULL`: any).
pub(crate) const ALL_REMINDERS: &str =
    "SELECT actor_type, actor_id, name, \"key\", due_at, every_micros
     FROM solid_reminders
     WHERE ($1 IS NULL OR actor_type = $1) AND ($2 IS NULL OR actor_id = $2)
       AND ($3 IS NULL OR due_at <= $3)
     ORDER BY due_at, id LIMIT $4";

/// The reminders with ids above `$1`, by id, at most `$2`, their name as the operation.
pub(crate) const REMINDER_ARGUMENTS: &str =
    "SELECT id, actor_type, actor_id, name AS operation, arguments
     FROM solid_reminders WHERE id > $1 ORDER BY id LIMIT $2";

// solid_effects.

/// Effects of status `$1` (`pending`: ready or running), type `$2`, id `$3` and name `$4`,
/// oldest first, at most `$5` (`NULL`: any).
pub(crate) const EFFECTS: &str =
    "SELECT id, effect_id, actor_type, actor_id, name, status, attempts,
            available_at, last_error, created_at, SUBSTR(payload, 1, 4097) AS payload
     FROM solid_effects
     WHERE (status <> 'ready' OR $1) AND (status <> 'running' OR $6)
       AND (status <> 'done' OR $7) AND (status <> 'dead' OR $8)
       AND ($2 IS NULL OR actor_type = $2) AND ($3 IS NULL OR actor_id = $3)
       AND ($4 IS NULL OR name = $4)
     ORDER BY id LIMIT $5";

// solid_admin_events and solid_schema_migrations.

/// Audit rows with ids below `$1`, newest first, at most `$2`.
pub(crate) const ADMIN_EVENTS: &str = "SELECT id, at, caller, action, resource, outcome, details
     FROM solid_admin_events WHERE id < $1 ORDER BY id DESC LIMIT $2";

/// Appends an audit row, returning its id (but on MySQL, whose id is the inserted one).
pub(crate) fn record_admin_event(dialect: Dialect) -> &'static str {
    static RECORD_ADMIN_EVENT: PerDialect = PerDialect::new(|dialect| {
        format!(
            "INSERT INTO solid_admin_events (at, caller, action, resource, outcome, details)
             VALUES ($1, $2, $3, $4, $5, $6){}",
            dialect.returning_id(),
        )
    });
    RECORD_ADMIN_EVENT.get(dialect)
}

/// Records how the call of audit row `$3` ended (`$1`, `$2`).
pub(crate) const FINISH_ADMIN_EVENT: &str =
    "UPDATE solid_admin_events SET outcome = $1, details = $2 WHERE id = $3";

/// Deletes audit rows older than `$1`.
pub(crate) const PRUNE_ADMIN_EVENTS: &str = "DELETE FROM solid_admin_events WHERE at < $1";

/// The schema versions applied.
pub(crate) const APPLIED_MIGRATIONS: &str =
    "SELECT version FROM solid_schema_migrations ORDER BY version";

/// A `LIKE` pattern that matches `text` anywhere, with `!` escaping the wildcards (and
/// itself): a backslash would read differently under MySQL's `NO_BACKSLASH_ESCAPES`.
pub(crate) fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '!' | '%' | '_') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// What the administration API reads, without locking anything.
#[async_trait]
pub(crate) trait AdminReads: Send + Sync {
    /// Every actor type with actors or messages, by name.
    async fn actor_types(&self) -> Result<Vec<ActorTypeRow>>;

    /// A page of actors, at most `limit`, in (type, id) order.
    async fn actors(&self, selection: &ActorSelection<'_>, limit: i64) -> Result<Vec<ActorRow>>;

    /// The oldest ready message of an actor, due or not.
    async fn oldest_ready(&self, actor: ActorKey<'_, '_>) -> Result<Option<MailboxHeadRow>>;

    /// An actor's committed state, if it has one.
    async fn state(&self, actor: ActorKey<'_, '_>) -> Result<Option<String>>;

    /// Reminders, the next due first.
    async fn all_reminders(
        &self,
        selection: &ReminderSelection<'_>,
        limit: i64,
    ) -> Result<Vec<ScheduledReminderRow>>;

    /// Effects, oldest first.
    async fn effects(&self, selection: &EffectSelection<'_>, limit: i64) -> Result<Vec<EffectRow>>;

    /// The dead letters matching `selection` with ids in `(after_id, up_to]`, oldest first.
    async fn dead_letters_matching(
        &self,
        selection: &DeadLetterSelection<'_>,
        (after_id, up_to): (i64, i64),
        limit: i64,
    ) -> Result<Vec<MessageRecord>>;

    /// The ready messages that passes left unrun at least `min_stalls` times, the most
    /// first, at most `limit`.
    async fn stalled_messages(&self, min_stalls: i64, limit: i64) -> Result<Vec<StalledRow>>;

    /// The highest message id so far (0 for none): a message enqueued later has a higher one.
    async fn newest_message_id(&self) -> Result<i64>;

    /// The unfinished (ready) messages with ids above `after_id`, by id, at most `limit`:
    /// what a build must decode to run them.
    async fn pending_arguments(&self, after_id: i64, limit: i64) -> Result<Vec<StoredArguments>>;

    /// The scheduled reminders with ids above `after_id`, by id, at most `limit`, with the
    /// reminder's name as the operation: what a build must decode when they fire.
    async fn reminder_arguments(&self, after_id: i64, limit: i64) -> Result<Vec<StoredArguments>>;

    /// An actor's messages with ids above `after_id`, newest first, at most `limit`.
    async fn recent_messages(
        &self,
        actor: ActorKey<'_, '_>,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<MessageRecord>>;

    /// The actors with the most ready messages, the deepest first, at most `limit`.
    async fn busiest_mailboxes(&self, limit: i64) -> Result<Vec<MailboxDepthRow>>;

    /// Messages that finished at or after `since`, by status.
    async fn finished_since(&self, since: i64) -> Result<Vec<(String, i64)>>;

    /// Counts for `status` of the statuses `counted`, with `now` for what is due.
    async fn status(&self, now: i64, counted: Counted) -> Result<StatusRow>;

    /// Audit rows older than `before_id`, newest first.
    async fn admin_events(&self, before_id: i64, limit: i64) -> Result<Vec<AdminEventRow>>;

    /// The schema versions applied to the database.
    async fn applied_migrations(&self) -> Result<Vec<i64>>;
}

#[async_trait]
impl<S: ReadConnections> AdminReads for S {
    async fn actor_types(&self) -> Result<Vec<ActorTypeRow>> {
        query(ACTOR_TYPES)
            .fetch_rows(self.readers(), rows::actor_type)
            .await
    }

    async fn actors(&self, selection: &ActorSelection<'_>, limit: i64) -> Result<Vec<ActorRow>> {
        let (after_type, after_id) = match selection.after {
            Some((actor_type, actor_id)) => (Some(actor_type), actor_id),
            None => (None, ""),
        };
        query(ACTORS)
            .bind(selection.actor_type)
            .bind(selection.id_prefix)
            .bind(after_type)
            .bind(after_id)
            .bind(limit)
            .fetch_rows(self.readers(), rows::listed_actor)
            .await
    }

    async fn oldest_ready(&self, actor: ActorKey<'_, '_>) -> Result<Option<MailboxHeadRow>> {
        query(OLDEST_READY)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_optional_row(self.readers(), rows::mailbox_head)
            .await
    }

    async fn state(&self, actor: ActorKey<'_, '_>) -> Result<Option<String>> {
        let state: Option<Option<String>> = query(STATE)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_optional_scalar(self.readers())
            .await?;
        Ok(state.flatten())
    }

    async fn all_reminders(
        &self,
        selection: &ReminderSelection<'_>,
        limit: i64,
    ) -> Result<Vec<ScheduledReminderRow>> {
        query(ALL_REMINDERS)
            .bind(selection.actor_type)
            .bind(selection.actor_id)
            .bind(selection.due_before)
            .bind(limit)
            .fetch_rows(self.readers(), rows::scheduled_reminder)
            .await
    }

    async fn effects(&self, selection: &EffectSelection<'_>, limit: i64) -> Result<Vec<EffectRow>> {
        let [ready, running, done, dead] = selection.statuses;
        query(EFFECTS)
            .bind(ready)
            .bind(selection.actor_type)
            .bind(selection.actor_id)
            .bind(selection.name)
            .bind(limit)
            .bind(running)
            .bind(done)
            .bind(dead)
            .fetch_rows(self.readers(), rows::listed_effect)
            .await
    }

    async fn dead_letters_matching(
        &self,
        selection: &DeadLetterSelection<'_>,
        (after_id, up_to): (i64, i64),
        limit: i64,
    ) -> Result<Vec<MessageRecord>> {
        query(DEAD_LETTERS_MATCHING)
            .bind(after_id)
            .bind(selection.actor_type)
            .bind(selection.operation)
            .bind(selection.error_contains.map(contains_pattern))
            .bind(selection.since)
            .bind(selection.until)
            .bind(selection.include_retried)
            .bind(limit)
            .bind(up_to)
            .fetch_rows(self.readers(), rows::message)
            .await
    }

    async fn stalled_messages(&self, min_stalls: i64, limit: i64) -> Result<Vec<StalledRow>> {
        query(STALLED_MESSAGES)
            .bind(min_stalls)
            .bind(limit)
            .fetch_rows(self.readers(), rows::stalled)
            .await
    }

    async fn newest_message_id(&self) -> Result<i64> {
        let newest: Option<i64> = query(NEWEST_MESSAGE_ID)
            .fetch_scalar(self.readers())
            .await?;
        Ok(newest.unwrap_or(0))
    }

    async fn pending_arguments(&self, after_id: i64, limit: i64) -> Result<Vec<StoredArguments>> {
        query(PENDING_ARGUMENTS)
            .bind(after_id)
            .bind(limit)
            .fetch_rows(self.readers(), rows::stored_arguments)
            .await
    }

    async fn reminder_arguments(&self, after_id: i64, limit: i64) -> Result<Vec<StoredArguments>> {
        query(REMINDER_ARGUMENTS)
            .bind(after_id)
            .bind(limit)
            .fetch_rows(self.readers(), rows::stored_arguments)
            .await
    }

    async fn recent_messages(
        &self,
        actor: ActorKey<'_, '_>,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<MessageRecord>> {
        query(RECENT_MESSAGES)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(after_id)
            .bind(limit)
            .fetch_rows(self.readers(), rows::message)
            .await
    }

    async fn busiest_mailboxes(&self, limit: i64) -> Result<Vec<MailboxDepthRow>> {
        query(BUSIEST_MAILBOXES)
            .bind(limit)
            .fetch_rows(self.readers(), rows::mailbox_depth)
            .await
    }

    async fn finished_since(&self, since: i64) -> Result<Vec<(String, i64)>> {
        query(FINISHED_SINCE)
            .bind(since)
            .fetch_rows(self.readers(), rows::status_count)
            .await
    }

    async fn status(&self, now: i64, counted: Counted) -> Result<StatusRow> {
        let statement = match counted {
            Counted::Every => STATUS_COUNTS,
            Counted::Outstanding => OUTSTANDING_COUNTS,
        };
        let counts = query(statement).fetch_all(self.readers()).await?;
        let mut status = StatusRow::default();
        for row in &counts {
            let kind: String = get(row, "kind")?;
            let count = rows::status_count(row)?;
            match kind.as_str() {
                "messages" => status.messages.push(count),
                _ => status.effects.push(count),
            }
        }
        let row = query(STATUS_DUE)
            .bind(now)
            .fetch_one(self.readers())
            .await?;
        status.reminders = get(&row, "reminders")?;
        status.reminders_due = get(&row, "due")?;
        status.paused_actors = get(&row, "paused")?;
        status.oldest_due_message_at = get(&row, "oldest_due")?;
        let next_reminder: Option<i64> = get(&row, "next_reminder")?;
        status.oldest_due_reminder_at = next_reminder.filter(|due| *due <= now);
        Ok(status)
    }

    async fn admin_events(&self, before_id: i64, limit: i64) -> Result<Vec<AdminEventRow>> {
        query(ADMIN_EVENTS)
            .bind(before_id)
            .bind(limit)
            .fetch_rows(self.readers(), rows::admin_event)
            .await
    }

    async fn applied_migrations(&self) -> Result<Vec<i64>> {
        Ok(query(APPLIED_MIGRATIONS)
            .fetch_all_scalars(self.readers())
            .await?)
    }
}

/// The administration API's writes and retention, inside a transaction.
#[async_trait]
pub(crate) trait AdminWrites: Send {
    /// Pauses (`paused_at` some) or resumes (`None`) an actor; false if it already was.
    async fn set_paused(&mut self, actor: ActorKey<'_, '_>, paused_at: Option<i64>)
        -> Result<bool>;

    /// Appends an audit row; returns its id.
    async fn record_admin_event(&mut self, event: &AdminEventWrite<'_>) -> Result<i64>;

    /// Records how an allowed call ended on its audit row.
    async fn finish_admin_event(
        &mut self,
        id: i64,
        outcome: &str,
        details: Option<&str>,
    ) -> Result<()>;

    /// Deletes audit rows older than `before`; returns how many.
    async fn prune_admin_events(&mut self, before: i64) -> Result<u64>;

    /// Deletes what `retention` says; returns how many rows were deleted.
    async fn prune(&mut self, retention: &Retention) -> Result<Pruned>;
}

#[async_trait]
impl<T: WriteConnection> AdminWrites for T {
    async fn set_paused(
        &mut self,
        actor: ActorKey<'_, '_>,
        paused_at: Option<i64>,
    ) -> Result<bool> {
        self.counters().statement();
        let changed = match (paused_at, self.dialect()) {
            (Some(at), Dialect::Sqlite | Dialect::Postgres) => {
                query(PAUSE)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(at)
                    .execute(self.on())
                    .await?
                    .rows_affected
            }
            (Some(at), dialect @ Dialect::MySql) => {
                self.counters().statement();
                query(create_instance(dialect))
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .execute(self.on())
                    .await?;
                query(PAUSE_EXISTING)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(at)
                    .execute(self.on())
                    .await?
                    .rows_affected
            }
            (None, _) => {
                query(RESUME)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .execute(self.on())
                    .await?
                    .rows_affected
            }
        };
        Ok(changed == 1)
    }

    async fn record_admin_event(&mut self, event: &AdminEventWrite<'_>) -> Result<i64> {
        self.counters().statement();
        let dialect = self.dialect();
        let insert = query(record_admin_event(dialect))
            .bind(event.at)
            .bind(event.caller.map(storable_text))
            .bind(event.action)
            .bind(storable_text(event.resource))
            .bind(event.outcome)
            .bind(event.details.map(storable_text));
        match dialect {
            Dialect::Sqlite | Dialect::Postgres => Ok(insert.fetch_scalar(self.on()).await?),
            Dialect::MySql => {
                let id = insert.execute(self.on()).await?.last_insert_id;
                i64::try_from(id).map_err(|_| {
                    crate::error::Error::Database(sqlx::Error::Protocol(format!(
                        "an inserted id {id} beyond BIGINT"
                    )))
                })
            }
        }
    }

    async fn finish_admin_event(
        &mut self,
        id: i64,
        outcome: &str,
        details: Option<&str>,
    ) -> Result<()> {
        self.counters().statement();
        query(FINISH_ADMIN_EVENT)
            .bind(outcome)
            .bind(details.map(storable_text))
            .bind(id)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn prune_admin_events(&mut self, before: i64) -> Result<u64> {
        self.counters().statement();
        let pruned = query(PRUNE_ADMIN_EVENTS)
            .bind(before)
            .execute(self.on())
            .await?;
        Ok(pruned.rows_affected)
    }

    async fn prune(&mut self, retention: &Retention) -> Result<Pruned> {
        self.counters().statement();
        let finished = query(PRUNE_FINISHED)
            .bind(retention.finished_before)
            .bind(retention.keep_keyed)
            .execute(self.on())
            .await?;
        self.counters().statement();
        let done = query(PRUNE_DONE_EFFECTS)
            .bind(retention.finished_before)
            .execute(self.on())
            .await?;
        self.counters().statement();
        let failed_attempts = query(PRUNE_FAILED_ATTEMPTS)
            .bind(retention.finished_before)
            .execute(self.on())
            .await?;
        let mut pruned = Pruned {
            finished_messages: finished.rows_affected,
            done_effects: done.rows_affected,
            failed_attempts: failed_attempts.rows_affected,
            ..Pruned::default()
        };
        if let Some(dead_before) = retention.dead_before {
            self.counters().statement();
            let dead_letters = query(PRUNE_DEAD_LETTERS)
                .bind(dead_before)
                .execute(self.on())
                .await?;
            self.counters().statement();
            let dead_effects = query(PRUNE_DEAD_EFFECTS)
                .bind(dead_before)
                .execute(self.on())
                .await?;
            pruned.dead_letters = dead_letters.rows_affected;
            pruned.dead_effects = dead_effects.rows_affected;
        }
        Ok(pruned)
    }
}
