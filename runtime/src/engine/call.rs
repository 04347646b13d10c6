//! The paths a caller drives: synchronous calls, queries, snapshots and enqueues.
//!
//! Every wait here ends at the caller's deadline, and every wait inside the database is
//! bounded by it too (the store's transaction bounds), so a caller that gives up leaves
//! nothing waiting behind it. A future dropped at any `.await` leaves the database as it
//! was: the store's transactions clean up after themselves.

use std::time::Duration;

use tokio::time::Instant;

use super::core::Core;
use super::groups::Groups;
use super::one_turn::{Delivery, Lead, Turns, Waiter};
use super::settle::failed_progress;
use super::state_cache::{decode_locked, Held};
use super::tail::{insert_ready, same_request, Enqueued, Origin};
use super::written::Uncommitted;
use super::{from_micros, micros, paused, read_until, Lock, Outcome, Step, TurnReport, WAIT_POLL};
use crate::actor::operation_codec::decode_operation;
use crate::actor::{Actor, Operations};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::store::{
    ActorKey, ActorLock, LockWait, MessageLookup, MessageRecord, NewMessage, Transaction,
};
use crate::trace_context::TraceContext;

/// How long past the caller's deadline the failure of its turn may take to be recorded.
const RECORD_FAILURE_WITHIN: Duration = Duration::from_secs(1);

/// The options of one synchronous call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallOptions<'a> {
    pub(crate) timeout: Duration,
    pub(crate) idempotency_key: Option<&'a str>,
}

/// A call in progress: its actor, operation and deadline.
pub(super) struct Call<'a> {
    pub(super) turns: Turns<'a>,
    /// The groups this call may join or lead.
    pub(super) groups: &'a Groups,
    pub(super) key: ActorKey<'static, 'a>,
    pub(super) operation: &'static str,
    pub(super) timeout: Duration,
    pub(super) deadline: Instant,
    /// The caller's trace context, which the call's message is stored with and its turn
    /// continues (none for a query, which stores no message).
    pub(super) trace: TraceContext,
}

impl Call<'_> {
    /// What a caller whose deadline passed hears; `queued` is its message, if it was
    /// committed (it then still runs later, and the error names it).
    pub(super) fn timed_out(&self, queued: Option<&Enqueued>, waiting_on: String) -> Error {
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
    pub(super) fn busy(&self, queued: Option<&Enqueued>) -> Error {
        self.timed_out(
            queued,
            "the actor or the database, which other turns (in this or another process) held \
             until the timeout"
                .to_owned(),
        )
    }

    /// What a caller hears when its turn may have committed and it could not learn whether
    /// by its deadline (its group commit had not ended, or its connection was lost at
    /// `COMMIT`): `request_id` finds its message if it was kept.
    pub(super) fn in_doubt(&self, request_id: &str) -> Error {
        Error::SyncTimeout {
            actor_type: self.key.actor_type,
            actor_id: self.key.actor_id.to_owned(),
            operation: self.operation,
            message_id: None,
            request_id: Some(Box::new(request_id.to_owned())),
            waiting_on: "the database, to learn whether its turn committed (its group commit \
                         had not ended, or its connection was lost at COMMIT); the turn is kept \
                         if it did"
                .to_owned(),
            timeout: self.timeout,
        }
    }

    /// What a caller hears for `error` when its turn may have committed (`request_id`): an
    /// unavailable database names the message, and so does any other end of the call.
    fn unresolved(&self, error: Error, request_id: &str) -> Error {
        match error {
            error @ Error::DatabaseUnavailable { .. } => error.in_doubt_of(request_id),
            _ => self.in_doubt(request_id),
        }
    }

    pub(super) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The caller's view of an outcome; `request_id` is its message's (`None` for a query).
    pub(super) fn result(&self, outcome: Outcome, request_id: Option<&str>) -> Result<String> {
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
pub(super) enum Tried {
    /// The call has its answer.
    Answered(Result<String>),
    /// Its message is in the mailbox: run the mailbox until it has run.
    Queued(Enqueued),
    /// Another transaction got in the way: try again.
    Conflict,
    /// The turn ran past its group commit's budget: try again outside any group.
    OverBudget,
    /// Its commit may have landed (the connection was lost at `COMMIT`, or its group commit
    /// ended in doubt): the next try looks its message up first.
    InDoubt,
    /// The group it joined sent it back: try again in a transaction of its own.
    Ungrouped,
}

/// How a try at a synchronous call runs.
pub(super) struct Attempt<'a> {
    /// The request id of the call's message, the same on every try.
    pub(super) request_id: &'a str,
    /// Outside any group commit (a try ran past its group's budget).
    pub(super) alone: bool,
    /// An earlier try may have committed: look its message up before running anything.
    pub(super) in_doubt: bool,
    /// In a transaction of its own, joining no other call's ([`groups`](super::groups)).
    pub(super) ungrouped: bool,
}

/// The calls job: synchronous calls (here), ordered reads and snapshots (`ask.rs`) and
/// enqueues (`enqueue.rs`). It runs its turns through the turns job.
#[derive(Clone, Copy)]
pub(crate) struct Calls<'e> {
    turns: Turns<'e>,
    groups: &'e Groups,
}

