//! The SQL of the administration API: reads on the store's read connections, and the few
//! writes (pausing, the audit log, the doctor's scratch row) inside a transaction, so they
//! take the same turn-safe path as every other write. Every value is a bound parameter.

use async_trait::async_trait;

use super::{ActorKey, MessageRecord};
use crate::admin::{
    ActorFilter, ActorSummary, ActorTypeSummary, AdminEvent, DeadLetterFilter, EffectFilter,
    EffectSummary, MailboxDepth, MailboxHead, ReminderFilter, ReminderSummary, Status,
};
use crate::error::Result;

/// What the administration API reads, without locking anything.
#[async_trait]
pub(crate) trait AdminReads: Send + Sync {
    /// Every actor type with actors or messages, by name.
    async fn actor_types(&self) -> Result<Vec<ActorTypeSummary>>;

    /// A page of actors, at most `limit`, in (type, id) order.
    async fn actors(&self, filter: &ActorFilter, limit: i64) -> Result<Vec<ActorSummary>>;

    /// The oldest ready message of an actor, due or not.
    async fn oldest_ready(&self, actor: ActorKey<'_, '_>) -> Result<Option<MailboxHead>>;

    /// An actor's committed state, if it has one.
    async fn state(&self, actor: ActorKey<'_, '_>) -> Result<Option<String>>;

    /// Reminders, the next due first.
    async fn all_reminders(
        &self,
        filter: &ReminderFilter,
        limit: i64,
    ) -> Result<Vec<ReminderSummary>>;

    /// Effects, oldest first.
    async fn effects(&self, filter: &EffectFilter, limit: i64) -> Result<Vec<EffectSummary>>;

    /// The dead letters matching `filter` with ids in `(after_id, up_to]`, oldest first.
    async fn dead_letters_matching(
        &self,
        filter: &DeadLetterFilter,
        (after_id, up_to): (i64, i64),
        limit: i64,
    ) -> Result<Vec<MessageRecord>>;

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
    async fn busiest_mailboxes(&self, limit: i64) -> Result<Vec<MailboxDepth>>;

    /// Messages that finished at or after `since`, by status.
    async fn finished_since(&self, since: i64) -> Result<Vec<(String, i64)>>;

    /// Counts for `status`, with `now` for what is due.
    async fn status(&self, now: i64) -> Result<Status>;

    /// Audit rows older than `before_id`, newest first.
    async fn admin_events(&self, before_id: i64, limit: i64) -> Result<Vec<AdminEvent>>;

    /// The schema versions applied to the database.
    async fn applied_migrations(&self) -> Result<Vec<i64>>;

    /// The backend's name, and the newest schema version this build knows.
    fn schema(&self) -> (&'static str, i64);

    /// The settings that matter, by name.
    async fn settings(&self) -> Result<Vec<(String, String)>>;

    /// The database server's clock in microseconds, where it has its own.
    async fn database_micros(&self) -> Result<Option<i64>>;
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

/// The administration API's writes, inside a transaction.
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
}

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

/// A stored operation and its arguments (a ready message's, or a scheduled reminder's).
#[derive(Debug)]
pub(crate) struct StoredArguments {
    /// The message's or the reminder's row id.
    pub(crate) id: i64,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    /// The operation (a reminder's name).
    pub(crate) operation: String,
    /// The arguments as stored (JSON text).
    pub(crate) arguments: String,
}

/// Every actor: those with a row, and those with only ready messages or dead letters.
macro_rules! every_actor {
    () => {
        "(SELECT actor_type, actor_id FROM solid_instances
          UNION SELECT actor_type, actor_id FROM solid_messages
          WHERE status IN ('ready', 'dead')) AS k
         LEFT JOIN solid_instances i ON i.actor_type = k.actor_type AND i.actor_id = k.actor_id"
    };
}

