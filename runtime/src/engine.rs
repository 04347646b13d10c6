//! The turn: enqueue, pick the next message, run the handler, commit. No SQL text here.

use std::any::TypeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::actor::{Actor, Operations};
use crate::clock::Clock;
use crate::codec::{decode_operation, encode_operation, from_json, to_json};
use crate::error::{Error, Rejection, Result};
use crate::handled::Handled;
use crate::limits::{Limits, Payload, RetryPolicy};
use crate::store::{
    ActorKey, Instance, InstanceWrite, MessageProgress, MessageStatus, NewMessage, ReminderWrite,
    Store, StoredMessage, StoredOutcome, Transaction,
};
use crate::turn::{ReminderChange, Turn};

/// How often a caller waiting on another task's turn looks at its message again, at most.
const WAIT_POLL: Duration = Duration::from_millis(25);

/// Runs turns against a store.
pub(crate) struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    retry: RetryPolicy,
    /// Woken after every commit that adds or finishes messages.
    wake: Notify,
    /// The actor types this runtime can run, by stored name.
    actors: RwLock<HashMap<&'static str, RegisteredActor>>,
}

#[derive(Clone)]
struct RegisteredActor {
    type_id: TypeId,
    runner: Arc<dyn MailboxRunner>,
}

/// How a message ended (or did not yet) after one turn.
#[derive(Debug)]
pub(crate) enum Outcome {
    Completed(String),
    Rejected(Rejection),
    Failed {
        error: String,
        attempts: i64,
        retry_at: Option<DateTime<Utc>>,
    },
}

/// What one turn did.
#[derive(Debug)]
pub(crate) struct TurnReport {
    message_id: i64,
    outcome: Outcome,
}

/// What asking an actor to run its next message did.
#[derive(Debug)]
pub(crate) enum Step {
    /// A turn ran.
    Ran(TurnReport),
    /// The mailbox has nothing ready.
    Idle,
    /// The head of the mailbox waits for a retry at this time (strict order holds the rest).
    Blocked { sequence: i64, until: DateTime<Utc> },
}

/// Where the message of a turn comes from.
enum Delivery<M> {
    /// A synchronous call on an empty mailbox: enqueue, turn and completion in one transaction.
    Fresh {
        message: M,
        arguments: String,
        request_id: String,
    },
    /// The head of the mailbox.
    Stored { row: StoredMessage, message: M },
}

/// A staged reminder change, encoded for the store.
enum ReminderOp {
    Upsert {
        name: &'static str,
        key: String,
        due_at: i64,
        arguments: String,
    },
    Delete {
        name: &'static str,
        key: String,
    },
}

