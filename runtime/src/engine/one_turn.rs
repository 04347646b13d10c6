//! One turn, in the order it takes its steps: run the handler on the actor's state, take the
//! transaction back, settle what the handler produced, write the message row and the turn's
//! writes, commit, and report. Each step is a function of its own.
//!
//! The transaction arrives begun and owned (a mailbox step or a fresh call began it), and
//! nothing here begins another: every `.await` is a cancel point, and a turn dropped at any
//! of them rolls back with its transaction.

use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::settle::Settled;
use super::turn_writes::Completed;
use super::{from_micros, micros, Engine, TurnReport};
use crate::actor::handled::Handled;
use crate::actor::turn::{Turn, TurnFacts};
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageProgress, NewMessage, StoredMessage, StoredStatus,
    Transaction, TurnMessage,
};

/// Where the message of a turn comes from.
pub(super) enum Delivery<'a, M> {
    /// A synchronous call on an empty mailbox: enqueue, turn and completion in one transaction.
    Fresh {
        message: M,
        arguments: &'a str,
        request_id: &'a str,
        idempotency_key: Option<&'a str>,
    },
    /// The head of the mailbox.
    Stored { head: &'a StoredMessage, message: M },
}

/// Why a turn committed nothing.
#[derive(Debug)]
pub(super) enum Uncommitted {
    /// Another transaction got in the way (a deadlock, a key taken at the same moment, a
    /// stale read): run the turn again, nothing counted.
    Conflict(String),
    /// The caller's deadline passed while the handler ran: abandoned, nothing counted; a
    /// stored message stays for later.
    Abandoned,
    /// The turn failed: an attempt to count, and whether another may succeed.
    Failed { error: String, retryable: bool },
    /// The turn joined a group commit and ran past the group's budget: undone so the
    /// earlier members could commit, nothing counted; it runs again outside any group.
    OverBudget,
    /// Its group commit ended in doubt (another member ended the transaction itself, or the
    /// `COMMIT` failed and the connection was closed), or its connection was lost with its
    /// `COMMIT` (perhaps after the server committed, before its answer came): the turn was
    /// kept or not. Read back under the actor's lock (which waits for any transaction still
    /// holding it), then counted as nothing or run again.
    InDoubt,
}

impl From<Error> for Uncommitted {
    fn from(error: Error) -> Self {
        if let Error::GroupCommitFailed { .. } = error {
            Self::InDoubt
        } else if error.is_conflict() {
            Self::Conflict(error.to_string())
        } else {
            Self::Failed {
                error: error.to_string(),
                retryable: true,
            }
        }
    }
}

/// A turn's message as it runs: its actor, operation, row and attempt, and its deadlines.
struct Running<'a> {
    key: ActorKey<'static, 'a>,
    operation: &'static str,
    /// The stored message's id; `None` for a fresh call's, whose row the turn inserts.
    message_id: Option<i64>,
    /// The failed attempts before this one.
    previous_attempts: i64,
    /// A fresh call's arguments, request id and idempotency key.
    fresh: Option<(&'a str, &'a str, Option<&'a str>)>,
    /// When a fired reminder's occurrence was scheduled for.
    scheduled_at: Option<DateTime<Utc>>,
    /// The caller's deadline, if a caller waits for the turn.
    caller_deadline: Option<Instant>,
    /// The runtime clock's time of the turn.
    now: DateTime<Utc>,
}

impl Running<'_> {
    /// This attempt's number, from 1.
    fn attempts(&self) -> i64 {
        self.previous_attempts + 1
    }

    /// Why the turn committed nothing after its statement failed with `error`: a wait that
    /// ran out in a turn a caller waits for (its statements are bounded by the caller's
    /// deadline) abandons it, nothing counted, as a handler still running at that deadline
    /// does; anything else as [`Uncommitted::from`] says.
    fn uncommitted(&self, error: Error) -> Uncommitted {
        match self.caller_deadline.is_some() && error.is_busy() {
            true => Uncommitted::Abandoned,
            false => Uncommitted::from(error),
        }
    }
}

