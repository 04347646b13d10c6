//! One turn, in the order it takes its steps: run the handler on the actor's state, take the
//! transaction back, settle what the handler produced, write the message row and the turn's
//! writes ([`Written`]), run the turns of the group it leads, commit, and report. Each step is
//! a function of its own.
//!
//! The transaction arrives begun and owned (a mailbox step or a fresh call began it), and
//! nothing here begins another: every `.await` is a cancel point, and a turn dropped at any
//! of them rolls back with its transaction. A turn written but not yet committed (a group's
//! member) hands its transaction back to whoever commits it.

use std::panic::AssertUnwindSafe;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::core::Core;
use super::settle::Settled;
use super::state_cache::StateCache;
use super::turn_writes::Completed;
use super::watchers::Watchers;
use super::written::{Uncommitted, Written};
use super::{from_micros, micros, TurnReport};
use crate::actor::handled::Handled;
use crate::actor::send::Registrar;
use crate::actor::turn::{Turn, TurnFacts};
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageProgress, NewMessage, StoredMessage, StoredStatus,
    Transaction, TurnMessage,
};
use crate::trace_context::TraceContext;

/// The turns job: one turn of an actor, from its handler to its commit, and one step of an
/// actor's mailbox (`mailbox_step.rs`) with its failed attempts (`attempts.rs`). It borrows
/// the core, the states kept in memory, the watchers it tells of commits, and the registrar
/// a send's target type joins.
#[derive(Clone, Copy)]
pub(crate) struct Turns<'e> {
    core: &'e Core,
    states: &'e StateCache,
    watchers: &'e Watchers,
    registrar: &'e dyn Registrar,
}

/// Where the message of a turn comes from.
pub(super) enum Delivery<'a, M> {
    /// A synchronous call on an empty mailbox: enqueue, turn and completion in one transaction.
    Fresh {
        message: M,
        arguments: &'a str,
        request_id: &'a str,
        idempotency_key: Option<&'a str>,
        /// The caller's trace context, which the message is stored with.
        trace: TraceContext,
    },
    /// The head of the mailbox.
    Stored { head: &'a StoredMessage, message: M },
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
    /// The trace context the message came with (a fresh call's is stored with its row).
    sent_with: TraceContext,
    /// The context of the turn's own span, which its messages, reminders and effects carry.
    trace: TraceContext,
    /// The caller's deadline, if a caller waits for the turn.
    caller_deadline: Option<Instant>,
    /// When the group the turn joined needs its transaction back, as a group's member.
    budget: Option<Instant>,
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

/// A turn that committed nothing: why, and its transaction unless it was lost with it (a
/// handler abandoned mid-statement, a savepoint that failed).
pub(super) struct Unwritten {
    pub(super) tx: Option<Box<dyn Transaction>>,
    pub(super) why: Uncommitted,
}

impl Unwritten {
    fn lost(why: Uncommitted) -> Self {
        Self { tx: None, why }
    }

    fn back(tx: Box<dyn Transaction>, why: Uncommitted) -> Self {
        Self { tx: Some(tx), why }
    }
}

/// Who waits for a turn: a caller, until its deadline (`None`: a worker), and the group of
/// calls the turn leads, if any.
pub(super) struct Waiter<'l> {
    pub(super) deadline: Option<Instant>,
    pub(super) leads: Option<&'l mut dyn Lead>,
}

/// A group of calls a turn leads ([`groups`](super::groups)): it takes its members into the
/// turn's transaction before the commit, and tells them how the commit ended.
#[async_trait]
pub(super) trait Lead: Send {
    /// Until when the group takes members in, if its leader's turn is written now.
    fn taking_until(&self) -> Instant;

    /// Runs the waiting members' turns in `tx` until `until`; hands the transaction back,
    /// or says why the leader's turn is lost with it.
    async fn take_members(
        &mut self,
        turns: Turns<'_>,
        tx: Box<dyn Transaction>,
        until: Instant,
    ) -> Result<Box<dyn Transaction>, Uncommitted>;