impl<'e> Calls<'e> {
    /// The calls job, running its turns through `turns`, in the `groups` of calls that share
    /// a transaction.
    pub(super) fn new(turns: Turns<'e>, groups: &'e Groups) -> Self {
        Self { turns, groups }
    }

    /// The groups of calls whose turns share a transaction.
    pub(super) fn groups(&self) -> &'e Groups {
        self.groups
    }

    /// The core this job works through.
    pub(super) fn core(&self) -> &'e Core {
        self.turns.core()
    }

    /// The turns job this job runs its turns through.
    pub(super) fn turns(&self) -> Turns<'e> {
        self.turns
    }

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
            turns: self.turns,
            groups: self.groups,
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation: message.name(),
            timeout: options.timeout,
            deadline: deadline_after(options.timeout),
            trace: TraceContext::current(),
        };
        let mut message = Some(message);
        let request_id = crate::ids::new_request_id();
        let mut attempt = Attempt {
            request_id: &request_id,
            alone: false,
            in_doubt: false,
            ungrouped: false,
        };
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
            let tried = call
                .try_grouped::<A>(next, &arguments, options, &mut attempt)
                .await;
            let error = match tried {
                Ok(Tried::Answered(answer)) => return answer,
                Ok(Tried::Queued(queued)) => return call.run_until_done::<A>(&queued).await,
                Ok(Tried::OverBudget) => {
                    attempt.alone = true;
                    continue;
                }
                Ok(Tried::Ungrouped) => {
                    attempt.ungrouped = true;
                    continue;
                }
                Ok(Tried::InDoubt) => {
                    #[cfg(feature = "simulation")]
                    if crate::simulation::reintroduced(
                        crate::simulation::Defect::LostCommitReportedAsFailed,
                    ) {
                        return Err(Error::DatabaseUnavailable {
                            backend: "SQLite",
                            hosts: "the simulation's file".to_owned(),
                            reason: "the connection was lost at COMMIT".to_owned(),
                            waited: Duration::ZERO,
                            request_id: None,
                        });
                    }
                    attempt.in_doubt = true;
                    continue;
                }
                Ok(Tried::Conflict) if !call.past_deadline() => continue,
                Ok(Tried::Conflict) => call.busy(None),
                // A connection lost before anything was committed (a commit whose answer
                // was lost comes as InDoubt): the next try waits for the database to accept
                // writes again, until the deadline; past it, the caller hears that the
                // database is unavailable, or, if it is back, that the call ran out of time.
                Err(error) if error.is_connection_lost() => {
                    match self.core().store().reconnect(call.deadline).await {
                        Ok(()) if !call.past_deadline() => continue,
                        Ok(()) => call.busy(None),
                        Err(unavailable) => unavailable,
                    }
                }
                Err(error) if error.is_busy() => call.busy(None),
                Err(error) if error.is_conflict() && !call.past_deadline() => continue,
                // A conflict rolled the try back (a deadlock, or a Galera cluster's
                // certification picking another node's turn): past the deadline the caller
                // hears the timeout, as for any other wait that ran out.
                Err(error) if error.is_conflict() => call.busy(None),
                Err(error) => error,
            };
            return Err(match attempt.in_doubt {
                true => call.unresolved(error, &request_id),
                false => error,
            });
        }
    }
}

