//! The paths a caller drives: synchronous calls, queries, snapshots and enqueues.
//!
//! Every wait here ends at the caller's deadline, and every wait inside the database is
//! bounded by it too (the store's transaction bounds), so a caller that gives up leaves
//! nothing waiting behind it. A future dropped at any `.await` leaves the database as it
//! was: the store's transactions clean up after themselves.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::time::Instant;

use super::failures::failed_progress;
use super::running::{Delivery, Uncommitted};
use super::{from_micros, micros, read_until, Engine, Lock, Outcome, Step};
use crate::actor::handled::Handled;
use crate::actor::operation_codec::decode_operation;
use crate::actor::reminder::ScheduledReminder;
use crate::actor::turn::{Missed, Turn, TurnFacts};
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::{
    ActorKey, Instance, MessageLookup, MessageProgress, MessageRecord, NewMessage, Transaction,
};

/// How often a caller waiting on another task's turn looks at its message again, at most.
const WAIT_POLL: Duration = Duration::from_millis(25);

/// The options of one synchronous call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallOptions<'a> {
    pub(crate) timeout: Duration,
    pub(crate) idempotency_key: Option<&'a str>,
}

/// The options of one enqueue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnqueueOptions<'a> {
    pub(crate) idempotency_key: Option<&'a str>,
    /// Not before this time (default: now, whatever the clock says later).
    pub(crate) available_at: Option<DateTime<Utc>>,
    /// How long the enqueue may wait for the database.
    pub(crate) timeout: Duration,
}

/// A message now in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct Enqueued {
    pub(crate) message_id: i64,
    pub(crate) request_id: String,
}

/// A call in progress: its actor, operation and deadline.
struct Call<'a> {
    key: ActorKey<'static, 'a>,
    operation: &'static str,
    timeout: Duration,
    deadline: Instant,
}

impl Call<'_> {
    /// What a caller whose deadline passed hears; `queued` is its message, if it was
    /// committed (it then still runs later, and the error names it).
    fn timed_out(&self, queued: Option<&Enqueued>, waiting_on: String) -> Error {
        Error::SyncTimeout {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            message_id: queued.map(|queued| queued.message_id),
            request_id: queued.map(|queued| Box::new(queued.request_id.clone())),
            waiting_on,
            timeout: self.timeout,
        }
    }

    /// What a caller that stopped waiting for its committed message hears: it is queued,
    /// named, and `reason` is why the call could not wait for it.
    fn queued(&self, queued: &Enqueued, reason: Error) -> Error {
        Error::Queued {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            message_id: queued.message_id,
            request_id: queued.request_id.clone(),
            reason: Box::new(reason),
        }
    }

    /// What a caller that found the database or the actor busy until its deadline hears.
    fn busy(&self, queued: Option<&Enqueued>) -> Error {
        self.timed_out(
            queued,
            "the actor or the database, which other turns (in this or another process) held \
             until the timeout"
                .to_owned(),
        )
    }

    /// What a caller hears when its turn joined a group commit whose outcome it could not
    /// learn by its deadline: the turn is kept if the group commits, and `request_id` finds
    /// its message then.
    fn in_doubt(&self, request_id: &str) -> Error {
        Error::SyncTimeout {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            message_id: None,
            request_id: Some(Box::new(request_id.to_owned())),
            waiting_on: "the group commit its turn joined, which had not ended; the turn is \
                         kept if that group commits"
                .to_owned(),
            timeout: self.timeout,
        }
    }

    fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The caller's view of an outcome; `request_id` is its message's (`None` for a query).
    fn result(&self, outcome: Outcome, request_id: Option<&str>) -> Result<String> {
        outcome.into_result(
            self.key.actor_type,
            self.key.actor_id,
            self.operation,
            request_id,
        )
    }
}

/// A synchronous call's fresh turn that failed outside its handler.
struct FreshFailure<'a> {
    /// The request id its message would have had, had the turn committed.
    request_id: &'a str,
    error: &'a str,
    retryable: bool,
}