    /// The group's transaction committed: each member's turn is reported.
    fn committed(&mut self, turns: Turns<'_>);

    /// The group's transaction did not commit (`in_doubt`: or its answer was lost).
    fn uncommitted(&mut self, in_doubt: bool);
}

impl Waiter<'_> {
    /// A caller, or a worker, whose turn leads no group.
    pub(super) fn until(deadline: Option<Instant>) -> Self {
        Self {
            deadline,
            leads: None,
        }
    }
}

/// A fresh call's turn, as a group's member runs it: its deadline, and what its message
/// carries.
pub(super) struct FreshTurn<'a, M> {
    pub(super) message: M,
    pub(super) arguments: &'a str,
    pub(super) request_id: &'a str,
    pub(super) idempotency_key: Option<&'a str>,
    /// The caller's trace context (the leader's task runs the turn, not the caller's).
    pub(super) trace: TraceContext,
    pub(super) caller_deadline: Instant,
    /// When its group needs its transaction back: a handler still running then is undone.
    pub(super) budget: Instant,
}

impl<'e> Turns<'e> {
    /// The turns job over the engine's parts.
    pub(super) fn new(
        core: &'e Core,
        states: &'e StateCache,
        watchers: &'e Watchers,
        registrar: &'e dyn Registrar,
    ) -> Self {
        Self {
            core,
            states,
            watchers,
            registrar,
        }
    }

