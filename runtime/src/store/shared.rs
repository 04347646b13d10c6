//! The SQL both backends share: every statement written once, with `$N` placeholders (which
//! SQLite accepts too). A backend file calls [`sql_backend!`] with what differs: how a
//! transaction begins and locks its actor, its connection accessor, whether claims
//! `SKIP LOCKED`, how a JSON array of names becomes a set, and the clock leases run on.

/// A lease in microseconds, to add to the lease clock in SQL: saturated at a century, far
/// enough for any lease and far from overflowing the clock's microseconds.
pub(crate) fn lease_micros(lease: std::time::Duration) -> i64 {
    const CENTURY_MICROS: i64 = 100 * 365 * 24 * 3600 * 1_000_000;
    i64::try_from(lease.as_micros()).map_or(CENTURY_MICROS, |lease| lease.min(CENTURY_MICROS))
}

/// The error a claim records on an effect it takes over from a runner whose lease ran out:
/// what is known of that attempt.
pub(crate) const RUNNER_STOPPED: &str = "its runner stopped before it finished (its process \
    was killed, ran out of memory or lost the database) and its lease ran out";

/// An error text as every backend stores it: PostgreSQL keeps no NUL byte in text, and an
/// error's text (a handler's `Failure`, a panic message) is the user's.
pub(crate) fn storable_text(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// Most message rows one statement inserts: 15 bound values each, well inside SQLite's
/// 32,766 and PostgreSQL's 65,535 per statement.
const MESSAGES_PER_INSERT: usize = 500;

/// Most bytes of arguments one multi-row insert carries (a single larger row goes alone):
/// a statement stays far below what a server takes in one message (1 GB on PostgreSQL).
const ARGUMENT_BYTES_PER_INSERT: usize = 8 << 20;

/// `messages` cut into consecutive runs that one insert statement each carries: at most
/// [`MESSAGES_PER_INSERT`] rows and, unless one row alone exceeds it,
/// [`ARGUMENT_BYTES_PER_INSERT`] bytes of arguments.
pub(crate) fn insert_batches<'m, 'a, T>(
    messages: &'m [(T, super::NewMessage<'a>)],
) -> impl Iterator<Item = &'m [(T, super::NewMessage<'a>)]> {
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

/// Most reminders one statement deletes or moves.
pub(crate) const ROWS_PER_SETTLE: usize = 1_000;

/// `SELECT <every message column> FROM solid_messages WHERE <condition>`.
macro_rules! select_message {
    ($condition:literal) => {
        concat!(
            "SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key,
                    status, attempts, available_at, result, last_error, created_at, finished_at,
                    retried_as, incarnation, scheduled_for
             FROM solid_messages WHERE ",
            $condition
        )
    };
}

/// The query (built by `$query`, `sqlx::query` or the MySQL backend's) that finds one
/// message.
macro_rules! lookup_query {
    ($query:path, $lookup:expr) => {
        match $lookup {
            MessageLookup::Id(id) => $query(select_message!("id = $1")).bind(id),
            MessageLookup::RequestId(request_id) => {
                $query(select_message!("request_id = $1")).bind(request_id)
            }
            MessageLookup::IdempotencyKey(actor, key) => $query(select_message!(
                "actor_type = $1 AND actor_id = $2 AND idempotency_key = $3"
            ))
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(key),
        }
    };
}

/// One of two forms of a statement (or of the code around it), by the backend's dialect:
/// `standard` (PostgreSQL and SQLite) or `mysql`. The other form is never compiled.
macro_rules! dialect {
    (standard, standard: $standard:expr, mysql: $mysql:expr $(,)?) => {
        $standard
    };
    (mysql, standard: $standard:expr, mysql: $mysql:expr $(,)?) => {
        $mysql
    };
}

/// An actor's row (`$1`, `$2`: the actor).
macro_rules! select_instance {
    () => {
        "SELECT state, revision, incarnation, state_version, paused_at
         FROM solid_instances WHERE actor_type = $1 AND actor_id = $2"
    };
}

/// The columns of a mailbox's head, and the condition that finds it: its oldest ready message
/// (`$1`, `$2`: the actor) that is due at `$3` or has been tried. A message sent or enqueued
/// with a delay is not in line until it is due, so it holds back nothing; one waiting out its
/// retry backoff is, and holds the messages behind it.
macro_rules! head_of_mailbox {
    () => {
        "SELECT id, operation, arguments, attempts, available_at,
                incarnation AS message_incarnation, scheduled_for
         FROM solid_messages
         WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
           AND (attempts > 0 OR available_at <= $3)
         ORDER BY id LIMIT 1"
    };
}

/// The row lock of the server backends (PostgreSQL, MySQL): a turn locks its actor's row
/// (`SELECT .. FOR UPDATE`), skips the actor if another turn holds it, or waits for it until
/// the caller's deadline, inside the server, so that a caller that gives up leaves no
/// connection queued behind the lock. Implements `lock_row` and its statements on the
/// backend's transaction type, which has `tx`, `counters` and `bounds`, and its own
/// `set_timeouts` (how it bounds the statements that follow, and their lock waits).
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_macros)
)]
macro_rules! row_locks {
    (dialect: $dialect:ident, query: $query:path, transaction: $transaction:ty) => {
        impl $transaction {
            /// Locks the actor's row (creating it if missing), and reads its mailbox's head;
            /// `None` if another turn holds it and the caller does not `wait`.
            async fn lock_row(
                &mut self,
                actor: ActorKey<'_, '_>,
                wait: bool,
                now: i64,
            ) -> Result<Option<LockedActor>> {
                if let Some(instance) = self.select_instance(actor, true).await? {
                    return self.locked(actor, instance, now).await;
                }
                // The row is missing, or another turn holds it.
                if !wait {
                    if self.instance_exists(actor).await? {
                        return Ok(None);
                    }
                    self.create_instance(actor).await?;
                    return match self.select_instance(actor, true).await? {
                        Some(instance) => self.locked(actor, instance, now).await,
                        None => Ok(None),
                    };
                }
                self.set_timeouts(self.bounds.until_deadline()).await?;
                self.create_instance(actor).await?;
                let instance = self.select_instance(actor, false).await?.unwrap_or_default();
                self.set_timeouts(self.bounds.remaining()).await?;
                self.locked(actor, instance, now).await
            }

            /// The actor's row, locked; with `skip_locked`, `None` if another turn holds it.
            async fn select_instance(
                &mut self,
                actor: ActorKey<'_, '_>,
                skip_locked: bool,
            ) -> Result<Option<Instance>> {
                self.counters.statement();
                let sql = if skip_locked {
                    concat!(select_instance!(), " FOR UPDATE SKIP LOCKED")
                } else {
                    concat!(select_instance!(), " FOR UPDATE")
                };
                let row = $query(sql)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                row.map(|row| rows::instance(&row)).transpose()
            }

            /// Creates the actor's row if it is missing (waiting, within the lock timeout,
            /// for a transaction elsewhere that is creating it).
            async fn create_instance(&mut self, actor: ActorKey<'_, '_>) -> Result<()> {
                self.counters.statement();
                $query(dialect!($dialect,
                    standard: "INSERT INTO solid_instances (actor_type, actor_id, updated_at)
                               VALUES ($1, $2, 0)
                               ON CONFLICT (actor_type, actor_id) DO NOTHING",
                    mysql: "INSERT INTO solid_instances (actor_type, actor_id, updated_at)
                            VALUES ($1, $2, 0)
                            ON DUPLICATE KEY UPDATE actor_type = actor_type",
                ))
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn instance_exists(&mut self, actor: ActorKey<'_, '_>) -> Result<bool> {
                self.counters.statement();
                let row = $query(
                    "SELECT 1 FROM solid_instances WHERE actor_type = $1 AND actor_id = $2",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(row.is_some())
            }

            /// Reads the head of the actor's mailbox, after the lock (so with a snapshot that
            /// sees every turn of the actor that committed before it).
            async fn head(
                &mut self,
                actor: ActorKey<'_, '_>,
                now: i64,
            ) -> Result<Option<StoredMessage>> {
                self.counters.statement();
                let row = $query(head_of_mailbox!())
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(now)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                row.map(|row| rows::stored_message(&row)).transpose()
            }

            async fn locked(
                &mut self,
                actor: ActorKey<'_, '_>,
                instance: Instance,
                now: i64,
            ) -> Result<Option<LockedActor>> {
                let head = self.head(actor, now).await?;
                Ok(Some(LockedActor { instance, head }))
            }
        }
    };
}

/// Implements [`Store`](super::Store) and [`Transaction`](super::Transaction) for a
/// backend's store and transaction types from the shared statements.
///
/// - `dialect`: `standard` (PostgreSQL and SQLite) or `mysql`, for the few statements whose
///   form differs (see [`dialect!`]);
/// - `query`, `query_scalar`: sqlx's functions, or the MySQL backend's (which spell the
///   statements for MySQL);
/// - `store`: the store type, with a `counters` field and the read pool in field `readers`;
/// - `transaction`: the transaction type, with fields `tx` (an
///   [`OwnedTransaction`](super::owned_transaction::OwnedTransaction)) and `counters`;
/// - `database`: the sqlx database type;
/// - `skip_locked`: appended to the subqueries that claim reminders and effects;
/// - `name_set`, `name_set_2`: an SQL set of the names in the JSON array bound as `$1`,
///   and as `$2`;
/// - `type_operation`: a message's `actor_type:operation`, from the alias `m`;
/// - `lease_now`: the current time of the clock leases run on, in microseconds;
/// - then the backend's own `Store` items (`begin`, `close`) and `Transaction` items (the
///   lock, `poison` and the connection accessor).
macro_rules! sql_backend {
    (
        dialect: $dialect:ident,
        query: $query:path,
        query_scalar: $query_scalar:path,
        store: $store:ty,
        readers: $readers:ident,
        transaction: $transaction:ty,
        database: $database:ty,
        skip_locked: $skip_locked:literal,
        name_set: $name_set:literal,
        name_set_2: $name_set_2:literal,
        type_operation: $type_operation:literal,
        lease_now: $lease_now:literal,
        store_items: { $($store_item:item)* },
        transaction_items: { $($transaction_item:item)* }
    ) => {
        const SELECT_INSTANCE: &str = select_instance!();

        /// `INSERT INTO solid_messages (..) VALUES (..), ..` with one row per message, to be
        /// finished (`RETURNING`, `ON CONFLICT`) by the caller.
        fn message_insert<'q>(
            messages: &[(ActorKey<'q, 'q>, NewMessage<'q>)],
        ) -> sqlx::QueryBuilder<'q, $database> {
            let mut insert = sqlx::QueryBuilder::new(
                "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments,
                     request_id, idempotency_key, status, attempts, available_at, result,
                     last_error, created_at, finished_at, incarnation, scheduled_for) ",
            );
            insert.push_values(messages, |mut row, (actor, message)| {
                let progress = &message.progress;
                row.push_bind(actor.actor_type)
                    .push_bind(actor.actor_id)
                    .push_bind(message.operation)
                    .push_bind(message.arguments)
                    .push_bind(message.request_id)
                    .push_bind(message.idempotency_key)
                    .push_bind(progress.status.as_str())
                    .push_bind(progress.attempts)
                    .push_bind(progress.available_at)
                    .push_bind(progress.result)
                    .push_bind(progress.last_error.map($crate::store::shared::storable_text))
                    .push_bind(message.created_at)
                    .push_bind(progress.finished_at)
                    .push_bind(message.incarnation)
                    .push_bind(message.scheduled_for);
            });
            insert
        }

        #[async_trait::async_trait]
        impl Store for $store {
            $($store_item)*

            async fn read_actor(&self, actor: ActorKey<'_, '_>, now: i64) -> Result<CommittedActor> {
                let instance = self.read_instance(actor).await?;
                let head = $query(head_of_mailbox!())
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .bind(now)
                    .fetch_optional(&self.$readers)
                    .await?;
                Ok(CommittedActor {
                    instance,
                    mailbox_empty: head.is_none(),
                })
            }

            async fn read_instance(&self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>> {
                let row = $query(SELECT_INSTANCE)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .fetch_optional(&self.$readers)
                    .await?;
                row.map(|row| rows::instance(&row)).transpose()
            }

            async fn message(&self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>> {
                let row = lookup_query!($query, lookup).fetch_optional(&self.$readers).await?;
                row.map(|row| rows::message(&row)).transpose()
            }

            async fn reminders(&self, actor: ActorKey<'_, '_>) -> Result<Vec<ReminderRecord>> {
                let rows = $query(
                    "SELECT name, \"key\", due_at, every_micros, missed FROM solid_reminders
                     WHERE actor_type = $1 AND actor_id = $2 ORDER BY due_at, name, \"key\"",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .fetch_all(&self.$readers)
                .await?;
                rows.iter().map(rows::reminder).collect()
            }

            async fn unhandled_effects(&self, handled: &str) -> Result<Vec<PendingEffects>> {
                let rows = $query(concat!(
                    "SELECT name, COUNT(*) AS count, MIN(created_at) AS oldest_created_at
                     FROM solid_effects
                     WHERE status IN ('ready', 'running') AND name NOT IN ",
                    $name_set,
                    " GROUP BY name ORDER BY name"
                ))
                .bind(handled)
                .fetch_all(&self.$readers)
                .await?;
                rows.iter().map(rows::pending_effects).collect()
            }

            async fn ready_actors(
                &self,
                now: i64,
                operations: &str,
                limit: i64,
            ) -> Result<Vec<(String, String)>> {
                let rows = $query(concat!(
                    "SELECT m.actor_type, m.actor_id FROM solid_messages m
                     WHERE m.status = 'ready' AND m.available_at <= $2
                       AND ",
                    $type_operation,
                    " IN ",
                    $name_set,
                    " AND NOT EXISTS (
                         SELECT 1 FROM solid_messages e
                         WHERE e.actor_type = m.actor_type AND e.actor_id = m.actor_id
                           AND e.status = 'ready' AND e.id < m.id
                           AND (e.attempts > 0 OR e.available_at <= $2))
                       AND NOT EXISTS (
                         SELECT 1 FROM solid_instances p
                         WHERE p.actor_type = m.actor_type AND p.actor_id = m.actor_id
                           AND p.paused_at IS NOT NULL)
                     ORDER BY m.id LIMIT $3"
                ))
                .bind(operations)
                .bind(now)
                .bind(limit)
                .fetch_all(&self.$readers)
                .await?;
                rows::actors(&rows)
            }

            async fn mailbox_depths(&self) -> Result<Vec<(String, i64)>> {
                let rows = $query(
                    "SELECT actor_type, COUNT(*) AS depth FROM solid_messages
                     WHERE status = 'ready' GROUP BY actor_type",
                )
                .fetch_all(&self.$readers)
                .await?;
                rows::depths(&rows)
            }

            async fn unknown_operations(
                &self,
                operations: &str,
                types: &str,
                limit: i64,
            ) -> Result<Vec<UnknownHead>> {
                let rows = $query(concat!(
                    "SELECT m.id, m.actor_type, m.operation FROM solid_messages m
                     WHERE m.status = 'ready' AND m.last_error IS NULL
                       AND ",
                    $type_operation,
                    " NOT IN ",
                    $name_set,
                    " AND m.actor_type IN ",
                    $name_set_2,
                    " AND NOT EXISTS (
                         SELECT 1 FROM solid_messages e
                         WHERE e.actor_type = m.actor_type AND e.actor_id = m.actor_id
                           AND e.status = 'ready' AND e.id < m.id)
                     ORDER BY m.id LIMIT $3"
                ))
                .bind(operations)
                .bind(types)
                .bind(limit)
                .fetch_all(&self.$readers)
                .await?;
                rows.iter().map(rows::unknown_head).collect()
            }

            fn stats(&self) -> Stats {
                self.counters.snapshot()
            }
        }

        #[async_trait::async_trait]
        impl Transaction for $transaction {
            $($transaction_item)*

            async fn insert_message(
                &mut self,
                actor: ActorKey<'_, '_>,
                message: &NewMessage<'_>,
            ) -> Result<i64> {
                self.counters.statement();
                let row = [(actor, *message)];
                let mut insert = message_insert(&row);
                dialect!($dialect,
                    standard: {
                        insert.push(" RETURNING id");
                        Ok(insert.build_query_scalar().fetch_one(&mut *self.tx).await?)
                    },
                    mysql: {
                        let inserted = insert.build().execute(&mut *self.tx).await?;
                        $crate::store::mysql::inserted_id(&inserted)
                    },
                )
            }

            async fn insert_messages(
                &mut self,
                messages: &[(ActorKey<'_, '_>, NewMessage<'_>)],
            ) -> Result<()> {
                for rows in $crate::store::shared::insert_batches(messages) {
                    self.counters.statement();
                    message_insert(rows).build().execute(&mut *self.tx).await?;
                }
                Ok(())
            }

            async fn insert_message_once(
                &mut self,
                actor: ActorKey<'_, '_>,
                message: &NewMessage<'_>,
            ) -> Result<Option<i64>> {
                self.counters.statement();
                let row = [(actor, *message)];
                let mut insert = message_insert(&row);
                dialect!($dialect,
                    standard: {
                        insert.push(
                            " ON CONFLICT (actor_type, actor_id, idempotency_key)
                                 WHERE idempotency_key IS NOT NULL DO NOTHING
                             RETURNING id",
                        );
                        Ok(insert.build_query_scalar().fetch_optional(&mut *self.tx).await?)
                    },
                    mysql: {
                        // A taken key inserts nothing, and so gives no id (its row counts
                        // as affected: sqlx asks MySQL to count the rows it found).
                        insert.push(" ON DUPLICATE KEY UPDATE id = id");
                        let inserted = insert.build().execute(&mut *self.tx).await?;
                        if inserted.last_insert_id() == 0 {
                            Ok(None)
                        } else {
                            $crate::store::mysql::inserted_id(&inserted).map(Some)
                        }
                    },
                )
            }

            async fn update_message(
                &mut self,
                message_id: i64,
                attempts: i64,
                progress: &MessageProgress<'_>,
            ) -> Result<bool> {
                self.counters.statement();
                let updated = $query(
                    "UPDATE solid_messages
                     SET status = $1, attempts = $2, available_at = $3, result = $4, last_error = $5,
                         finished_at = $6
                     WHERE id = $7 AND status = 'ready' AND attempts = $8",
                )
                .bind(progress.status.as_str())
                .bind(progress.attempts)
                .bind(progress.available_at)
                .bind(progress.result)
                .bind(progress.last_error.map($crate::store::shared::storable_text))
                .bind(progress.finished_at)
                .bind(message_id)
                .bind(attempts)
                .execute(&mut *self.tx)
                .await?;
                Ok(updated.rows_affected() == 1)
            }

            async fn note_message(&mut self, message_id: i64, note: &str) -> Result<()> {
                self.counters.statement();
                $query(
                    "UPDATE solid_messages SET last_error = $1 WHERE id = $2 AND status = 'ready'",
                )
                .bind($crate::store::shared::storable_text(note))
                .bind(message_id)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn count_ready(&mut self, actor: ActorKey<'_, '_>, limit: i64) -> Result<i64> {
                self.counters.statement();
                let count = $query_scalar(
                    "SELECT COUNT(*) FROM (
                         SELECT 1 FROM solid_messages
                         WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready' LIMIT $3
                     ) AS ready",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(limit)
                .fetch_one(&mut *self.tx)
                .await?;
                Ok(count)
            }

            async fn is_paused(&mut self, actor: ActorKey<'_, '_>) -> Result<bool> {
                self.counters.statement();
                let paused = $query(
                    "SELECT 1 FROM solid_instances
                     WHERE actor_type = $1 AND actor_id = $2 AND paused_at IS NOT NULL",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(paused.is_some())
            }

            async fn write_instance(
                &mut self,
                actor: ActorKey<'_, '_>,
                write: &InstanceWrite<'_>,
            ) -> Result<()> {
                self.counters.statement();
                $query(
                    "INSERT INTO solid_instances
                         (actor_type, actor_id, state, revision, state_version, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
                         state = excluded.state,
                         revision = excluded.revision,
                         state_version = excluded.state_version,
                         updated_at = excluded.updated_at",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(write.state)
                .bind(write.revision)
                .bind(write.state_version)
                .bind(write.updated_at)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn upsert_reminder(
                &mut self,
                actor: ActorKey<'_, '_>,
                reminder: &ReminderWrite<'_>,
            ) -> Result<()> {
                self.counters.statement();
                $query(
                    "INSERT INTO solid_reminders
                         (actor_type, actor_id, name, \"key\", due_at, arguments, incarnation,
                          every_micros, missed)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (actor_type, actor_id, name, \"key\") DO UPDATE SET
                         due_at = excluded.due_at, arguments = excluded.arguments,
                         incarnation = excluded.incarnation,
                         every_micros = excluded.every_micros, missed = excluded.missed",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(reminder.name)
                .bind(reminder.key)
                .bind(reminder.due_at)
                .bind(reminder.arguments)
                .bind(reminder.incarnation)
                .bind(reminder.every)
                .bind(reminder.missed)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn reminder_due(
                &mut self,
                actor: ActorKey<'_, '_>,
                name: &str,
                key: &str,
            ) -> Result<Option<i64>> {
                self.counters.statement();
                let due = $query_scalar(
                    "SELECT due_at FROM solid_reminders
                     WHERE actor_type = $1 AND actor_id = $2 AND name = $3 AND \"key\" = $4",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(name)
                .bind(key)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(due)
            }

            async fn delete_reminder(
                &mut self,
                actor: ActorKey<'_, '_>,
                name: &str,
                key: Option<&str>,
            ) -> Result<()> {
                self.counters.statement();
                $query(
                    "DELETE FROM solid_reminders
                     WHERE actor_type = $1 AND actor_id = $2 AND name = $3
                       AND ($4 IS NULL OR \"key\" = $4)",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(name)
                .bind(key)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn due_reminders(
                &mut self,
                now: i64,
                limit: i64,
                skip: &str,
            ) -> Result<Vec<Result<DueReminder>>> {
                self.counters.statement();
                let due = $query(concat!(
                    "SELECT id, due_at, actor_type, actor_id, name, arguments, incarnation,
                            every_micros, missed
                     FROM solid_reminders
                     WHERE due_at <= $2 AND CAST(id AS TEXT) NOT IN ",
                    $name_set,
                    " ORDER BY due_at, id LIMIT $3",
                    $skip_locked
                ))
                .bind(skip)
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?;
                due.iter().map(rows::due_reminder).collect()
            }

            async fn settle_reminders(
                &mut self,
                finished: &[i64],
                moved: &[(i64, i64)],
            ) -> Result<()> {
                for ids in finished.chunks($crate::store::shared::ROWS_PER_SETTLE) {
                    self.counters.statement();
                    let mut delete = sqlx::QueryBuilder::<$database>::new(
                        "DELETE FROM solid_reminders WHERE id IN (",
                    );
                    let mut list = delete.separated(", ");
                    for id in ids {
                        list.push_bind(*id);
                    }
                    delete.push(")");
                    delete.build().execute(&mut *self.tx).await?;
                }
                for moves in moved.chunks($crate::store::shared::ROWS_PER_SETTLE) {
                    self.counters.statement();
                    let update = dialect!($dialect,
                        standard: {
                            let mut update = sqlx::QueryBuilder::<$database>::new(
                                "WITH moved (id, due_at) AS (",
                            );
                            update.push_values(moves, |mut row, (id, due_at)| {
                                row.push_bind(*id).push_bind(*due_at);
                            });
                            update.push(
                                ") UPDATE solid_reminders
                                 SET due_at = (SELECT moved.due_at FROM moved
                                               WHERE moved.id = solid_reminders.id)
                                 WHERE id IN (SELECT id FROM moved)",
                            );
                            update
                        },
                        mysql: {
                            // No common table expression before an UPDATE: a derived table
                            // of the moves, joined.
                            let mut update = sqlx::QueryBuilder::<$database>::new(
                                "UPDATE solid_reminders JOIN (",
                            );
                            let mut rows = update.separated(" UNION ALL ");
                            for (id, due_at) in moves {
                                rows.push("SELECT ")
                                    .push_bind_unseparated(*id)
                                    .push_unseparated(" AS id, ")
                                    .push_bind_unseparated(*due_at)
                                    .push_unseparated(" AS due_at");
                            }
                            update.push(
                                ") AS moved ON moved.id = solid_reminders.id
                                 SET solid_reminders.due_at = moved.due_at",
                            );
                            update
                        },
                    );
                    let mut update = update;
                    update.build().execute(&mut *self.tx).await?;
                }
                Ok(())
            }

            async fn destroy_actor(&mut self, actor: ActorKey<'_, '_>, now: i64) -> Result<()> {
                self.counters.statement();
                $query("DELETE FROM solid_reminders WHERE actor_type = $1 AND actor_id = $2")
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .execute(&mut *self.tx)
                    .await?;
                self.counters.statement();
                $query(
                    "UPDATE solid_messages SET status = 'destroyed', finished_at = $3
                     WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                self.counters.statement();
                $query(
                    "INSERT INTO solid_instances (actor_type, actor_id, incarnation, updated_at)
                     VALUES ($1, $2, 2, $3)
                     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
                         state = NULL, revision = solid_instances.revision + 1,
                         incarnation = solid_instances.incarnation + 1,
                         updated_at = excluded.updated_at",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn insert_effect(
                &mut self,
                actor: ActorKey<'_, '_>,
                effect: &NewEffect<'_>,
            ) -> Result<()> {
                self.counters.statement();
                $query(
                    "INSERT INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
                         available_at, created_at, incarnation, on_success, on_failure)
                     VALUES ($1, $2, $3, $4, $5, 'ready', $6, $6, $7, $8, $9)",
                )
                .bind(effect.effect_id)
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(effect.name)
                .bind(effect.payload)
                .bind(effect.created_at)
                .bind(effect.incarnation)
                .bind(effect.on_success)
                .bind(effect.on_failure)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn claim_effect(
                &mut self,
                name: &str,
                now: i64,
                lease: std::time::Duration,
            ) -> Result<Option<ClaimedEffect>> {
                self.counters.statement();
                let lease = $crate::store::shared::lease_micros(lease);
                let claimed = dialect!($dialect,
                    standard: {
                        $query(concat!(
                            "UPDATE solid_effects
                             SET last_error = CASE WHEN status = 'running' THEN $4
                                                   ELSE last_error END,
                                 status = 'running', attempts = attempts + 1, claims = claims + 1,
                                 available_at = ", $lease_now, " + $3
                             WHERE id = (
                                 SELECT id FROM solid_effects
                                 WHERE name = $1 AND (
                                     (status = 'ready' AND available_at <= $2)
                                     OR (status = 'running' AND available_at <= ", $lease_now, "))
                                 ORDER BY available_at, id LIMIT 1",
                            $skip_locked,
                            ") RETURNING id, effect_id, actor_type, actor_id, name, payload,
                                         attempts, claims, incarnation, on_success, on_failure,
                                         created_at, last_error"
                        ))
                        .bind(name)
                        .bind(now)
                        .bind(lease)
                        .bind($crate::store::shared::RUNNER_STOPPED)
                        .fetch_optional(&mut *self.tx)
                        .await?
                    },
                    mysql: {
                        // An UPDATE cannot read the table it writes: the effect is locked
                        // first, then claimed, then read.
                        let id: Option<i64> = $query_scalar(concat!(
                            "SELECT id FROM solid_effects
                             WHERE name = $1 AND (
                                 (status = 'ready' AND available_at <= $2)
                                 OR (status = 'running' AND available_at <= ", $lease_now, "))
                             ORDER BY available_at, id LIMIT 1",
                            $skip_locked
                        ))
                        .bind(name)
                        .bind(now)
                        .fetch_optional(&mut *self.tx)
                        .await?;
                        match id {
                            None => None,
                            Some(id) => {
                                self.counters.statement();
                                // MySQL assigns left to right, each seeing the ones
                                // before: last_error reads the status before the claim.
                                $query(concat!(
                                    "UPDATE solid_effects
                                     SET last_error = CASE WHEN status = 'running' THEN $3
                                                           ELSE last_error END,
                                         status = 'running', attempts = attempts + 1,
                                         claims = claims + 1, available_at = ", $lease_now, " + $1
                                     WHERE id = $2"
                                ))
                                .bind(lease)
                                .bind(id)
                                .bind($crate::store::shared::RUNNER_STOPPED)
                                .execute(&mut *self.tx)
                                .await?;
                                self.counters.statement();
                                $query(
                                    "SELECT id, effect_id, actor_type, actor_id, name, payload,
                                            attempts, claims, incarnation, on_success, on_failure,
                                            created_at, last_error
                                     FROM solid_effects WHERE id = $1",
                                )
                                .bind(id)
                                .fetch_optional(&mut *self.tx)
                                .await?
                            }
                        }
                    },
                );
                claimed.map(|row| rows::claimed_effect(&row)).transpose()
            }

            async fn renew_effect(
                &mut self,
                id: i64,
                claims: i64,
                now: i64,
                lease: std::time::Duration,
            ) -> Result<bool> {
                self.counters.statement();
                let lease = $crate::store::shared::lease_micros(lease);
                // `$2`, the runtime's time, is the lease clock on SQLite only.
                let renewed = $query(concat!(
                    "UPDATE solid_effects SET available_at = ", $lease_now, " + $3
                     WHERE id = $1 AND status = 'running' AND claims = $4"
                ))
                .bind(id)
                .bind(now)
                .bind(lease)
                .bind(claims)
                .execute(&mut *self.tx)
                .await?;
                Ok(renewed.rows_affected() == 1)
            }

            async fn release_effect(&mut self, id: i64, claims: i64, now: i64) -> Result<bool> {
                self.counters.statement();
                let released = $query(
                    "UPDATE solid_effects
                     SET status = 'ready', attempts = attempts - 1, available_at = $2
                     WHERE id = $1 AND status = 'running' AND claims = $3",
                )
                .bind(id)
                .bind(now)
                .bind(claims)
                .execute(&mut *self.tx)
                .await?;
                Ok(released.rows_affected() == 1)
            }

            async fn finish_effect(
                &mut self,
                id: i64,
                claims: i64,
                progress: &EffectProgress<'_>,
            ) -> Result<bool> {
                self.counters.statement();
                let finished = $query(
                    "UPDATE solid_effects
                     SET status = $1, available_at = $2, last_error = $3, finished_at = $4,
                         attempts = $7
                     WHERE id = $5 AND status = 'running' AND claims = $6",
                )
                .bind(progress.status)
                .bind(progress.available_at)
                .bind(progress.last_error.map($crate::store::shared::storable_text))
                .bind(progress.finished_at)
                .bind(id)
                .bind(claims)
                .bind(progress.attempts)
                .execute(&mut *self.tx)
                .await?;
                Ok(finished.rows_affected() == 1)
            }

            async fn revive_effect(&mut self, id: i64, now: i64) -> Result<bool> {
                self.counters.statement();
                let revived = $query(
                    "UPDATE solid_effects
                     SET status = 'ready', attempts = 0, available_at = $2, last_error = NULL,
                         finished_at = NULL
                     WHERE id = $1 AND status = 'dead'",
                )
                .bind(id)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                Ok(revived.rows_affected() == 1)
            }

            async fn message(&mut self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>> {
                self.counters.statement();
                let row = lookup_query!($query, lookup).fetch_optional(&mut *self.tx).await?;
                row.map(|row| rows::message(&row)).transpose()
            }

            async fn release_dead_letter(&mut self, message_id: i64) -> Result<bool> {
                self.counters.statement();
                let released = $query(
                    "UPDATE solid_messages SET idempotency_key = NULL, retried_as = 0
                     WHERE id = $1 AND status = 'dead' AND retried_as IS NULL",
                )
                .bind(message_id)
                .execute(&mut *self.tx)
                .await?;
                Ok(released.rows_affected() == 1)
            }

            async fn link_retry(&mut self, message_id: i64, retry_id: i64) -> Result<()> {
                self.counters.statement();
                $query("UPDATE solid_messages SET retried_as = $1 WHERE id = $2")
                    .bind(retry_id)
                    .bind(message_id)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn prune(&mut self, retention: &Retention) -> Result<$crate::admin::PruneCounts> {
                self.counters.statement();
                let finished = $query(
                    "DELETE FROM solid_messages
                     WHERE status IN ('completed', 'rejected', 'destroyed') AND finished_at < $1
                       AND id NOT IN (
                         SELECT id FROM (
                           SELECT id, ROW_NUMBER() OVER (
                               PARTITION BY actor_type, actor_id ORDER BY finished_at DESC, id DESC
                           ) AS recent
                           FROM solid_messages
                           WHERE idempotency_key IS NOT NULL AND status <> 'ready'
                         ) AS keyed WHERE recent <= $2
                       )",
                )
                .bind(retention.finished_before)
                .bind(retention.keep_keyed)
                .execute(&mut *self.tx)
                .await?;
                self.counters.statement();
                let done = $query(
                    "DELETE FROM solid_effects WHERE status = 'done' AND finished_at < $1",
                )
                .bind(retention.finished_before)
                .execute(&mut *self.tx)
                .await?;
                let mut pruned = $crate::admin::PruneCounts {
                    finished_messages: finished.rows_affected(),
                    done_effects: done.rows_affected(),
                    ..Default::default()
                };
                if let Some(dead_before) = retention.dead_before {
                    self.counters.statement();
                    let dead_letters = $query(
                        "DELETE FROM solid_messages WHERE status = 'dead' AND finished_at < $1",
                    )
                    .bind(dead_before)
                    .execute(&mut *self.tx)
                    .await?;
                    self.counters.statement();
                    let dead_effects = $query(
                        "DELETE FROM solid_effects WHERE status = 'dead' AND finished_at < $1",
                    )
                    .bind(dead_before)
                    .execute(&mut *self.tx)
                    .await?;
                    pruned.dead_letters = dead_letters.rows_affected();
                    pruned.dead_effects = dead_effects.rows_affected();
                }
                Ok(pruned)
            }

            async fn savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                self.on_savepoint("SAVEPOINT solid_turn").await
            }

            async fn rollback_to_savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                self.on_savepoint("ROLLBACK TO SAVEPOINT solid_turn").await?;
                self.on_savepoint("RELEASE SAVEPOINT solid_turn").await
            }

            async fn release_savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                self.on_savepoint("RELEASE SAVEPOINT solid_turn").await
            }

            async fn commit(self: Box<Self>) -> Result<()> {
                let this = *self;
                let alone = this.tx.commits_alone();
                dialect!($dialect,
                    standard: this.tx.commit().await?,
                    mysql: {
                        let restore = this.flavor.restore_statement();
                        this.tx.commit_then(restore).await?
                    },
                );
                this.counters.transaction();
                if alone {
                    this.counters.commit();
                }
                Ok(())
            }

            async fn rollback(self: Box<Self>) -> Result<()> {
                dialect!($dialect,
                    standard: self.tx.rollback().await,
                    mysql: {
                        let restore = self.flavor.restore_statement();
                        self.tx.rollback_then(restore).await
                    },
                )
            }
        }

        impl $transaction {
            /// Runs a savepoint statement; if it fails, nobody knows what the transaction
            /// holds any more (a handler may have ended it behind the runtime's back), so
            /// its connection is not reused.
            async fn on_savepoint(&mut self, sql: &'static str) -> Result<()> {
                let done = $query(sql).execute(&mut *self.tx).await;
                if done.is_err() {
                    self.tx.poison();
                }
                done?;
                Ok(())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MessageProgress, NewMessage};

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
