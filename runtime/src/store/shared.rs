//! The SQL both backends share: every statement written once, with `$N` placeholders (which
//! SQLite accepts too). A backend file calls [`sql_backend!`] with what differs: how a
//! transaction begins and locks its actor, its connection accessor, and whether claims
//! `SKIP LOCKED`.

/// `SELECT <every message column> FROM solid_messages WHERE <condition>`.
macro_rules! select_message {
    ($condition:literal) => {
        concat!(
            "SELECT id, actor_type, actor_id, sequence, operation, arguments, request_id,
                    status, attempts, available_at, result, last_error, finished_at
             FROM solid_messages WHERE ",
            $condition
        )
    };
}

/// Implements [`Store`](super::Store) and [`Transaction`](super::Transaction) for a
/// backend's store and transaction types from the shared statements.
///
/// - `store`: the store type, with a `counters` field and the read pool in field `readers`;
/// - `transaction`: the transaction type, with fields `tx` (an `sqlx::Transaction`) and
///   `counters`;
/// - `database`: the sqlx database type;
/// - `skip_locked`: appended to the subqueries that claim reminders and effects;
/// - then the backend's own `Store` items (`begin`) and `Transaction` items (the locks and
///   the connection accessor).
macro_rules! sql_backend {
    (
        store: $store:ty,
        readers: $readers:ident,
        transaction: $transaction:ty,
        database: $database:ty,
        skip_locked: $skip_locked:literal,
        store_items: { $($store_item:item)* },
        transaction_items: { $($transaction_item:item)* }
    ) => {
        const SELECT_INSTANCE: &str = "SELECT state, revision, next_sequence, unfinished
             FROM solid_instances WHERE actor_type = $1 AND actor_id = $2";

        /// The query that finds one message.
        fn lookup_query(
            lookup: MessageLookup<'_>,
        ) -> sqlx::query::Query<'_, $database, <$database as sqlx::Database>::Arguments<'_>> {
            match lookup {
                MessageLookup::Id(id) => sqlx::query(select_message!("id = $1")).bind(id),
                MessageLookup::RequestId(request_id) => {
                    sqlx::query(select_message!("request_id = $1")).bind(request_id)
                }
                MessageLookup::IdempotencyKey(actor, key) => sqlx::query(select_message!(
                    "actor_type = $1 AND actor_id = $2 AND idempotency_key = $3"
                ))
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(key),
            }
        }

        #[async_trait::async_trait]
        impl Store for $store {
            $($store_item)*

            async fn read_instance(&self, actor: ActorKey<'_, '_>) -> Result<Option<Instance>> {
                let row = sqlx::query(SELECT_INSTANCE)
                    .bind(actor.actor_type)
                    .bind(actor.actor_id)
                    .fetch_optional(&self.$readers)
                    .await?;
                row.map(|row| rows::instance(&row)).transpose()
            }

            async fn message(&self, lookup: MessageLookup<'_>) -> Result<Option<MessageRecord>> {
                let row = lookup_query(lookup).fetch_optional(&self.$readers).await?;
                row.map(|row| rows::message(&row)).transpose()
            }

            async fn dead_letters(&self, limit: i64) -> Result<Vec<MessageRecord>> {
                let rows = sqlx::query(select_message!(
                    "status = 'dead' ORDER BY finished_at, id LIMIT $1"
                ))
                .bind(limit)
                .fetch_all(&self.$readers)
                .await?;
                rows.iter().map(rows::message).collect()
            }

            async fn dead_effects(&self, limit: i64) -> Result<Vec<DeadEffectRecord>> {
                let rows = sqlx::query(
                    "SELECT id, effect_id, actor_type, actor_id, name, payload, attempts, last_error,
                            finished_at
                     FROM solid_effects WHERE status = 'dead' ORDER BY finished_at, id LIMIT $1",
                )
                .bind(limit)
                .fetch_all(&self.$readers)
                .await?;
                rows.iter().map(rows::dead_effect).collect()
            }

            async fn ready_actors(&self, now: i64, limit: i64) -> Result<Vec<(String, String)>> {
                let rows = sqlx::query(
                    "SELECT actor_type, actor_id FROM solid_messages
                     WHERE status = 'ready' AND available_at <= $1
                     GROUP BY actor_type, actor_id
                     ORDER BY MIN(available_at)
                     LIMIT $2",
                )
                .bind(now)
                .bind(limit)
                .fetch_all(&self.$readers)
                .await?;
                rows::actors(&rows)
            }

            fn stats(&self) -> Stats {
                self.counters.snapshot()
            }
        }

        #[async_trait::async_trait]
        impl Transaction for $transaction {
            $($transaction_item)*

            async fn next_message(&mut self, actor: ActorKey<'_, '_>) -> Result<Option<StoredMessage>> {
                self.counters.statement();
                let row = sqlx::query(
                    "SELECT id, sequence, operation, arguments, attempts, available_at
                     FROM solid_messages
                     WHERE actor_type = $1 AND actor_id = $2 AND status = 'ready'
                     ORDER BY sequence LIMIT 1",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .fetch_optional(&mut *self.tx)
                .await?;
                row.map(|row| rows::stored_message(&row)).transpose()
            }

            async fn insert_message(
                &mut self,
                actor: ActorKey<'_, '_>,
                message: &NewMessage<'_>,
            ) -> Result<i64> {
                self.counters.statement();
                let progress = &message.progress;
                let id = sqlx::query_scalar(
                    "INSERT INTO solid_messages (actor_type, actor_id, sequence, operation, arguments,
                         request_id, idempotency_key, status, attempts, available_at, result, last_error,
                         created_at, finished_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                     RETURNING id",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(message.sequence)
                .bind(message.operation)
                .bind(message.arguments)
                .bind(message.request_id)
                .bind(message.idempotency_key)
                .bind(progress.status.as_str())
                .bind(progress.attempts)
                .bind(progress.available_at)
                .bind(progress.result)
                .bind(progress.last_error)
                .bind(message.created_at)
                .bind(progress.finished_at)
                .fetch_one(&mut *self.tx)
                .await?;
                Ok(id)
            }

            async fn update_message(
                &mut self,
                message_id: i64,
                progress: &MessageProgress<'_>,
            ) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "UPDATE solid_messages
                     SET status = $1, attempts = $2, available_at = $3, result = $4, last_error = $5,
                         finished_at = $6
                     WHERE id = $7",
                )
                .bind(progress.status.as_str())
                .bind(progress.attempts)
                .bind(progress.available_at)
                .bind(progress.result)
                .bind(progress.last_error)
                .bind(progress.finished_at)
                .bind(message_id)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn write_instance(
                &mut self,
                actor: ActorKey<'_, '_>,
                write: &InstanceWrite<'_>,
            ) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "INSERT INTO solid_instances
                         (actor_type, actor_id, state, revision, next_sequence, unfinished, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
                         state = COALESCE(excluded.state, solid_instances.state),
                         revision = excluded.revision,
                         next_sequence = excluded.next_sequence,
                         unfinished = excluded.unfinished,
                         updated_at = excluded.updated_at",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(write.state)
                .bind(write.revision)
                .bind(write.next_sequence)
                .bind(write.unfinished)
                .bind(write.updated_at)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn allocate_sequence(&mut self, actor: ActorKey<'_, '_>, now: i64) -> Result<i64> {
                self.counters.statement();
                let sequence = sqlx::query_scalar(
                    "INSERT INTO solid_instances (actor_type, actor_id, next_sequence, unfinished, updated_at)
                     VALUES ($1, $2, 2, 1, $3)
                     ON CONFLICT (actor_type, actor_id) DO UPDATE SET
                         next_sequence = solid_instances.next_sequence + 1,
                         unfinished = solid_instances.unfinished + 1,
                         updated_at = excluded.updated_at
                     RETURNING next_sequence - 1",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await?;
                Ok(sequence)
            }

            async fn upsert_reminder(
                &mut self,
                actor: ActorKey<'_, '_>,
                reminder: &ReminderWrite<'_>,
            ) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "INSERT INTO solid_reminders (actor_type, actor_id, name, key, due_at, arguments)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (actor_type, actor_id, name, key) DO UPDATE SET
                         due_at = excluded.due_at, arguments = excluded.arguments",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(reminder.name)
                .bind(reminder.key)
                .bind(reminder.due_at)
                .bind(reminder.arguments)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn delete_reminder(
                &mut self,
                actor: ActorKey<'_, '_>,
                name: &str,
                key: &str,
            ) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "DELETE FROM solid_reminders
                     WHERE actor_type = $1 AND actor_id = $2 AND name = $3 AND key = $4",
                )
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(name)
                .bind(key)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn take_due_reminders(&mut self, now: i64, limit: i64) -> Result<Vec<DueReminder>> {
                self.counters.statement();
                let taken = sqlx::query(concat!(
                    "DELETE FROM solid_reminders WHERE id IN (
                         SELECT id FROM solid_reminders WHERE due_at <= $1 ORDER BY due_at, id LIMIT $2",
                    $skip_locked,
                    ") RETURNING id, due_at, actor_type, actor_id, name, arguments"
                ))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?;
                rows::due_reminders(taken)
            }

            async fn insert_effect(
                &mut self,
                actor: ActorKey<'_, '_>,
                effect: &NewEffect<'_>,
            ) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "INSERT INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
                         available_at, created_at)
                     VALUES ($1, $2, $3, $4, $5, 'ready', $6, $6)",
                )
                .bind(effect.effect_id)
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(effect.name)
                .bind(effect.payload)
                .bind(effect.created_at)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn claim_effects(
                &mut self,
                name: &str,
                now: i64,
                lease_until: i64,
                limit: i64,
            ) -> Result<Vec<ClaimedEffect>> {
                self.counters.statement();
                let claimed = sqlx::query(concat!(
                    "UPDATE solid_effects
                     SET status = 'running', attempts = attempts + 1, available_at = $3
                     WHERE id IN (
                         SELECT id FROM solid_effects
                         WHERE name = $1 AND status IN ('ready', 'running') AND available_at <= $2
                         ORDER BY available_at, id LIMIT $4",
                    $skip_locked,
                    ") RETURNING id, effect_id, actor_type, actor_id, payload, attempts"
                ))
                .bind(name)
                .bind(now)
                .bind(lease_until)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?;
                rows::claimed_effects(&claimed)
            }

            async fn finish_effect(&mut self, id: i64, progress: &EffectProgress<'_>) -> Result<()> {
                self.counters.statement();
                sqlx::query(
                    "UPDATE solid_effects
                     SET status = $1, available_at = $2, last_error = $3, finished_at = $4
                     WHERE id = $5",
                )
                .bind(progress.status)
                .bind(progress.available_at)
                .bind(progress.last_error)
                .bind(progress.finished_at)
                .bind(id)
                .execute(&mut *self.tx)
                .await?;
                Ok(())
            }

            async fn revive_effect(&mut self, id: i64, now: i64) -> Result<bool> {
                self.counters.statement();
                let revived = sqlx::query(
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
                let row = lookup_query(lookup).fetch_optional(&mut *self.tx).await?;
                row.map(|row| rows::message(&row)).transpose()
            }

            async fn prune_finished(&mut self, before: i64, keep_keyed: i64) -> Result<u64> {
                self.counters.statement();
                let deleted = sqlx::query(
                    "DELETE FROM solid_messages
                     WHERE status IN ('completed', 'rejected') AND finished_at < $1
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
                .bind(before)
                .bind(keep_keyed)
                .execute(&mut *self.tx)
                .await?;
                self.counters.statement();
                let effects =
                    sqlx::query("DELETE FROM solid_effects WHERE status = 'done' AND finished_at < $1")
                        .bind(before)
                        .execute(&mut *self.tx)
                        .await?;
                Ok(deleted.rows_affected() + effects.rows_affected())
            }

            async fn savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                sqlx::query("SAVEPOINT solid_turn")
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn rollback_to_savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                sqlx::query("ROLLBACK TO SAVEPOINT solid_turn")
                    .execute(&mut *self.tx)
                    .await?;
                sqlx::query("RELEASE SAVEPOINT solid_turn")
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn release_savepoint(&mut self) -> Result<()> {
                self.counters.statement();
                sqlx::query("RELEASE SAVEPOINT solid_turn")
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn commit(self: Box<Self>) -> Result<()> {
                self.tx.commit().await?;
                self.counters.transaction();
                Ok(())
            }
        }
    };
}