impl Engine {
    /// Runs one turn in `tx` on `state` and commits it. The handler runs until the turn
    /// timeout (its attempt then counts as failed) or the caller's deadline (then nothing
    /// counts), whichever comes first.
    pub(super) async fn run_turn<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: &Instance,
        state: A,
        delivery: Delivery<'_, A::Message>,
        caller_deadline: Option<Instant>,
    ) -> Result<TurnReport, Uncommitted> {
        let scheduled_at = match &delivery {
            Delivery::Stored { head, .. } => head.scheduled_for.map(from_micros),
            Delivery::Fresh { .. } => None,
        };
        let (message, message_id, previous_attempts, fresh) = match delivery {
            Delivery::Fresh {
                message,
                arguments,
                request_id,
                idempotency_key,
            } => (
                message,
                None,
                0,
                Some((arguments, request_id, idempotency_key)),
            ),
            Delivery::Stored { head, message } => (message, Some(head.id), head.attempts, None),
        };
        let operation = message.name();
        // OpenTelemetry's messaging conventions: the actor type is the destination.
        let span = tracing::info_span!(
            "turn",
            messaging.system = "solid_objects",
            messaging.operation.type = "process",
            messaging.destination.name = key.actor_type,
            messaging.operation.name = operation,
            messaging.message.id = message_id,
            actor_id = key.actor_id,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let ran = async move {
            let running = Running {
                key,
                operation,
                message_id,
                previous_attempts,
                fresh,
                scheduled_at,
                caller_deadline,
                now: self.now(),
            };
            self.turn_steps(tx, &running, instance, state, message)
                .await
        }
        .instrument(span)
        .await;
        crate::metrics::turn_duration(key.actor_type, operation, started.elapsed());
        ran
    }

    /// The turn's steps in order: run the handler, take the transaction back, settle, write
    /// the message row and the writes, commit, report.
    async fn turn_steps<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        running: &Running<'_>,
        instance: &Instance,
        mut state: A,
        message: A::Message,
    ) -> Result<TurnReport, Uncommitted> {
        let mut turn = Turn::<A>::new(TurnFacts {
            actor_id: running.key.actor_id,
            now: running.now,
            message_id: running.message_id,
            attempt: u32::try_from(running.attempts()).unwrap_or(u32::MAX),
            incarnation: instance.incarnation,
            scheduled_at: running.scheduled_at,
        });
        let budget = tx.group_budget();
        turn.attach(tx);
        let handled = self
            .run_handler(&mut turn, &mut state, message, running, budget)
            .await?;
        let staged = turn.close_staging();
        let destroy = turn.destroy_requested();
        let (mut tx, savepoint) = turn.detach().ok_or_else(|| Uncommitted::Failed {
            error: "the turn's transaction was not returned".to_owned(),
            retryable: true,
        })?;
        if let Handled::Transient(why) = handled {
            Self::release(tx).await;
            return Err(Uncommitted::Conflict(why));
        }
        let completed = Completed {
            state: &state,
            staged,
            destroy,
            now: running.now,
        };
        let limits = &self.config.limits;
        let mut settled = Settled::of(
            limits,
            completed,
            handled,
            running.operation,
            running.attempts(),
        );
        end_savepoint(&mut *tx, savepoint, settled.completed())
            .await
            .map_err(|error| running.uncommitted(error))?;
        let progress = settled.progress(running.now, &self.config.retry, self.max_attempts::<A>());
        let (version, now) = (i64::from(A::VERSION), micros(running.now));
        let state = settled
            .writes
            .as_ref()
            .and_then(|writes| writes.state_write(instance, version, now));
        let written = write_message_row(&mut *tx, running, progress, state.as_ref())
            .await
            .map_err(|error| running.uncommitted(error))?;
        let Some(message_id) = written else {
            Self::release(tx).await;
            return Err(Uncommitted::Conflict(format!(
                "message {} was run by another turn meanwhile",
                running.message_id.unwrap_or_default()
            )));
        };
        let mut delivered = Vec::new();
        if let Some(writes) = &settled.writes {
            delivered = writes
                .write(self, &mut *tx, running.key, instance, now)
                .await
                .map_err(|error| running.uncommitted(error))?;
        }
        let (available_at, finished) = (
            progress.available_at,
            progress.status != StoredStatus::Ready,
        );
        // A connection lost with the COMMIT leaves the turn in doubt (the server may have
        // run it); lost before, the turn failed like any other, and is counted.
        tx.commit()
            .await
            .map_err(|error| match error.is_connection_lost() {
                true => Uncommitted::InDoubt,
                false => Uncommitted::from(error),
            })?;
        self.wake();
        if settled.writes.is_some() {
            self.state_committed(running.key);
        }
        self.state_written(running.key, instance, settled.writes.take());
        let outcome = settled.into_outcome(available_at, finished);
        record_outcome(running, &outcome, delivered);
        Ok(TurnReport {
            message_id,
            outcome,
        })
    }

    /// Runs the handler on `state` until the first of the turn timeout (a failed attempt),
    /// the caller's deadline (abandoned, nothing counted) and its group commit's budget
    /// (undone, to run again alone).
    async fn run_handler<A: Actor>(
        &self,
        turn: &mut Turn<A>,
        state: &mut A,
        message: A::Message,
        running: &Running<'_>,
        budget: Option<Instant>,
    ) -> Result<Handled, Uncommitted> {
        let key = running.key;
        let turn_deadline = deadline_after(self.config.turn_timeout);
        let own_deadline = running
            .caller_deadline
            .map_or(turn_deadline, |at| at.min(turn_deadline));
        let handler_deadline = budget.map_or(own_deadline, |at| at.min(own_deadline));
        let handling = crate::actor::handler_scope::as_handler(
            key.actor_type,
            key.actor_id,
            AssertUnwindSafe(state.handle(turn, message)).catch_unwind(),
        );
        match tokio::time::timeout_at(handler_deadline, handling).await {
            Ok(Ok(handled)) => Ok(handled),
            Ok(Err(panic)) => Ok(Handled::panicked(&*panic)),
            Err(_) if handler_deadline < own_deadline => {
                // Over its group's budget: undone to its savepoint (after any statement
                // its handler left running), so the earlier members commit now.
                if let Some((tx, _)) = turn.detach() {
                    Self::release(tx).await;
                }
                Err(Uncommitted::OverBudget)
            }
            Err(_) => {
                // The handler future is gone, maybe in the middle of its own SQL: the
                // transaction's connection is closed, not reused.
                turn.poison();
                if handler_deadline < turn_deadline {
                    return Err(Uncommitted::Abandoned);
                }
                let error = Error::TurnTimeout {
                    actor_type: key.actor_type,
                    actor_id: key.actor_id.to_owned(),
                    operation: running.operation,
                    timeout: self.config.turn_timeout,
                };
                Err(Uncommitted::Failed {
                    error: error.to_string(),
                    retryable: true,
                })
            }
        }
    }
}