impl Engine {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
        retry: RetryPolicy,
    ) -> Self {
        Self {
            store,
            clock,
            limits,
            retry,
            wake: Notify::new(),
            actors: RwLock::default(),
        }
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Wakes every task waiting for work or for a message to finish.
    pub(crate) fn wake(&self) {
        self.wake.notify_waiters();
    }

    /// Waits until woken or until `timeout` passes.
    pub(crate) async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// Makes `A` known to this engine, so workers and the testing API can run its messages.
    pub(crate) fn register<A: Actor>(&self) -> Result<()> {
        let type_id = TypeId::of::<A>();
        if let Some(known) = self
            .actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(A::TYPE_NAME)
        {
            return duplicate_check(known, type_id, A::TYPE_NAME);
        }
        let mut actors = self.actors.write().unwrap_or_else(PoisonError::into_inner);
        let known = actors
            .entry(A::TYPE_NAME)
            .or_insert_with(|| RegisteredActor {
                type_id,
                runner: Arc::new(TypedRunner::<A>(PhantomData)),
            });
        duplicate_check(known, type_id, A::TYPE_NAME)
    }

    fn runner(&self, actor_type: &str) -> Option<Arc<dyn MailboxRunner>> {
        self.actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(actor_type)
            .map(|known| Arc::clone(&known.runner))
    }

    /// Starts a write transaction, or gives up at the call's deadline.
    async fn begin_for(&self, call: &Call<'_>) -> Result<Box<dyn Transaction>> {
        match tokio::time::timeout_at(call.deadline, self.store.begin()).await {
            Ok(begun) => begun,
            Err(_) => Err(call.timed_out(
                None,
                "the database writer, which other turns held until the timeout".to_owned(),
            )),
        }
    }

    /// A synchronous call: enqueue the message and run turns until it has run.
    ///
    /// On an empty mailbox the enqueue, the turn and the completion share one transaction.
    pub(crate) async fn call<A: Actor>(
        &self,
        actor_id: &str,
        message: A::Message,
        arguments: String,
        timeout: Duration,
    ) -> Result<String> {
        let call = Call {
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: message.name(),
            timeout,
            deadline: Instant::now() + timeout,
        };
        let mut tx = self.begin_for(&call).await?;
        let instance = tx.instance(call.key).await?.unwrap_or_else(Instance::fresh);
        let request_id = uuid::Uuid::new_v4().to_string();
        if instance.unfinished == 0 {
            let delivery = Delivery::Fresh {
                message,
                arguments,
                request_id,
            };
            let report = self.run_turn::<A>(tx, call.key, instance, delivery).await?;
            return report.outcome.into_result(&call);
        }
        let now = micros(self.now());
        let sequence = instance.next_sequence;
        let message_id = tx
            .insert_message(
                call.key,
                &NewMessage {
                    sequence,
                    operation: call.operation,
                    arguments: &arguments,
                    request_id: &request_id,
                    created_at: now,
                    progress: MessageProgress::ready(0, now),
                },
            )
            .await?;
        tx.write_instance(
            call.key,
            &InstanceWrite {
                state: None,
                revision: instance.revision,
                next_sequence: sequence + 1,
                unfinished: instance.unfinished + 1,
                updated_at: now,
            },
        )
        .await?;
        tx.commit().await?;
        self.wake();
        self.run_until_done::<A>(&call, message_id, sequence).await
    }

    /// Runs the actor's turns until `message_id` has run, or the call's deadline passes.
    async fn run_until_done<A: Actor>(
        &self,
        call: &Call<'_>,
        message_id: i64,
        sequence: i64,
    ) -> Result<String> {
        loop {
            let tx = self
                .begin_for(call)
                .await
                .map_err(|error| error.with_sequence(sequence))?;
            let blocked_on = match self.run_next_in::<A>(tx, call.key).await? {
                Step::Ran(report) if report.message_id == message_id => {
                    return report.outcome.into_result(call);
                }
                Step::Ran(_) => continue,
                Step::Idle => None,
                Step::Blocked { sequence, until } => Some((sequence, until)),
            };
            if let Some(stored) = self.store.message_outcome(message_id).await? {
                if let Some(outcome) = Outcome::from_stored(stored) {
                    return outcome.into_result(call);
                }
            }
            let pause = WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
            self.wait_for_work(pause).await;
            if Instant::now() >= call.deadline {
                let waiting_on = match blocked_on {
                    Some((ahead, until)) if ahead != sequence => {
                        format!("message {ahead} ahead of it, which waits for a retry at {until}")
                    }
                    Some((_, until)) => format!("its own retry at {until}"),
                    None => "another task running the actor's earlier messages".to_owned(),
                };
                return Err(call.timed_out(Some(sequence), waiting_on));
            }
        }
    }

    /// An ordered read: runs the actor's earlier messages, then answers from its state.
    pub(crate) async fn ask<A: Actor>(
        &self,
        actor_id: &str,
        query: A::Query,
        timeout: Duration,
    ) -> Result<String> {
        let call = Call {
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: query.name(),
            timeout,
            deadline: Instant::now() + timeout,
        };
        loop {
            let instance = self
                .store
                .read_instance(call.key)
                .await?
                .unwrap_or_else(Instance::fresh);
            if instance.unfinished == 0 {
                let state: A = self.decode_state(call.key, &instance)?;
                let turn = Turn::<A>::new(actor_id, self.now(), None);
                let handled = AssertUnwindSafe(state.answer(&turn, query))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| Handled::Unserializable(panic_text(&*panic)));
                let outcome = match handled {
                    Handled::Value(value) => Outcome::Completed(value),
                    Handled::Rejected(rejection) => Outcome::Rejected(rejection),
                    Handled::Unserializable(error) => Outcome::Failed {
                        error,
                        attempts: 1,
                        retry_at: None,
                    },
                };
                return outcome.into_result(&call);
            }
            let tx = self.begin_for(&call).await?;
            if let Step::Blocked { sequence, until } = self.run_next_in::<A>(tx, call.key).await? {
                let pause = WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
                self.wait_for_work(pause).await;
                if Instant::now() >= call.deadline {
                    let waiting_on =
                        format!("message {sequence}, which waits for a retry at {until}");
                    return Err(call.timed_out(None, waiting_on));
                }
            }
        }
    }

    /// The actor's committed state, without a message; the default state if it has none.
    pub(crate) async fn snapshot<A: Actor>(&self, actor_id: &str) -> Result<A> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        match self.store.read_instance(key).await? {
            Some(instance) => self.decode_state(key, &instance),
            None => Ok(A::default()),
        }
    }

    fn decode_state<A: Actor>(&self, key: ActorKey<'static, '_>, instance: &Instance) -> Result<A> {
        match &instance.state {
            Some(json) => from_json("state", key.actor_type, key.actor_id, json),
            None => Ok(A::default()),
        }
    }

    /// Runs the actor's next ready message, if one is due.
    pub(crate) async fn run_next<A: Actor>(&self, actor_id: &str) -> Result<Step> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let tx = self.store.begin().await?;
        self.run_next_in::<A>(tx, key).await
    }

    async fn run_next_in<A: Actor>(
        &self,
        mut tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
    ) -> Result<Step> {
        let Some(instance) = tx.instance(key).await? else {
            return Ok(Step::Idle);
        };
        if instance.unfinished == 0 {
            return Ok(Step::Idle);
        }
        let Some(row) = tx.next_message(key).await? else {
            tracing::warn!(
                actor_type = key.actor_type,
                actor_id = key.actor_id,
                unfinished = instance.unfinished,
                "the actor counts unfinished messages but has none ready"
            );
            return Ok(Step::Idle);
        };
        if row.available_at > micros(self.now()) {
            return Ok(Step::Blocked {
                sequence: row.sequence,
                until: from_micros(row.available_at),
            });
        }
        let message = decode_operation::<A::Message>(
            key.actor_type,
            key.actor_id,
            &row.operation,
            &row.arguments,
            row.sequence,
        )?;
        let report = self
            .run_turn::<A>(tx, key, instance, Delivery::Stored { row, message })
            .await?;
        Ok(Step::Ran(report))
    }

    /// Runs one turn in `tx` and commits it.
    async fn run_turn<A: Actor>(
        &self,
        mut tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        instance: Instance,
        delivery: Delivery<A::Message>,
    ) -> Result<TurnReport> {
        let (message, sequence, previous_attempts, stored_id, fresh) = match delivery {
            Delivery::Fresh {
                message,
                arguments,
                request_id,
            } => (
                message,
                instance.next_sequence,
                0,
                None,
                Some((arguments, request_id)),
            ),
            Delivery::Stored { row, message } => {
                (message, row.sequence, row.attempts, Some(row.id), None)
            }
        };
        let operation = message.name();
        let span = tracing::info_span!(
            "turn",
            actor_type = key.actor_type,
            actor_id = key.actor_id,
            operation,
            sequence,
            outcome = tracing::field::Empty,
        );
        async move {
            let now = self.now();
            let now_us = micros(now);
            let mut state: A = self.decode_state(key, &instance)?;
            let mut turn = Turn::<A>::new(key.actor_id, now, Some(sequence));
            let handled = AssertUnwindSafe(state.handle(&mut turn, message))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Handled::Unserializable(panic_text(&*panic)));
            let settled = self.settle(&state, &mut turn, handled, operation, previous_attempts + 1);
            let progress = settled.progress(now, &self.retry);
            let finished = progress.status != MessageStatus::Ready;
            let message_id = match (&fresh, stored_id) {
                (Some((arguments, request_id)), _) => {
                    let new = NewMessage {
                        sequence,
                        operation,
                        arguments,
                        request_id,
                        created_at: now_us,
                        progress,
                    };
                    tx.insert_message(key, &new).await?
                }
                (None, Some(id)) => {
                    tx.update_message(id, &progress).await?;
                    id
                }
                (None, None) => unreachable!("a stored delivery carries its row id"),
            };
            for change in &settled.reminders {
                match change {
                    ReminderOp::Upsert {
                        name,
                        key: alarm,
                        due_at,
                        arguments,
                    } => {
                        let write = ReminderWrite {
                            name,
                            key: alarm,
                            due_at: *due_at,
                            arguments,
                        };
                        tx.upsert_reminder(key, &write).await?;
                    }
                    ReminderOp::Delete { name, key: alarm } => {
                        tx.delete_reminder(key, name, alarm).await?;
                    }
                }
            }
            let (next_sequence, unfinished) = match fresh {
                Some(_) => (
                    instance.next_sequence + 1,
                    instance.unfinished + i64::from(!finished),
                ),
                None => (
                    instance.next_sequence,
                    instance.unfinished - i64::from(finished),
                ),
            };
            tx.write_instance(
                key,
                &InstanceWrite {
                    state: settled.state.as_deref(),
                    revision: instance.revision + i64::from(settled.state.is_some()),
                    next_sequence,
                    unfinished,
                    updated_at: now_us,
                },
            )
            .await?;
            tx.commit().await?;
            self.wake();
            let available_at = progress.available_at;
            let outcome = settled.into_outcome(available_at, finished);
            tracing::Span::current().record("outcome", outcome.label());
            Ok(TurnReport {
                message_id,
                outcome,
            })
        }
        .instrument(span)
        .await
    }

    /// Turns what the handler produced into what the turn commits.
    fn settle<A: Actor>(
        &self,
        state: &A,
        turn: &mut Turn<A>,
        handled: Handled,
        operation: &str,
        attempts: i64,
    ) -> Settled {
        match handled {
            Handled::Value(result) => match self.completion(state, turn, &result, operation) {
                Ok((state, reminders)) => Settled {
                    kind: SettledKind::Completed(result),
                    attempts,
                    state: Some(state),
                    reminders,
                },
                Err(error) => Settled::failed(error.to_string(), attempts),
            },
            Handled::Rejected(rejection) => Settled {
                kind: SettledKind::Rejected(rejection),
                attempts,
                state: None,
                reminders: Vec::new(),
            },
            Handled::Unserializable(error) => Settled::failed(error, attempts),
        }
    }

    /// The state and reminder writes of a completed turn, within the limits.
    fn completion<A: Actor>(
        &self,
        state: &A,
        turn: &mut Turn<A>,
        result: &str,
        operation: &str,
    ) -> Result<(String, Vec<ReminderOp>)> {
        self.limits
            .check(Payload::Result, operation, result.len())?;
        let state = to_json("state", state)?;
        self.limits.check(Payload::State, operation, state.len())?;
        let mut changes = turn.take_reminders();
        let mut seen = std::collections::HashSet::new();
        changes.reverse();
        changes.retain(|change| {
            let (name, key) = change.alarm();
            seen.insert((name, key.to_owned()))
        });
        changes.reverse();
        let reminders = changes
            .into_iter()
            .map(|change| match change {
                ReminderChange::Schedule { key, at, message } => {
                    let encoded = encode_operation(&message)?;
                    let arguments = to_json("reminder arguments", &encoded.arguments)?;
                    self.limits
                        .check(Payload::Arguments, encoded.name, arguments.len())?;
                    Ok(ReminderOp::Upsert {
                        name: encoded.name,
                        key,
                        due_at: micros(at),
                        arguments,
                    })
                }
                ReminderChange::Cancel { name, key } => Ok(ReminderOp::Delete { name, key }),
            })
            .collect::<Result<_>>()?;
        Ok((state, reminders))
    }

    /// Turns every reminder due at the clock's now into a message at the tail of its actor's
    /// mailbox; returns how many fired.
    pub(crate) async fn fire_due_reminders(&self, limit: i64) -> Result<usize> {
        let mut tx = self.store.begin().await?;
        let now = micros(self.now());
        let due = tx.take_due_reminders(now, limit).await?;
        for reminder in &due {
            let key = ActorKey {
                actor_type: &reminder.actor_type,
                actor_id: &reminder.actor_id,
            };
            enqueue_in(&mut *tx, key, &reminder.name, &reminder.arguments, now).await?;
        }
        tx.commit().await?;
        if !due.is_empty() {
            self.wake();
        }
        Ok(due.len())
    }

    /// Runs up to `turns_per_actor` turns for each of up to `actors` actors with due
    /// messages whose types this runtime knows; returns how many turns ran.
    ///
    /// An actor whose turn fails with an error is logged and skipped for this pass.
    pub(crate) async fn run_ready(&self, actors: i64, turns_per_actor: usize) -> Result<usize> {
        let ready = self.store.ready_actors(micros(self.now()), actors).await?;
        let mut turns = 0;
        for (actor_type, actor_id) in ready {
            let Some(runner) = self.runner(&actor_type) else {
                tracing::warn!(
                    actor_type,
                    actor_id,
                    "a message waits for an actor type this runtime does not know; \
                     register it with Builder::actor::<T>() or create a reference to it"
                );
                continue;
            };
            for _ in 0..turns_per_actor {
                match runner.run_next(self, &actor_id).await {
                    Ok(Step::Ran(_)) => turns += 1,
                    Ok(Step::Idle | Step::Blocked { .. }) => break,
                    Err(error) => {
                        tracing::error!(actor_type, actor_id, %error, "a turn failed");
                        break;
                    }
                }
            }
        }
        Ok(turns)
    }
}