impl Call<'_> {
    /// One try at a synchronous call in a transaction of its own, which takes in the calls
    /// of the group it `leads`, if it leads one.
    pub(super) async fn try_call<A: Actor>(
        &self,
        message: A::Message,
        arguments: &str,
        options: CallOptions<'_>,
        attempt: &mut Attempt<'_>,
        leads: Option<&mut dyn Lead>,
    ) -> Result<Tried> {
        let mut tx = self
            .turns
            .core()
            .begin_turn(Some(self.deadline), attempt.alone)
            .await?;
        // Holding the actor's lock before the idempotency check makes two calls with one key
        // take turns, across processes.
        let held = self.turns.states().held(self.key);
        let known = held.as_ref().map(Held::version);
        let locked = tx
            .lock_actor(ActorLock {
                actor: self.key,
                wait: LockWait::Wait,
                now: micros(self.turns.core().now()),
                known,
            })
            .await;
        let Some(locked) = (match locked {
            // The wait for the actor is bounded by the turn timeout too: a caller whose
            // deadline is further waits again (nothing was written yet).
            Err(error) if error.is_busy() && !self.past_deadline() => return Ok(Tried::Conflict),
            locked => locked?,
        }) else {
            return Err(self.busy(None));
        };
        // A try after one that may have committed looks its message up first, under the
        // actor's lock: a transaction still committing it held that lock until it ended.
        if attempt.in_doubt {
            let lookup = MessageLookup::RequestId(attempt.request_id);
            if let Some(existing) = tx.message(lookup).await? {
                Core::release(tx).await;
                return Ok(self.answer_from(existing));
            }
            attempt.in_doubt = false;
        }
        // A message already committed under the call's key is looked up first: if it is
        // queued, waiting for it hears the pause as Queued, naming it.
        let looked_up = options.idempotency_key;
        #[cfg(feature = "simulation")]
        let looked_up = looked_up.filter(|_| {
            !crate::simulation::reintroduced(crate::simulation::Defect::KeyedCallNotLookedUp)
        });
        if let Some(key) = looked_up {
            let lookup = MessageLookup::IdempotencyKey(self.key, key);
            if let Some(existing) = tx.message(lookup).await? {
                Core::release(tx).await;
                same_request(&existing, self.operation, arguments, key)?;
                return Ok(self.answer_from(existing));
            }
        }
        if locked.instance.paused {
            Core::release(tx).await;
            return Err(paused(self.key));
        }
        if locked.head.is_some() {
            return self
                .enqueue_behind(tx, arguments, options, attempt.request_id)
                .await;
        }
        // A state that no longer decodes is the caller's error, and nothing is written.
        let held_state = self.turns.states().locked(self.key, held, &locked.instance);
        let state = decode_locked::<A>(self.key, &locked.instance, held_state)?;
        let request_id = attempt.request_id;
        let delivery = Delivery::Fresh {
            message,
            arguments,
            request_id,
            idempotency_key: options.idempotency_key,
            trace: self.trace,
        };
        let instance = locked.instance;
        let ran = self
            .turns
            .run_turn::<A>(
                tx,
                self.key,
                &instance,
                state,
                delivery,
                Waiter {
                    deadline: Some(self.deadline),
                    leads,
                },
            )
            .await;
        self.fresh_turn_ended::<A>(arguments, options, request_id, ran)
            .await
    }

    /// What a message already committed for the call comes to: its outcome, or, while it is
    /// queued, a wait for it.
    pub(super) fn answer_from(&self, existing: MessageRecord) -> Tried {
        match Outcome::from_record(&existing) {
            Some(outcome) => Tried::Answered(self.result(outcome, Some(&existing.request_id))),
            None => Tried::Queued(Enqueued {
                message_id: existing.id,
                request_id: existing.request_id,
            }),
        }
    }

    /// Enqueues a call's message behind the earlier ones in its actor's mailbox, in the
    /// transaction that holds the actor's lock; the call then waits for it to run.
    async fn enqueue_behind(
        &self,
        mut tx: Box<dyn Transaction>,
        arguments: &str,
        options: CallOptions<'_>,
        request_id: &str,
    ) -> Result<Tried> {
        let enqueued = insert_ready(
            self.turns.core(),
            &mut *tx,
            self.key,
            self.operation,
            arguments,
            options.idempotency_key,
            Origin {
                request_id: Some(request_id),
                trace: self.trace,
                ..Origin::now()
            },
        )
        .await?;
        if let Err(error) = tx.commit().await {
            return match error {
                // The message may be in the mailbox: the next try looks it up.
                Error::GroupCommitFailed { .. } => Ok(Tried::InDoubt),
                error if error.is_connection_lost() => Ok(Tried::InDoubt),
                error => Err(error),
            };
        }
        self.turns.core().wake();
        crate::metrics::enqueued(self.key.actor_type, self.operation, 1);
        Ok(Tried::Queued(enqueued))
    }

    /// What a synchronous call's fresh turn that ended uncommitted, or committed, comes to.
    async fn fresh_turn_ended<A: Actor>(
        &self,
        arguments: &str,
        options: CallOptions<'_>,
        request_id: &str,
        ran: std::result::Result<TurnReport, Uncommitted>,
    ) -> Result<Tried> {
        Ok(match ran {
            Ok(report) => Tried::Answered(self.result(report.outcome, Some(request_id))),
            Err(Uncommitted::Conflict(_)) => Tried::Conflict,
            Err(Uncommitted::OverBudget) => Tried::OverBudget,
            Err(Uncommitted::InDoubt) => Tried::InDoubt,
            Err(Uncommitted::Abandoned) => Tried::Answered(Err(self.timed_out(
                None,
                "its own turn, which was still running at the timeout (nothing of it \
                 was kept)"
                    .to_owned(),
            ))),
            Err(Uncommitted::Failed { error, retryable }) => {
                let failure = FreshFailure {
                    request_id,
                    error: &error,
                    retryable,
                };
                match self
                    .record_fresh_failure::<A>(arguments, options, failure)
                    .await
                {
                    Ok(outcome) => Tried::Answered(self.result(outcome, Some(request_id))),
                    // The failure's record may have committed: the next try looks it up.
                    Err(error) if error.is_connection_lost() => Tried::InDoubt,
                    Err(error) => return Err(error),
                }
            }
        })
    }

    /// The outcome of the message `lookup` finds, read by the call's deadline: `None` while
    /// it has none (it has not run, or it waits for a retry).
    async fn outcome_of(&self, lookup: MessageLookup<'_>) -> Result<Option<Outcome>> {
        let record = self.turns.core().store().message(lookup);
        let record = read_until(self.deadline, record).await?;
        Ok(record.as_ref().and_then(Outcome::from_record))
    }

    /// Stores the message of a synchronous call whose turn failed outside its handler, as
    /// a failed first attempt: it retries (or is dead) like any other. If the turn did
    /// commit (its commit's answer was lost), its message answers instead: it never runs
    /// twice.
    async fn record_fresh_failure<A: Actor>(
        &self,
        arguments: &str,
        options: CallOptions<'_>,
        failure: FreshFailure<'_>,
    ) -> Result<Outcome> {
        let FreshFailure {
            request_id,
            error,
            retryable,
        } = failure;
        if let Some(outcome) = self
            .outcome_of(MessageLookup::RequestId(request_id))
            .await?
        {
            return Ok(outcome);
        }
        let now = self.turns.core().now();
        let progress = failed_progress(
            now,
            1,
            self.turns.max_attempts::<A>(),
            retryable,
            error,
            &self.turns.core().config().retry,
        );
        // The same request id as the turn's: if that turn's commit lands after all, this
        // insert conflicts with it, and the committed message answers.
        let message = NewMessage {
            operation: self.operation,
            arguments,
            request_id,
            idempotency_key: options.idempotency_key,
            created_at: micros(now),
            progress,
            incarnation: None,
            scheduled_for: None,
            trace: self.trace,
        };
        let inserted = async {
            // The failure is recorded even if the handler used up the caller's time, but a
            // database that is away (a failover) holds the caller no longer than that.
            let within = self.deadline.max(Instant::now() + RECORD_FAILURE_WITHIN);
            let mut tx = self.turns.core().begin(Some(within)).await?;
            tx.insert_message(self.key, &message).await?;
            tx.commit().await
        };
        match inserted.await {
            Err(error) if error.is_conflict() => {
                let committed = self
                    .turns
                    .core()
                    .store()
                    .message(MessageLookup::RequestId(request_id));
                if let Some(outcome) = read_until(self.deadline, committed)
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
        self.turns.core().wake();
        let retry_at = progress
            .finished_at
            .is_none()
            .then(|| from_micros(progress.available_at));
        let outcome = Outcome::Failed {
            error: error.to_owned(),
            attempts: 1,
            retry_at,
        };
        crate::metrics::enqueued(self.key.actor_type, self.operation, 1);
        outcome.record(self.key.actor_type, self.operation);
        Ok(outcome)
    }

    /// Runs the actor's turns until the call's committed message `queued` has run, or the
    /// call's deadline passes.
    ///
    /// The message is committed, so every error but its own outcome names it: a caller
    /// whose deadline passes hears what it waited on when it last looked, if it looked;
    /// any other error (a state this build cannot read yet, an earlier message it does not
    /// know, a pause, a database error) comes as [`Error::Queued`].
    async fn run_until_done<A: Actor>(&self, queued: &Enqueued) -> Result<String> {
        let mut waiting_on = None;
        let ran = self.wait_until_done::<A>(queued, &mut waiting_on).await;
        match ran {
            Ok(outcome) => self.result(outcome, Some(&queued.request_id)),
            Err(error) if error.is_busy() => Err(match waiting_on {
                Some(waiting_on) => self.timed_out(Some(queued), waiting_on),
                None => self.busy(Some(queued)),
            }),
            Err(error @ Error::SyncTimeout { .. }) => Err(error),
            // The message is committed: the database that went away is what the call waited
            // on, and the message runs once it is back.
            Err(Error::DatabaseUnavailable { hosts, reason, .. }) => Err(self.timed_out(
                Some(queued),
                format!("the database ({hosts}), which accepted no writes: {reason}"),
            )),
            Err(reason) => Err(self.queued(queued, reason)),
        }
    }

    /// The loop of [`Self::run_until_done`], to the message's outcome; `waiting_on` keeps
    /// what the message waited on at its last look.
    async fn wait_until_done<A: Actor>(
        &self,
        queued: &Enqueued,
        waiting_on: &mut Option<String>,
    ) -> Result<Outcome> {
        let message_id = queued.message_id;
        loop {
            let next = self
                .turns
                .run_next::<A>(self.key.actor_id, Lock::WaitUntil(self.deadline))
                .await;
            let step = match next {
                // A conflict (a Galera node certified another turn first) is run again.
                Err(error) if error.is_conflict() && !self.past_deadline() => continue,
                next => next?,
            };
            let step = match step {
                Step::Ran(report) if report.message_id == Some(message_id) => {
                    return Ok(report.outcome);
                }
                Step::Ran(_) => continue,
                waiting => waiting,
            };
            let waiting = waiting_on.insert(step.waiting_on(message_id));
            if let Some(outcome) = self.outcome_of(MessageLookup::Id(message_id)).await? {
                return Ok(outcome);
            }
            let pause = WAIT_POLL.min(self.deadline.saturating_duration_since(Instant::now()));
            self.turns.core().wait_for_work(pause).await;
            if self.past_deadline() {
                return Err(self.timed_out(Some(queued), waiting.clone()));
            }
        }
    }
}