/// What one try at a synchronous call came to.
enum Tried {
    /// The call has its answer.
    Answered(Result<String>),
    /// Its message is in the mailbox: run the mailbox until it has run.
    Queued(Enqueued),
    /// Another transaction got in the way: try again.
    Conflict,
    /// The turn ran past its group commit's budget: try again outside any group.
    OverBudget,
}

impl Engine {
    /// A synchronous call: enqueue the message and run turns until it has run.
    ///
    /// On an empty mailbox the enqueue, the turn and the completion share one transaction.
    /// With an idempotency key already used by this actor, it answers for that message.
    pub(crate) async fn call<A: Actor>(
        &self,
        actor_id: &str,
        message: A::Message,
        arguments: String,
        options: CallOptions<'_>,
    ) -> Result<String> {
        let started = Instant::now();
        let operation = message.name();
        let answer = self
            .call_until_answered::<A>(actor_id, message, arguments, options)
            .await;
        crate::metrics::call_duration(A::TYPE_NAME, operation, started.elapsed());
        answer
    }

    /// The answer to a synchronous call.
    async fn call_until_answered<A: Actor>(
        &self,
        actor_id: &str,
        message: A::Message,
        arguments: String,
        options: CallOptions<'_>,
    ) -> Result<String> {
        let call = Call {
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: message.name(),
            timeout: options.timeout,
            deadline: deadline_after(options.timeout),
        };
        let mut message = Some(message);
        let mut alone = false;
        loop {
            let next = match message.take() {
                Some(message) => message,
                None => decode_operation::<A::Message>(
                    call.key.actor_type,
                    actor_id,
                    call.operation,
                    &arguments,
                    0,
                )?,
            };
            match self
                .try_call::<A>(&call, next, &arguments, options, alone)
                .await
            {
                Ok(Tried::Answered(answer)) => return answer,
                Ok(Tried::Queued(queued)) => {
                    return self.run_until_done::<A>(&call, &queued).await;
                }
                Ok(Tried::OverBudget) => alone = true,
                Ok(Tried::Conflict) if !call.past_deadline() => {}
                Ok(Tried::Conflict) => return Err(call.busy(None)),
                Err(error) if error.is_busy() => return Err(call.busy(None)),
                Err(error) if error.is_conflict() && !call.past_deadline() => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// One try at a synchronous call.
    async fn try_call<A: Actor>(
        &self,
        call: &Call<'_>,
        message: A::Message,
        arguments: &str,
        options: CallOptions<'_>,
        alone: bool,
    ) -> Result<Tried> {
        let mut tx = self.begin_turn(Some(call.deadline), alone).await?;
        // Holding the actor's lock before the idempotency check makes two calls with one key
        // take turns, across processes.
        let Some(locked) = tx.lock_actor(call.key, true, micros(self.now())).await? else {
            return Err(call.busy(None));
        };
        // A message already committed under the call's key is looked up first: if it is
        // queued, waiting for it hears the pause as Queued, naming it.
        if let Some(key) = options.idempotency_key {
            let lookup = MessageLookup::IdempotencyKey(call.key, key);
            if let Some(existing) = tx.message(lookup).await? {
                Self::release(tx).await;
                same_request(&existing, call.operation, arguments, key)?;
                return Ok(match Outcome::from_record(&existing) {
                    Some(outcome) => {
                        Tried::Answered(call.result(outcome, Some(&existing.request_id)))
                    }
                    None => Tried::Queued(Enqueued {
                        message_id: existing.id,
                        request_id: existing.request_id,
                    }),
                });
            }
        }
        if locked.instance.paused {
            Self::release(tx).await;
            return Err(paused(call.key));
        }
        if locked.head.is_some() {
            let enqueued = self
                .insert_ready(
                    &mut *tx,
                    call.key,
                    call.operation,
                    arguments,
                    options.idempotency_key,
                    Origin::now(),
                )
                .await?;
            if let Err(error) = tx.commit().await {
                return match error {
                    Error::GroupCommitFailed { .. } => Err(call.in_doubt(&enqueued.request_id)),
                    error => Err(error),
                };
            }
            self.wake();
            crate::metrics::enqueued(call.key.actor_type, call.operation, 1);
            return Ok(Tried::Queued(enqueued));
        }
        // A state that no longer decodes is the caller's error, and nothing is written.
        let state = self.decode_state::<A>(call.key, &locked.instance)?;
        let request_id = crate::engine::new_request_id();
        let delivery = Delivery::Fresh {
            message,
            arguments,
            request_id: &request_id,
            idempotency_key: options.idempotency_key,
        };
        let instance = locked.instance;
        let ran = self
            .run_turn::<A>(
                tx,
                call.key,
                &instance,
                state,
                delivery,
                Some(call.deadline),
            )
            .await;
        Ok(match ran {
            Ok(report) => Tried::Answered(call.result(report.outcome, Some(&request_id))),
            Err(Uncommitted::Conflict(_)) => Tried::Conflict,
            Err(Uncommitted::OverBudget) => Tried::OverBudget,
            Err(Uncommitted::InDoubt) => {
                // Its group either closed its connection after a failed COMMIT (then no
                // commit of it can land any more), or had not committed by the caller's
                // deadline and may still commit: a message row found now answers; none found
                // before the deadline (when only a closed connection ends a group in doubt)
                // means the turn was not kept and runs again, and none found after it is no
                // proof that none will be.
                let committed = self.store.message(MessageLookup::RequestId(&request_id));
                match read_until(call.deadline, committed)
                    .await
                    .ok()
                    .flatten()
                    .as_ref()
                    .and_then(Outcome::from_record)
                {
                    Some(outcome) => Tried::Answered(call.result(outcome, Some(&request_id))),
                    None if !call.past_deadline() => Tried::Conflict,
                    None => Tried::Answered(Err(call.in_doubt(&request_id))),
                }
            }
            Err(Uncommitted::Abandoned) => Tried::Answered(Err(call.timed_out(
                None,
                "its own turn, whose handler was still running at the timeout (nothing of it \
                 was kept)"
                    .to_owned(),
            ))),
            Err(Uncommitted::Failed { error, retryable }) => {
                let failure = FreshFailure {
                    request_id: &request_id,
                    error: &error,
                    retryable,
                };
                let outcome = self
                    .record_fresh_failure::<A>(call, arguments, options, failure)
                    .await?;
                Tried::Answered(call.result(outcome, Some(&request_id)))
            }
        })
    }

    /// Stores the message of a synchronous call whose turn failed outside its handler, as
    /// a failed first attempt: it retries (or is dead) like any other. If the turn did
    /// commit (its commit's answer was lost), its message answers instead: it never runs
    /// twice.
    async fn record_fresh_failure<A: Actor>(
        &self,
        call: &Call<'_>,
        arguments: &str,
        options: CallOptions<'_>,
        failure: FreshFailure<'_>,
    ) -> Result<Outcome> {
        let FreshFailure {
            request_id,
            error,
            retryable,
        } = failure;
        let committed = self.store.message(MessageLookup::RequestId(request_id));
        if let Some(record) = read_until(call.deadline, committed).await? {
            if let Some(outcome) = Outcome::from_record(&record) {
                return Ok(outcome);
            }
        }
        let now = self.now();
        let progress = failed_progress(
            now,
            1,
            self.max_attempts::<A>(),
            retryable,
            error,
            &self.config.retry,
        );
        // The same request id as the turn's: if that turn's commit lands after all, this
        // insert conflicts with it, and the committed message answers.
        let message = NewMessage {
            operation: call.operation,
            arguments,
            request_id,
            idempotency_key: options.idempotency_key,
            created_at: micros(now),
            progress,
            incarnation: None,
            scheduled_for: None,
        };
        let inserted = async {
            let mut tx = self.begin(None).await?;
            tx.insert_message(call.key, &message).await?;
            tx.commit().await
        };
        match inserted.await {
            Err(error) if error.is_conflict() => {
                let committed = self.store.message(MessageLookup::RequestId(request_id));
                if let Some(outcome) = read_until(call.deadline, committed)
                    .await?
                    .as_ref()
                    .and_then(Outcome::from_record)
                {
                    return Ok(outcome);
                }
                return Err(error);
            }
            inserted => inserted?,
        }
        self.wake();
        let retry_at = progress
            .finished_at
            .is_none()
            .then(|| from_micros(progress.available_at));
        let outcome = Outcome::Failed {
            error: error.to_owned(),
            attempts: 1,
            retry_at,
        };
        crate::metrics::enqueued(call.key.actor_type, call.operation, 1);
        outcome.record(call.key.actor_type, call.operation);
        Ok(outcome)
    }

    /// Runs the actor's turns until the call's committed message `queued` has run, or the
    /// call's deadline passes.
    ///
    /// The message is committed, so every error but its own outcome names it: a caller
    /// whose deadline passes hears what it waited on when it last looked, if it looked;
    /// any other error (a state this build cannot read yet, an earlier message it does not
    /// know, a pause, a database error) comes as [`Error::Queued`].
    async fn run_until_done<A: Actor>(&self, call: &Call<'_>, queued: &Enqueued) -> Result<String> {
        let mut waiting_on = None;
        let ran = self
            .wait_until_done::<A>(call, queued, &mut waiting_on)
            .await;
        match ran {
            Ok(outcome) => call.result(outcome, Some(&queued.request_id)),
            Err(error) if error.is_busy() => Err(match waiting_on {
                Some(waiting_on) => call.timed_out(Some(queued), waiting_on),
                None => call.busy(Some(queued)),
            }),
            Err(error @ Error::SyncTimeout { .. }) => Err(error),
            Err(reason) => Err(call.queued(queued, reason)),
        }
    }

    /// The loop of [`Self::run_until_done`], to the message's outcome; `waiting_on` keeps
    /// what the message waited on at its last look.
    async fn wait_until_done<A: Actor>(
        &self,
        call: &Call<'_>,
        queued: &Enqueued,
        waiting_on: &mut Option<String>,
    ) -> Result<Outcome> {
        let message_id = queued.message_id;
        loop {
            let step = match self
                .run_next::<A>(call.key.actor_id, Lock::WaitUntil(call.deadline))
                .await?
            {
                Step::Ran(report) if report.message_id == message_id => {
                    return Ok(report.outcome);
                }
                Step::Ran(_) => continue,
                waiting => waiting,
            };
            let waiting = waiting_on.insert(step.waiting_on(message_id));
            let lookup = self.store.message(MessageLookup::Id(message_id));
            if let Some(record) = read_until(call.deadline, lookup).await? {
                if let Some(outcome) = Outcome::from_record(&record) {
                    return Ok(outcome);
                }
            }
            let pause = WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
            self.wait_for_work(pause).await;
            if call.past_deadline() {
                return Err(call.timed_out(Some(queued), waiting.clone()));
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
        let started = Instant::now();
        let operation = query.name();
        let answer = self.ask_until_answered::<A>(actor_id, query, timeout).await;
        crate::metrics::call_duration(A::TYPE_NAME, operation, started.elapsed());
        answer
    }

    /// The answer to an ordered read.
    async fn ask_until_answered<A: Actor>(
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
            deadline: deadline_after(timeout),
        };
        let mut drained = false;
        loop {
            let committed = match read_until(
                call.deadline,
                self.store.read_actor(call.key, micros(self.now())),
            )
            .await
            {
                Err(error) if error.is_busy() => return Err(call.busy(None)),
                read => read?,
            };
            let instance = committed.instance.unwrap_or_default();
            if instance.paused {
                return Err(paused(call.key));
            }
            if committed.mailbox_empty || drained {
                return self.answer::<A>(&call, &instance, query).await;
            }
            let step = self
                .run_next::<A>(actor_id, Lock::WaitUntil(call.deadline))
                .await?;
            match step {
                Step::Ran(_) => {}
                Step::Idle => drained = true,
                Step::Busy if call.past_deadline() => return Err(call.busy(None)),
                Step::Busy => self.wait_for_work(WAIT_POLL).await,
                Step::Blocked {
                    message_id, until, ..
                } => {
                    let pause =
                        WAIT_POLL.min(call.deadline.saturating_duration_since(Instant::now()));
                    self.wait_for_work(pause).await;
                    if call.past_deadline() {
                        let waiting_on = format!("message {message_id}, not due until {until}");
                        return Err(call.timed_out(None, waiting_on));
                    }
                }
            }
        }
    }

    /// Answers a query from the committed state, within the turn timeout and the caller's
    /// deadline.
    async fn answer<A: Actor>(
        &self,
        call: &Call<'_>,
        instance: &Instance,
        query: A::Query,
    ) -> Result<String> {
        let state: A = self.decode_state(call.key, instance)?;
        let turn = Turn::<A>::new(TurnFacts {
            actor_id: call.key.actor_id,
            now: self.now(),
            message_id: None,
            attempt: 1,
            incarnation: instance.incarnation,
            scheduled_at: None,
        });
        let deadline = call.deadline.min(deadline_after(self.config.turn_timeout));
        let answering = crate::actor::handler_scope::as_handler(
            call.key.actor_type,
            call.key.actor_id,
            AssertUnwindSafe(state.answer(&turn, query)).catch_unwind(),
        );
        let handled = match tokio::time::timeout_at(deadline, answering).await {
            Ok(Ok(handled)) => handled,
            Ok(Err(panic)) => Handled::panicked(&*panic),
            Err(_) => {
                return Err(call.timed_out(None, "the query's handler, still running".to_owned()))
            }
        };
        let outcome = match handled {
            Handled::Value(value) => Outcome::Completed(value),
            Handled::Rejected(rejection) => Outcome::Rejected(rejection),
            Handled::Failed { error, .. } | Handled::Transient(error) => Outcome::Failed {
                error,
                attempts: 1,
                retry_at: None,
            },
        };
        call.result(outcome, None)
    }

    /// Destroys an actor: waits for its lock (a turn elsewhere finishes first), deletes its
    /// reminders, ends its unfinished messages as destroyed, and starts its next incarnation
    /// from no state.
    pub(crate) async fn destroy(&self, key: ActorKey<'_, '_>, timeout: Duration) -> Result<()> {
        let deadline = deadline_after(timeout);
        let mut tx = self.begin(Some(deadline)).await?;
        let locked = tx.lock_actor(key, true, micros(self.now())).await?;
        if locked.is_some_and(|locked| locked.instance.paused) {
            Self::release(tx).await;
            return Err(paused(key));
        }
        tx.destroy_actor(key, micros(self.now())).await?;
        tx.commit().await?;
        self.wake();
        self.state_committed(key);
        Ok(())
    }

    /// The actor's committed state, without a message; the default state if it has none.
    pub(crate) async fn snapshot<A: Actor>(&self, actor_id: &str) -> Result<A> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let committed = self.store.read_actor(key, micros(self.now())).await?;
        self.decode_state(key, &committed.instance.unwrap_or_default())
    }

    /// The actor's scheduled reminders, the next due first.
    pub(crate) async fn reminders(&self, key: ActorKey<'_, '_>) -> Result<Vec<ScheduledReminder>> {
        let stored = self.store.reminders(key).await?;
        Ok(stored
            .into_iter()
            .map(|reminder| ScheduledReminder {
                due_at: from_micros(reminder.due_at),
                every: reminder
                    .every
                    .and_then(|every| u64::try_from(every).ok())
                    .map(std::time::Duration::from_micros),
                missed: reminder
                    .every
                    .map(|_| Missed::parse(reminder.missed.as_deref())),
                name: reminder.name,
                key: reminder.key,
            })
            .collect())
    }

    /// Appends a message to the tail of the actor's mailbox without running it or taking
    /// the actor's lock. With an idempotency key this actor already used, returns that
    /// message instead (an operator's retry of a dead letter takes its key over).
    pub(crate) async fn enqueue(
        &self,
        key: ActorKey<'_, '_>,
        operation: &str,
        arguments: &str,
        options: EnqueueOptions<'_>,
    ) -> Result<Enqueued> {
        let deadline = deadline_after(options.timeout);
        loop {
            match self
                .try_enqueue(key, operation, arguments, options, deadline)
                .await
            {
                Err(error) if error.is_conflict() && Instant::now() < deadline => {}
                done => return done,
            }
        }
    }

    async fn try_enqueue(
        &self,
        key: ActorKey<'_, '_>,
        operation: &str,
        arguments: &str,
        options: EnqueueOptions<'_>,
        deadline: Instant,
    ) -> Result<Enqueued> {
        let mut tx = self.begin(Some(deadline)).await?;
        if tx.is_paused(key).await? {
            Self::release(tx).await;
            return Err(paused(key));
        }
        if let Some(idempotency_key) = options.idempotency_key {
            let lookup = MessageLookup::IdempotencyKey(key, idempotency_key);
            if let Some(existing) = tx.message(lookup).await? {
                Self::release(tx).await;
                same_request(&existing, operation, arguments, idempotency_key)?;
                return Ok(Enqueued {
                    message_id: existing.id,
                    request_id: existing.request_id,
                });
            }
        }
        let available_at = match options.available_at {
            Some(at) if at > self.now() => micros(at),
            _ => 0,
        };
        let enqueued = self
            .insert_ready(
                &mut *tx,
                key,
                operation,
                arguments,
                options.idempotency_key,
                Origin {
                    available_at,
                    ..Origin::now()
                },
            )
            .await?;
        tx.commit().await?;
        self.wake();
        crate::metrics::enqueued(key.actor_type, operation, 1);
        Ok(enqueued)
    }

    /// Inserts a ready message at the tail of the mailbox, within the mailbox limit.
    pub(super) async fn insert_ready(
        &self,
        tx: &mut dyn Transaction,
        key: ActorKey<'_, '_>,
        operation: &str,
        arguments: &str,
        idempotency_key: Option<&str>,
        origin: Origin,
    ) -> Result<Enqueued> {
        let limit = self.config.limits.max_unfinished;
        if tx.count_ready(key, limit).await? >= limit {
            return Err(Error::MailboxFull {
                actor_type: key.actor_type.to_owned(),
                actor_id: key.actor_id.to_owned(),
                limit,
            });
        }
        let request_id = crate::engine::new_request_id();
        let message_id = tx
            .insert_message(
                key,
                &NewMessage {
                    operation,
                    arguments,
                    request_id: &request_id,
                    idempotency_key,
                    created_at: micros(self.now()),
                    progress: MessageProgress::ready(0, origin.available_at),
                    incarnation: origin.incarnation,
                    scheduled_for: origin.scheduled_for,
                },
            )
            .await?;
        Ok(Enqueued {
            message_id,
            request_id,
        })
    }
}

/// When a message enqueued at the tail may run, and what it keeps of an earlier message
/// (an operator's retry of a dead letter keeps a fired reminder's incarnation and time).
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    /// Not before this time (microseconds; 0: now).
    pub(super) available_at: i64,
    pub(super) incarnation: Option<i64>,
    pub(super) scheduled_for: Option<i64>,
}

impl Origin {
    /// A new message, due now, of whichever incarnation is current.
    pub(super) fn now() -> Self {
        Self {
            available_at: 0,
            incarnation: None,
            scheduled_for: None,
        }
    }
}

/// An idempotency key answers only for the same operation with the same arguments.
/// The error a call on a paused actor gets.
pub(super) fn paused(key: ActorKey<'_, '_>) -> Error {
    Error::Paused {
        actor_type: key.actor_type.to_owned(),
        actor_id: key.actor_id.to_owned(),
    }
}

fn same_request(
    existing: &MessageRecord,
    operation: &str,
    arguments: &str,
    key: &str,
) -> Result<()> {
    if existing.operation == operation && existing.arguments == arguments {
        Ok(())
    } else {
        Err(Error::IdempotencyConflict {
            key: key.to_owned(),
            existing_operation: existing.operation.clone(),
        })
    }
}