/// A call in progress: its actor, operation and deadline.
struct Call<'a> {
    key: ActorKey<'static, 'a>,
    operation: &'static str,
    timeout: Duration,
    deadline: Instant,
}

impl Call<'_> {
    fn timed_out(&self, sequence: Option<i64>, waiting_on: String) -> Error {
        Error::SyncTimeout {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            sequence,
            waiting_on,
            timeout: self.timeout,
        }
    }
}

impl Error {
    /// Adds the sequence of the enqueued message to a timeout that did not know it.
    fn with_sequence(self, sequence: i64) -> Self {
        match self {
            Self::SyncTimeout {
                actor_type,
                actor_id,
                operation,
                waiting_on,
                timeout,
                ..
            } => Self::SyncTimeout {
                actor_type,
                actor_id,
                operation,
                sequence: Some(sequence),
                waiting_on,
                timeout,
            },
            other => other,
        }
    }
}

/// What a turn commits, before the message row's fields are worked out.
struct Settled {
    kind: SettledKind,
    attempts: i64,
    state: Option<String>,
    reminders: Vec<ReminderOp>,
}

enum SettledKind {
    Completed(String),
    Rejected(Rejection),
    Failed(String),
}

impl Settled {
    fn failed(error: String, attempts: i64) -> Self {
        Self {
            kind: SettledKind::Failed(error),
            attempts,
            state: None,
            reminders: Vec::new(),
        }
    }

