//! The end of a turn: its message row and its actor's new state, written by one statement
//! where the backend can (a PostgreSQL data-modifying `WITH`), by two where it cannot.
//!
//! A turn's last writes are a round trip each on a server; PostgreSQL writes both tables in
//! one statement, so a warm call makes no more round trips than the raw turn it replaces.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::activity_tallies::finish_stamp;
use super::messages::bind_progress;
use super::query::{query, Dialect, Query};
use super::{
    ActorKey, InstanceWrite, InstanceWrites, MessageProgress, MessageWrites, NewMessage,
    WriteConnection,
};
use crate::error::Result;

/// The end of a statement whose `message` step wrote a message row: the actor's row upserted
/// with the parameters `params` (its type, id, state, revision, state version and time),
/// created if needed, and the message's id returned.
fn then_state(params: &str) -> String {
    format!(
        "instance AS (
         INSERT INTO solid_instances
                (actor_type, actor_id, state, revision, state_version, updated_at)
         SELECT {params} FROM message
         ON CONFLICT (actor_type, actor_id) DO UPDATE SET
             state = excluded.state,
             revision = excluded.revision,
             state_version = excluded.state_version,
             updated_at = excluded.updated_at
     )
     SELECT id FROM message"
    )
}

/// A fresh call's message (`$1`..`$15`, in the columns' order; its finish no earlier than
/// the fold mark: [`finish_stamp`]) inserted, and the actor's (`$1`, `$2`) state `$16`,
/// revision `$17`, state version `$18` at `$19` written beside it, creating its row if
/// needed; returns the message's id (PostgreSQL).
fn insert_message_and_state() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH message AS (
         INSERT INTO solid_messages (actor_type, actor_id, operation, arguments,
                     request_id, idempotency_key, status, attempts, available_at, result,
                     last_error, finished_at, created_at, incarnation, scheduled_for)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {finished_at}, $13, $14, $15)
         RETURNING id
     ),
     {then_state}",
            finished_at = finish_stamp(Dialect::Postgres, "$12"),
            then_state = then_state("$1, $2, $16, $17, $18, $19"),
        )
    });
    &TEXT
}

/// A stored message's progress (status `$1`, attempts `$2`, available at `$3`, result `$4`,
/// error `$5`, finished at `$6`, or at the fold mark if later) recorded if message `$7` is
/// still ready with `$8` attempts, and only then the actor's (`$9`, `$10`) state `$11`,
/// revision `$12`, state version `$13` at `$14` written; returns the message's id, no row if
/// it was moved on (PostgreSQL).
fn update_message_and_state() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH message AS (
         UPDATE solid_messages
         SET status = $1, attempts = $2, available_at = $3, result = $4, last_error = $5,
             finished_at = {finished_at}
         WHERE id = $7 AND status = 'ready' AND attempts = $8
         RETURNING id
     ),
     {then_state}",
            finished_at = finish_stamp(Dialect::Postgres, "$6"),
            then_state = then_state("$9, $10, $11, $12, $13, $14"),
        )
    });
    &TEXT
}

/// The row a turn leaves for its message.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TurnMessage<'a> {
    /// A fresh call's message, inserted.
    New(&'a NewMessage<'a>),
    /// A stored message's progress, recorded only if it is still ready with `attempts`
    /// attempts (a stale runner cannot overwrite newer progress).
    Progress {
        id: i64,
        attempts: i64,
        progress: &'a MessageProgress<'a>,
    },
}

/// A turn's last writes, inside its transaction.
#[async_trait]
pub(crate) trait TurnWrites: Send {
    /// Writes the turn's message row and, for a completed turn, the actor's new `state`
    /// (only if the message row was written); returns the message's id, or `None` if a
    /// stored message was moved on meanwhile (then nothing was written).
    async fn write_turn(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: TurnMessage<'_>,
        state: Option<&InstanceWrite<'_>>,
    ) -> Result<Option<i64>>;
}

#[async_trait]
impl<T: WriteConnection> TurnWrites for T {
    async fn write_turn(
        &mut self,
        actor: ActorKey<'_, '_>,
        message: TurnMessage<'_>,
        state: Option<&InstanceWrite<'_>>,
    ) -> Result<Option<i64>> {
        if let (Dialect::Postgres, Some(state)) = (self.dialect(), state) {
            self.counters().statement();
            let id = message_and_state(actor, message, state)
                .fetch_optional_scalar(self.on())
                .await?;
            return Ok(id);
        }
        let id = match message {
            TurnMessage::New(new) => Some(self.insert_message(actor, new).await?),
            TurnMessage::Progress {
                id,
                attempts,
                progress,
            } => self
                .update_message(id, attempts, progress)
                .await?
                .then_some(id),
        };
        if let (Some(_), Some(state)) = (id, state) {
            self.write_instance(actor, state).await?;
        }
        Ok(id)
    }
}

/// The one statement that writes a turn's message row and its actor's state (PostgreSQL).
fn message_and_state<'q>(
    actor: ActorKey<'q, 'q>,
    message: TurnMessage<'q>,
    state: &InstanceWrite<'q>,
) -> Query<'q> {
    let statement = match message {
        TurnMessage::New(new) => {
            let message = query(insert_message_and_state())
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(new.operation)
                .bind(new.arguments)
                .bind(new.request_id)
                .bind(new.idempotency_key);
            bind_progress(message, &new.progress)
                .bind(new.created_at)
                .bind(new.incarnation)
                .bind(new.scheduled_for)
        }
        TurnMessage::Progress {
            id,
            attempts,
            progress,
        } => bind_progress(query(update_message_and_state()), progress)
            .bind(id)
            .bind(attempts)
            .bind(actor.actor_type)
            .bind(actor.actor_id),
    };
    statement
        .bind(state.state)
        .bind(state.revision)
        .bind(state.state_version)
        .bind(state.updated_at)
}