/// Ends the handler's savepoint, if it had one: released when the turn completed (its
/// changes are kept), rolled back to otherwise.
async fn end_savepoint(tx: &mut dyn Transaction, savepoint: bool, completed: bool) -> Result<()> {
    match (savepoint, completed) {
        (false, _) => Ok(()),
        (true, true) => tx.release_savepoint().await,
        (true, false) => tx.rollback_to_savepoint().await,
    }
}

/// Writes the turn's message row (a fresh call's is inserted, a stored one's updated unless
/// another turn moved it on meanwhile: `None` then) and, beside it, the actor's new `state`;
/// returns the message's id.
async fn write_message_row(
    tx: &mut dyn Transaction,
    running: &Running<'_>,
    progress: MessageProgress<'_>,
    state: Option<&InstanceWrite<'_>>,
) -> Result<Option<i64>> {
    let new;
    let message = match (running.fresh, running.message_id) {
        (Some((arguments, request_id, idempotency_key)), _) => {
            new = NewMessage {
                operation: running.operation,
                arguments,
                request_id,
                idempotency_key,
                created_at: micros(running.now),
                progress,
                incarnation: None,
                scheduled_for: None,
            };
            TurnMessage::New(&new)
        }
        (None, Some(id)) => TurnMessage::Progress {
            id,
            attempts: running.previous_attempts,
            progress: &progress,
        },
        (None, None) => unreachable!("a stored delivery carries its message id"),
    };
    tx.write_turn(running.key, message, state).await
}

/// Records a committed turn's outcome in its span and the metrics, with the messages it
/// delivered to other actors.
fn record_outcome(
    running: &Running<'_>,
    outcome: &super::Outcome,
    delivered: Vec<(&'static str, &'static str)>,
) {
    let actor_type = running.key.actor_type;
    tracing::Span::current().record("outcome", outcome.label());
    if running.fresh.is_some() {
        crate::metrics::enqueued(actor_type, running.operation, 1);
    }
    outcome.record(actor_type, running.operation);
    for (actor_type, operation) in delivered {
        crate::metrics::enqueued(actor_type, operation, 1);
    }
}