    /// The message row after this turn.
    fn progress(&self, now: DateTime<Utc>, retry: &RetryPolicy) -> MessageProgress<'_> {
        let now_us = micros(now);
        let finished = |status, result, last_error| MessageProgress {
            status,
            attempts: self.attempts,
            available_at: now_us,
            result,
            last_error,
            finished_at: Some(now_us),
        };
        match &self.kind {
            SettledKind::Completed(result) => {
                finished(MessageStatus::Completed, Some(result.as_str()), None)
            }
            SettledKind::Rejected(_) => finished(MessageStatus::Rejected, None, None),
            SettledKind::Failed(error) => match retry.next_attempt_at(now, self.attempts) {
                Some(at) => MessageProgress {
                    last_error: Some(error),
                    ..MessageProgress::ready(self.attempts, micros(at))
                },
                None => finished(MessageStatus::Dead, None, Some(error)),
            },
        }
    }

    fn into_outcome(self, available_at: i64, finished: bool) -> Outcome {
        let attempts = self.attempts;
        match self.kind {
            SettledKind::Completed(result) => Outcome::Completed(result),
            SettledKind::Rejected(rejection) => Outcome::Rejected(rejection),
            SettledKind::Failed(error) => Outcome::Failed {
                error,
                attempts,
                retry_at: (!finished).then(|| from_micros(available_at)),
            },
        }
    }
}