    /// The core this job works through.
    pub(super) fn core(&self) -> &'e Core {
        self.core
    }

    /// The states kept in memory between turns.
    pub(super) fn states(&self) -> &'e StateCache {
        self.states
    }

    /// Runs one turn in `tx` on `state` and commits it, with the turns of the group its
    /// `waiter` leads (a fresh call's). The handler runs until the turn timeout (its attempt
    /// then counts as failed) or the caller's deadline (then nothing counts), whichever comes
    /// first.
    pub(super) async fn run_turn<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: &Instance,
        state: A,
        delivery: Delivery<'_, A::Message>,
        waiter: Waiter<'_>,
    ) -> Result<TurnReport, Uncommitted> {
        let Waiter {
            deadline: caller_deadline,
            leads,
        } = waiter;
        let (scheduled_at, sent_with) = match &delivery {
            Delivery::Stored { head, .. } => (head.scheduled_for.map(from_micros), head.trace),
            Delivery::Fresh { trace, .. } => (None, *trace),
        };
        let (message, message_id, previous_attempts, fresh) = match delivery {
            Delivery::Fresh {
                message,
                arguments,
                request_id,
                idempotency_key,
                trace: _,
            } => (
                message,
                None,
                0,
                Some((arguments, request_id, idempotency_key)),
            ),
            Delivery::Stored { head, message } => (message, Some(head.id), head.attempts, None),
        };
        let operation = message.name();
        let span = turn_span(key, operation, message_id, sent_with);
        let trace = TraceContext::of(&span);
        let started = Instant::now();
        let ran = async move {
            let running = Running {
                key,
                operation,
                message_id,
                previous_attempts,
                fresh,
                scheduled_at,
                sent_with,
                trace,
                caller_deadline,
                budget: None,
                now: self.core.now(),
            };
            let written = self
                .write_turn_steps(tx, &running, instance, state, message)
                .await;
            self.commit_turn(written, caller_deadline, leads).await
        }
        .instrument(span)
        .await;
        crate::metrics::turn_duration(key.actor_type, operation, started.elapsed());
        ran
    }

    /// Runs a fresh call's turn in `tx`, a group's transaction, and writes it there without
    /// committing: the group's leader commits it, and then reports it
    /// ([`Engine::turn_committed`]).
    pub(super) async fn run_member_turn<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: &Instance,
        state: A,
        turn: FreshTurn<'_, A::Message>,
    ) -> Result<(Box<dyn Transaction>, Written), Unwritten> {
        let operation = turn.message.name();
        let span = turn_span(key, operation, None, turn.trace);
        let running = Running {
            key,
            operation,
            message_id: None,
            previous_attempts: 0,
            fresh: Some((turn.arguments, turn.request_id, turn.idempotency_key)),
            scheduled_at: None,
            sent_with: turn.trace,
            trace: TraceContext::of(&span),
            caller_deadline: Some(turn.caller_deadline),
            budget: Some(turn.budget),
            now: self.core.now(),
        };
        self.write_turn_steps(tx, &running, instance, state, turn.message)
            .instrument(span)
            .await
    }

    /// Commits a written turn with the turns of the group it `leads`, and reports it; a
    /// turn that was not written releases its transaction.
    async fn commit_turn(
        &self,
        written: Result<(Box<dyn Transaction>, Written), Unwritten>,
        caller_deadline: Option<Instant>,
        leads: Option<&mut dyn Lead>,
    ) -> Result<TurnReport, Uncommitted> {
        let (mut tx, written) = match written {
            Ok(written) => written,
            Err(Unwritten { tx, why }) => {
                if let Some(tx) = tx {
                    Core::release(tx).await;
                }
                return Err(why);
            }
        };
        if let Some(group) = leads {
            // The members wait no longer than the leader's caller, nor its group commit.
            let until = [caller_deadline, tx.group_budget()]
                .into_iter()
                .flatten()
                .fold(group.taking_until(), Instant::min);
            tx = group.take_members(*self, tx, until).await?;
            let committed = commit(tx).await;
            return match committed {
                Ok(()) => {
                    let report = self.turn_committed(written);
                    group.committed(*self);
                    Ok(report)
                }
                Err(why) => {
                    group.uncommitted(matches!(why, Uncommitted::InDoubt));
                    Err(why)
                }
            };
        }
        commit(tx).await?;
        Ok(self.turn_committed(written))
    }

    /// Reports a turn whose transaction committed: wakes the workers and the actor's
    /// watchers, keeps its state in memory, records its outcome.
    pub(super) fn turn_committed(&self, written: Written) -> TurnReport {
        let Written {
            actor_type,
            actor_id,
            operation,
            fresh,
            message_id,
            mut settled,
            version,
            delivered,
            available_at,
            finished,
            span,
        } = written;
        let key = ActorKey {
            actor_type,
            actor_id: &actor_id,
        };
        self.core.wake();
        if settled.writes.is_some() {
            self.watchers.committed(key);
        }
        self.states
            .turn_written(key, version, settled.writes.take());
        let outcome = settled.into_outcome(available_at, finished);
        span.record("outcome", outcome.label());
        if fresh {
            crate::metrics::enqueued(actor_type, operation, 1);
        }
        outcome.record(actor_type, operation);
        for (actor_type, operation) in delivered {
            crate::metrics::enqueued(actor_type, operation, 1);
        }
        TurnReport {
            message_id,
            outcome,
        }
    }

    /// The turn's steps in order, to its writes: run the handler, take the transaction
    /// back, settle, write the message row and the writes.
    async fn write_turn_steps<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        running: &Running<'_>,
        instance: &Instance,
        mut state: A,
        message: A::Message,
    ) -> Result<(Box<dyn Transaction>, Written), Unwritten> {
        let mut turn = Turn::<A>::new(TurnFacts {
            actor_id: running.key.actor_id,
            now: running.now,
            message_id: running.message_id,
            attempt: u32::try_from(running.attempts()).unwrap_or(u32::MAX),
            incarnation: instance.incarnation,
            scheduled_at: running.scheduled_at,
        });
        let budget = [tx.group_budget(), running.budget]
            .into_iter()
            .flatten()
            .reduce(Instant::min);
        turn.attach(tx);
        let handled = match self
            .run_handler(&mut turn, &mut state, message, running, budget)
            .await
        {
            Ok(handled) => handled,
            // Over budget, the handler was not cut off mid-statement: the transaction is
            // whole. Any other end of the handler's time leaves it poisoned, in the turn.
            Err(Uncommitted::OverBudget) => {
                return Err(match turn.detach() {
                    Some((tx, _)) => Unwritten::back(tx, Uncommitted::OverBudget),
                    None => Unwritten::lost(Uncommitted::OverBudget),
                })
            }
            Err(why) => return Err(Unwritten::lost(why)),
        };
        let staged = turn.close_staging();
        let Some((mut tx, savepoint)) = turn.detach() else {
            return Err(Unwritten::lost(Uncommitted::Failed {
                error: "the turn's transaction was not returned".to_owned(),
                retryable: true,
            }));
        };
        if let Handled::Transient(why) = handled {
            return Err(Unwritten::back(tx, Uncommitted::Conflict(why)));
        }
        let completed = Completed {
            state: &state,
            staged,
            now: running.now,
        };
        let limits = &self.core.config().limits;
        let settled = Settled::of(
            limits,
            completed,
            handled,
            running.operation,
            running.attempts(),
        );
        // A savepoint statement that failed leaves the transaction poisoned.
        if let Err(error) = end_savepoint(&mut *tx, savepoint, settled.completed()).await {
            return Err(Unwritten::lost(running.uncommitted(error)));
        }
        match self
            .write_settled::<A>(&mut *tx, running, instance, settled)
            .await
        {
            Ok(written) => Ok((tx, written)),
            Err(why) => Err(Unwritten::back(tx, why)),
        }
    }

    /// Writes a settled turn's message row and, for a completed one, its writes.
    async fn write_settled<A: Actor>(
        &self,
        tx: &mut dyn Transaction,
        running: &Running<'_>,
        instance: &Instance,
        settled: Settled,
    ) -> Result<Written, Uncommitted> {
        let progress = settled.progress(
            running.now,
            &self.core.config().retry,
            self.max_attempts::<A>(),
        );
        let (version, now) = (i64::from(A::VERSION), micros(running.now));
        let state = settled
            .writes
            .as_ref()
            .and_then(|writes| writes.state_write(instance, version, now));
        // A rejection leaves an actor that never lived as it found it: no row of its own,
        // and no message row unless an idempotency key must answer a retry with it.
        let forget = settled.rejected() && instance.never_lived();
        let message_id = match running.fresh {
            Some((_, _, None)) if forget => None,
            _ => {
                let written = write_message_row(tx, running, progress, state.as_ref())
                    .await
                    .map_err(|error| running.uncommitted(error))?;
                let Some(message_id) = written else {
                    return Err(Uncommitted::Conflict(format!(
                        "message {} was run by another turn meanwhile",
                        running.message_id.unwrap_or_default()
                    )));
                };
                Some(message_id)
            }
        };
        if forget {
            tx.forget_never_lived(running.key)
                .await
                .map_err(|error| running.uncommitted(error))?;
        }
        let mut delivered = Vec::new();
        if let Some(writes) = &settled.writes {
            delivered = writes
                .write(
                    self.registrar,
                    tx,
                    running.key,
                    instance,
                    now,
                    running.trace,
                )
                .await
                .map_err(|error| running.uncommitted(error))?;
        }
        let (available_at, finished) = (
            progress.available_at,
            progress.status != StoredStatus::Ready,
        );
        Ok(Written {
            actor_type: running.key.actor_type,
            actor_id: running.key.actor_id.to_owned(),
            operation: running.operation,
            fresh: running.fresh.is_some(),
            message_id,
            settled,
            version: instance.version(),
            delivered,
            available_at,
            finished,
            span: tracing::Span::current(),
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
        let turn_deadline = deadline_after(self.core.config().turn_timeout);
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
            // Over its group's budget, or a member of a group out of its own time: undone
            // (after any statement its handler left running) by whoever holds the
            // transaction, so the other turns of its group commit now.
            Err(_) if handler_deadline < own_deadline || running.budget.is_some() => {
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
                    timeout: self.core.config().turn_timeout,
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
                trace: running.sent_with,
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

/// The span of a turn: OpenTelemetry's messaging conventions, the actor type as the
/// destination, and as its parent the span that sent its message (`sent_with`: a caller's,
/// another turn's, an effect run's), wherever that ran; with no such context, the current
/// span.
fn turn_span(
    key: ActorKey<'_, '_>,
    operation: &'static str,
    message_id: Option<i64>,
    sent_with: TraceContext,
) -> tracing::Span {
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
    sent_with.continue_in(&span);
    span
}

/// Commits a turn's transaction: a connection lost with the `COMMIT` leaves the turn in
/// doubt (the server may have run it); lost before, the turn failed like any other, and is
/// counted.
async fn commit(tx: Box<dyn Transaction>) -> Result<(), Uncommitted> {
    tx.commit()
        .await
        .map_err(|error| match error.is_connection_lost() {
            true => Uncommitted::InDoubt,
            false => Uncommitted::from(error),
        })
}