/// Implements [`AdminReads`] and [`AdminWrites`] for a backend from the shared statements;
/// `reads` are the backend's own items (`schema`, `settings`, `database_micros`).
macro_rules! admin_backend {
    (
        dialect: $dialect:ident,
        query: $query:path,
        query_scalar: $query_scalar:path,
        store: $store:ty,
        readers: $readers:ident,
        transaction: $transaction:ty,
        reads: { $($read_item:item)* }
    ) => {
        mod admin_sql {
            use super::*;
            use $crate::admin::{
                ActorFilter, ActorSummary, ActorTypeSummary, AdminEvent, DeadLetterFilter,
                EffectFilter, EffectSummary, MailboxDepth, MailboxHead, ReminderFilter,
                ReminderSummary, Status,
            };
            use $crate::time::micros::from_micros;
            use $crate::store::admin::{
                contains_pattern, AdminEventWrite, AdminReads, AdminWrites, StoredArguments,
            };


            fn time(micros: Option<i64>) -> Option<chrono::DateTime<chrono::Utc>> {
                micros.filter(|&micros| micros > 0).map(from_micros)
            }

            fn json(text: Option<String>) -> Option<serde_json::Value> {
                text.map(|text| {
                    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
                })
            }

            #[async_trait::async_trait]
            impl AdminReads for $store {
                $($read_item)*

                async fn actor_types(&self) -> Result<Vec<ActorTypeSummary>> {
                    let rows = $query(concat!(
                        "SELECT k.actor_type, COUNT(*) AS actors,
                                COUNT(i.paused_at) AS paused,
                                (SELECT COUNT(*) FROM solid_messages m
                                 WHERE m.actor_type = k.actor_type AND m.status = 'ready')
                                    AS ready_messages,
                                (SELECT COUNT(*) FROM solid_messages m
                                 WHERE m.actor_type = k.actor_type AND m.status = 'dead')
                                    AS dead_letters
                         FROM ",
                        every_actor!(),
                        " GROUP BY k.actor_type ORDER BY k.actor_type"
                    ))
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(ActorTypeSummary {
                                actor_type: $crate::store::rows::get(row, "actor_type")?,
                                actors: $crate::store::rows::get(row, "actors")?,
                                paused: $crate::store::rows::get::<Option<i64>, _, _>(row, "paused")?.unwrap_or(0),
                                ready_messages: $crate::store::rows::get(row, "ready_messages")?,
                                dead_letters: $crate::store::rows::get(row, "dead_letters")?,
                            })
                        })
                        .collect()
                }

                async fn actors(
                    &self,
                    filter: &ActorFilter,
                    limit: i64,
                ) -> Result<Vec<ActorSummary>> {
                    let (after_type, after_id) = match &filter.after {
                        Some((actor_type, actor_id)) => (Some(actor_type.as_str()), actor_id.as_str()),
                        None => (None, ""),
                    };
                    let rows = $query(concat!(
                        "SELECT k.actor_type, k.actor_id, i.revision, i.incarnation,
                                i.state_version, i.updated_at, i.paused_at,
                                (SELECT COUNT(*) FROM solid_messages m
                                 WHERE m.actor_type = k.actor_type AND m.actor_id = k.actor_id
                                   AND m.status = 'ready') AS depth
                         FROM ",
                        every_actor!(),
                        " WHERE ($1 IS NULL OR k.actor_type = $1)
                            AND ($2 IS NULL OR substr(k.actor_id, 1, length($2)) = $2)
                            AND ($3 IS NULL OR k.actor_type > $3
                                 OR (k.actor_type = $3 AND k.actor_id > $4))
                          ORDER BY k.actor_type, k.actor_id LIMIT $5"
                    ))
                    .bind(filter.actor_type.as_deref())
                    .bind(filter.id_prefix.as_deref())
                    .bind(after_type)
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(ActorSummary {
                                actor_type: $crate::store::rows::get(row, "actor_type")?,
                                actor_id: $crate::store::rows::get(row, "actor_id")?,
                                revision: $crate::store::rows::get::<Option<i64>, _, _>(row, "revision")?.unwrap_or(0),
                                incarnation: $crate::store::rows::get::<Option<i64>, _, _>(row, "incarnation")?
                                    .unwrap_or(1),
                                state_version: $crate::store::rows::get::<Option<i64>, _, _>(row, "state_version")?
                                    .unwrap_or(1),
                                mailbox_depth: $crate::store::rows::get(row, "depth")?,
                                last_activity: time($crate::store::rows::get(row, "updated_at")?),
                                paused_at: time($crate::store::rows::get(row, "paused_at")?),
                            })
                        })
                        .collect()
                }

                async fn oldest_ready(
                    &self,
                    actor: ActorKey<'_, '_>,
                ) -> Result<Option<MailboxHead>> {
                    let row = $query(
                        "SELECT id, operation, attempts, last_error, available_at, created_at
                         FROM solid_messages
                         WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
                         ORDER BY id LIMIT 1",
                    )
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .fetch_optional(&self.$readers)
                    .await?;
                    row.map(|row| {
                        let row = &row;
                        Ok(MailboxHead {
                            message_id: $crate::store::rows::get(row, "id")?,
                            operation: $crate::store::rows::get(row, "operation")?,
                            attempts: $crate::store::rows::get(row, "attempts")?,
                            last_error: $crate::store::rows::get(row, "last_error")?,
                            next_attempt_at: from_micros($crate::store::rows::get(row, "available_at")?),
                            enqueued_at: from_micros($crate::store::rows::get(row, "created_at")?),
                        })
                    })
                    .transpose()
                }

                async fn state(&self, actor: ActorKey<'_, '_>) -> Result<Option<String>> {
                    let state = $query_scalar(
                        "SELECT state FROM solid_instances WHERE actor_type = $1 AND actor_id = $2",
                    )
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .fetch_optional(&self.$readers)
                    .await?;
                    Ok(state.flatten())
                }

                async fn all_reminders(
                    &self,
                    filter: &ReminderFilter,
                    limit: i64,
                ) -> Result<Vec<ReminderSummary>> {
                    let rows = $query(
                        "SELECT actor_type, actor_id, name, \"key\", due_at, every_micros
                         FROM solid_reminders
                         WHERE ($1 IS NULL OR actor_type = $1) AND ($2 IS NULL OR actor_id = $2)
                           AND ($3 IS NULL OR due_at <= $3)
                         ORDER BY due_at, id LIMIT $4",
                    )
                    .bind(filter.actor_type.as_deref())
                    .bind(filter.actor_id.as_deref())
                    .bind(filter.due_before.map($crate::time::micros::micros))
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(ReminderSummary {
                                actor_type: $crate::store::rows::get(row, "actor_type")?,
                                actor_id: $crate::store::rows::get(row, "actor_id")?,
                                name: $crate::store::rows::get(row, "name")?,
                                key: $crate::store::rows::get(row, "key")?,
                                due_at: from_micros($crate::store::rows::get(row, "due_at")?),
                                every_ms: $crate::store::rows::get::<Option<i64>, _, _>(row, "every_micros")?
                                    .map(|every| every / 1000),
                            })
                        })
                        .collect()
                }

                async fn effects(
                    &self,
                    filter: &EffectFilter,
                    limit: i64,
                ) -> Result<Vec<EffectSummary>> {
                    let rows = $query(
                        "SELECT id, effect_id, actor_type, actor_id, name, status, attempts,
                                available_at, last_error, created_at
                         FROM solid_effects
                         WHERE ($1 IS NULL OR status = $1
                                OR ($1 = 'pending' AND status IN ('ready', 'running')))
                           AND ($2 IS NULL OR actor_type = $2) AND ($3 IS NULL OR actor_id = $3)
                           AND ($4 IS NULL OR name = $4)
                         ORDER BY id LIMIT $5",
                    )
                    .bind(filter.status.as_deref())
                    .bind(filter.actor_type.as_deref())
                    .bind(filter.actor_id.as_deref())
                    .bind(filter.name.as_deref())
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(EffectSummary {
                                id: $crate::store::rows::get(row, "id")?,
                                effect_id: $crate::store::rows::get(row, "effect_id")?,
                                actor_type: $crate::store::rows::get(row, "actor_type")?,
                                actor_id: $crate::store::rows::get(row, "actor_id")?,
                                name: $crate::store::rows::get(row, "name")?,
                                status: $crate::store::rows::get(row, "status")?,
                                attempts: $crate::store::rows::get(row, "attempts")?,
                                available_at: from_micros($crate::store::rows::get(row, "available_at")?),
                                last_error: $crate::store::rows::get(row, "last_error")?,
                                created_at: from_micros($crate::store::rows::get(row, "created_at")?),
                            })
                        })
                        .collect()
                }

                async fn dead_letters_matching(
                    &self,
                    filter: &DeadLetterFilter,
                    (after_id, up_to): (i64, i64),
                    limit: i64,
                ) -> Result<Vec<MessageRecord>> {
                    let rows = $query(select_message!(
                        "status = 'dead' AND id > $1 AND id <= $9
                           AND ($2 IS NULL OR actor_type = $2) AND ($3 IS NULL OR operation = $3)
                           AND ($4 IS NULL OR last_error LIKE $4 ESCAPE '!')
                           AND ($5 IS NULL OR finished_at >= $5)
                           AND ($6 IS NULL OR finished_at < $6)
                           AND (retried_as IS NULL OR $7)
                         ORDER BY id LIMIT $8"
                    ))
                    .bind(after_id)
                    .bind(filter.actor_type.as_deref())
                    .bind(filter.operation.as_deref())
                    .bind(filter.error_contains.as_deref().map(contains_pattern))
                    .bind(filter.since.map($crate::time::micros::micros))
                    .bind(filter.until.map($crate::time::micros::micros))
                    .bind(filter.include_retried)
                    .bind(limit)
                    .bind(up_to)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter().map(rows::message).collect()
                }

                async fn newest_message_id(&self) -> Result<i64> {
                    let newest: Option<i64> = $query_scalar("SELECT MAX(id) FROM solid_messages")
                        .fetch_one(&self.$readers)
                        .await?;
                    Ok(newest.unwrap_or(0))
                }

                async fn pending_arguments(
                    &self,
                    after_id: i64,
                    limit: i64,
                ) -> Result<Vec<StoredArguments>> {
                    let rows = $query(
                        "SELECT id, actor_type, actor_id, operation, arguments
                         FROM solid_messages WHERE status = 'ready' AND id > $1
                         ORDER BY id LIMIT $2",
                    )
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter().map($crate::store::rows::stored_arguments).collect()
                }

                async fn reminder_arguments(
                    &self,
                    after_id: i64,
                    limit: i64,
                ) -> Result<Vec<StoredArguments>> {
                    let rows = $query(
                        "SELECT id, actor_type, actor_id, name AS operation, arguments
                         FROM solid_reminders WHERE id > $1 ORDER BY id LIMIT $2",
                    )
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter().map($crate::store::rows::stored_arguments).collect()
                }

                async fn recent_messages(
                    &self,
                    actor: ActorKey<'_, '_>,
                    after_id: i64,
                    limit: i64,
                ) -> Result<Vec<MessageRecord>> {
                    let rows = $query(select_message!(
                        "id > $3 AND actor_type = $1 AND actor_id = $2 ORDER BY id DESC LIMIT $4"
                    ))
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter().map(rows::message).collect()
                }

                async fn busiest_mailboxes(&self, limit: i64) -> Result<Vec<MailboxDepth>> {
                    let rows = $query(
                        "SELECT actor_type, actor_id, COUNT(*) AS ready FROM solid_messages
                         WHERE status = 'ready' GROUP BY actor_type, actor_id
                         ORDER BY ready DESC, actor_type, actor_id LIMIT $1",
                    )
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(MailboxDepth {
                                actor_type: $crate::store::rows::get(row, "actor_type")?,
                                actor_id: $crate::store::rows::get(row, "actor_id")?,
                                ready: $crate::store::rows::get(row, "ready")?,
                            })
                        })
                        .collect()
                }

                async fn finished_since(&self, since: i64) -> Result<Vec<(String, i64)>> {
                    let rows = $query(
                        "SELECT status, COUNT(*) AS count FROM solid_messages
                         WHERE status <> 'ready' AND finished_at >= $1
                         GROUP BY status ORDER BY status",
                    )
                    .bind(since)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok((
                                $crate::store::rows::get(row, "status")?,
                                $crate::store::rows::get(row, "count")?,
                            ))
                        })
                        .collect()
                }

                async fn status(&self, now: i64) -> Result<Status> {
                    let counts = $query(
                        "SELECT 'messages' AS kind, status, COUNT(*) AS count
                         FROM solid_messages GROUP BY status
                         UNION ALL
                         SELECT 'effects' AS kind, status, COUNT(*) AS count
                         FROM solid_effects GROUP BY status
                         ORDER BY kind, status",
                    )
                    .fetch_all(&self.$readers)
                    .await?;
                    let mut status = Status::default();
                    for row in &counts {
                        let kind: String = $crate::store::rows::get(row, "kind")?;
                        let count = ($crate::store::rows::get(row, "status")?, $crate::store::rows::get(row, "count")?);
                        match kind.as_str() {
                            "messages" => status.messages.push(count),
                            _ => status.effects.push(count),
                        }
                    }
                    let row = $query(
                        "SELECT (SELECT COUNT(*) FROM solid_reminders) AS reminders,
                                (SELECT COUNT(*) FROM solid_reminders WHERE due_at <= $1) AS due,
                                (SELECT COUNT(*) FROM solid_instances WHERE paused_at IS NOT NULL)
                                    AS paused,
                                (SELECT MIN(created_at) FROM solid_messages
                                 WHERE status = 'ready' AND available_at <= $1) AS oldest_due,
                                (SELECT MIN(due_at) FROM solid_reminders) AS next_reminder",
                    )
                    .bind(now)
                    .fetch_one(&self.$readers)
                    .await?;
                    let row = &row;
                    status.reminders = $crate::store::rows::get(row, "reminders")?;
                    status.reminders_due = $crate::store::rows::get(row, "due")?;
                    status.paused_actors = $crate::store::rows::get(row, "paused")?;
                    status.oldest_due_message_at = time($crate::store::rows::get(row, "oldest_due")?);
                    let next_reminder: Option<i64> = $crate::store::rows::get(row, "next_reminder")?;
                    status.oldest_due_reminder_at = time(next_reminder.filter(|due| *due <= now));
                    Ok(status)
                }

                async fn admin_events(
                    &self,
                    before_id: i64,
                    limit: i64,
                ) -> Result<Vec<AdminEvent>> {
                    let rows = $query(
                        "SELECT id, at, caller, action, resource, outcome, details
                         FROM solid_admin_events WHERE id < $1 ORDER BY id DESC LIMIT $2",
                    )
                    .bind(before_id)
                    .bind(limit)
                    .fetch_all(&self.$readers)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(AdminEvent {
                                id: $crate::store::rows::get(row, "id")?,
                                at: from_micros($crate::store::rows::get(row, "at")?),
                                caller: json($crate::store::rows::get(row, "caller")?),
                                action: $crate::store::rows::get(row, "action")?,
                                resource: $crate::store::rows::get(row, "resource")?,
                                outcome: $crate::store::rows::get(row, "outcome")?,
                                details: json($crate::store::rows::get(row, "details")?),
                            })
                        })
                        .collect()
                }

                async fn applied_migrations(&self) -> Result<Vec<i64>> {
                    let versions = $query_scalar(
                        "SELECT version FROM solid_schema_migrations ORDER BY version",
                    )
                    .fetch_all(&self.$readers)
                    .await?;
                    Ok(versions)
                }
            }

            #[async_trait::async_trait]
            impl AdminWrites for $transaction {
                async fn set_paused(
                    &mut self,
                    actor: ActorKey<'_, '_>,
                    paused_at: Option<i64>,
                ) -> Result<bool> {
                    self.counters.statement();
                    let changed = match paused_at {
                        Some(at) => dialect!($dialect,
                            standard: $query(
                                "INSERT INTO solid_instances
                                     (actor_type, actor_id, updated_at, paused_at)
                                 VALUES ($1, $2, 0, $3)
                                 ON CONFLICT (actor_type, actor_id) DO UPDATE
                                     SET paused_at = excluded.paused_at
                                     WHERE solid_instances.paused_at IS NULL",
                            ),
                            // MySQL counts a row an upsert found unchanged as affected: the
                            // row is made sure of first, then paused if it runs.
                            mysql: {
                                self.counters.statement();
                                $query(
                                    "INSERT INTO solid_instances (actor_type, actor_id, updated_at)
                                     VALUES ($1, $2, 0)
                                     ON DUPLICATE KEY UPDATE actor_type = actor_type",
                                )
                                .bind(actor.actor_type)
                                .bind(actor.actor_id)
                                .execute(&mut *self.tx)
                                .await?;
                                $query(
                                    "UPDATE solid_instances SET paused_at = $3
                                     WHERE actor_type = $1 AND actor_id = $2
                                       AND paused_at IS NULL",
                                )
                            },
                        )
                        .bind(actor.actor_type)
                        .bind(actor.actor_id)
                        .bind(at)
                        .execute(&mut *self.tx)
                        .await?
                        .rows_affected(),
                        None => $query(
                            "UPDATE solid_instances SET paused_at = NULL
                             WHERE actor_type = $1 AND actor_id = $2 AND paused_at IS NOT NULL",
                        )
                        .bind(actor.actor_type)
                        .bind(actor.actor_id)
                        .execute(&mut *self.tx)
                        .await?
                        .rows_affected(),
                    };
                    Ok(changed == 1)
                }

                async fn record_admin_event(&mut self, event: &AdminEventWrite<'_>) -> Result<i64> {
                    self.counters.statement();
                    let insert = $query(dialect!($dialect,
                        standard: "INSERT INTO solid_admin_events
                                       (at, caller, action, resource, outcome, details)
                                   VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                        mysql: "INSERT INTO solid_admin_events
                                    (at, caller, action, resource, outcome, details)
                                VALUES ($1, $2, $3, $4, $5, $6)",
                    ))
                    .bind(event.at)
                    .bind(event.caller.map($crate::store::shared::storable_text))
                    .bind(event.action)
                    .bind($crate::store::shared::storable_text(event.resource))
                    .bind(event.outcome)
                    .bind(event.details.map($crate::store::shared::storable_text));
                    dialect!($dialect,
                        standard: Ok(sqlx::Row::try_get(&insert.fetch_one(&mut *self.tx).await?, 0)?),
                        mysql: $crate::store::mysql::inserted_id(&insert.execute(&mut *self.tx).await?),
                    )
                }

                async fn finish_admin_event(
                    &mut self,
                    id: i64,
                    outcome: &str,
                    details: Option<&str>,
                ) -> Result<()> {
                    self.counters.statement();
                    $query("UPDATE solid_admin_events SET outcome = $1, details = $2 WHERE id = $3")
                        .bind(outcome)
                        .bind(details.map($crate::store::shared::storable_text))
                        .bind(id)
                        .execute(&mut *self.tx)
                        .await?;
                    Ok(())
                }

                async fn prune_admin_events(&mut self, before: i64) -> Result<u64> {
                    self.counters.statement();
                    let pruned = $query("DELETE FROM solid_admin_events WHERE at < $1")
                        .bind(before)
                        .execute(&mut *self.tx)
                        .await?;
                    Ok(pruned.rows_affected())
                }
            }
        }
    };
}