impl MessageProgress<'_> {
    /// A message that waits in the mailbox until `available_at`.
    pub(crate) fn ready(attempts: i64, available_at: i64) -> Self {
        Self {
            status: MessageStatus::Ready,
            attempts,
            available_at,
            result: None,
            last_error: None,
            finished_at: None,
        }
    }
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Self::Completed(_) => "completed",
            Self::Rejected(_) => "rejected",
            Self::Failed { retry_at: None, .. } => "dead",
            Self::Failed { .. } => "failed",
        }
    }

    /// The outcome of a message another task ran, if it ran.
    fn from_stored(stored: StoredOutcome) -> Option<Self> {
        match stored.status {
            MessageStatus::Completed => Some(Self::Completed(stored.result.unwrap_or_default())),
            MessageStatus::Rejected => {
                let rejection = stored
                    .result
                    .and_then(|json| serde_json::from_str(&json).ok())
                    .unwrap_or_else(|| Rejection::new("rejected", "the handler rejected it"));
                Some(Self::Rejected(rejection))
            }
            MessageStatus::Dead => Some(Self::Failed {
                error: stored.last_error.unwrap_or_default(),
                attempts: stored.attempts,
                retry_at: None,
            }),
            MessageStatus::Ready if stored.attempts > 0 => Some(Self::Failed {
                error: stored.last_error.unwrap_or_default(),
                attempts: stored.attempts,
                retry_at: Some(from_micros(stored.available_at)),
            }),
            MessageStatus::Ready => None,
        }
    }

    /// The caller's view: the result JSON, or the error.
    fn into_result(self, call: &Call<'_>) -> Result<String> {
        match self {
            Self::Completed(result) => Ok(result),
            Self::Rejected(rejection) => Err(Error::Rejected(rejection)),
            Self::Failed {
                error,
                attempts,
                retry_at,
            } => Err(Error::HandlerFailed {
                actor_type: call.key.actor_type,
                actor_id: call.key.actor_id.to_owned(),
                operation: call.operation,
                error,
                attempts,
                retry_at,
            }),
        }
    }
}

/// Appends a ready message to the actor's mailbox inside `tx`; returns its id.
async fn enqueue_in(
    tx: &mut dyn Transaction,
    key: ActorKey<'_, '_>,
    operation: &str,
    arguments: &str,
    now: i64,
) -> Result<i64> {
    let sequence = tx.allocate_sequence(key, now).await?;
    let request_id = uuid::Uuid::new_v4().to_string();
    tx.insert_message(
        key,
        &NewMessage {
            sequence,
            operation,
            arguments,
            request_id: &request_id,
            created_at: now,
            progress: MessageProgress::ready(0, now),
        },
    )
    .await
}

/// Runs the next message of an actor whose type is known only by its stored name.
#[async_trait]
trait MailboxRunner: Send + Sync {
    async fn run_next(&self, engine: &Engine, actor_id: &str) -> Result<Step>;
}

struct TypedRunner<A>(PhantomData<fn() -> A>);

#[async_trait]
impl<A: Actor> MailboxRunner for TypedRunner<A> {
    async fn run_next(&self, engine: &Engine, actor_id: &str) -> Result<Step> {
        engine.run_next::<A>(actor_id).await
    }
}

fn duplicate_check(known: &RegisteredActor, type_id: TypeId, name: &str) -> Result<()> {
    if known.type_id == type_id {
        Ok(())
    } else {
        Err(Error::DuplicateActorName {
            name: name.to_owned(),
        })
    }
}

/// The text of a caught panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    format!("the handler panicked: {text}")
}

/// Microseconds since the Unix epoch, as stored.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The time a stored microsecond count stands for.
pub(crate) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
