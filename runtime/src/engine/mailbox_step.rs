//! One mailbox step: lock the actor, take the head of its mailbox, decode it and the state,
//! and run its turn; a conflict runs the step again, a failure is counted on the head.

use std::ops::ControlFlow;

use tokio::time::Instant;

use super::conflicts::conflict_pause;
use super::core::Core;
use super::one_turn::Turns;
use super::one_turn::{Delivery, Waiter};
use super::state_cache::{decode_locked, Current, Held};
use super::written::Uncommitted;
use super::{from_micros, micros, paused, Lock, Outcome, Step, TurnReport};
use crate::actor::operation_codec::decode_operation;
use crate::actor::Actor;
use crate::error::{Error, Result};
use crate::store::ErrorKinds;
use crate::store::{
    ActorKey, ActorLock, Instance, MessageProgress, StoredMessage, StoredStatus, Transaction,
};

/// How many times in a row a worker's turn that conflicts with other transactions (or whose
/// commit goes unanswered) runs again in one pass before its message is left for a later
/// pass, a stall counted and no attempt.
const CONFLICT_RETRIES: u32 = 8;

/// One try at an actor's next message.
enum Attempted {
    /// It ended (ran, was counted, or there was nothing to run).
    Done(Step),
    /// It conflicted with another transaction: try again.
    Conflict { head: StoredMessage, why: String },
    /// It ran past its group commit's budget: try again outside any group.
    OverBudget,
    /// Its commit, or its group commit, ended in doubt: the next try reads whether it was
    /// kept (it waits for the writer, which the group holds until it ends, or joins that
    /// same group).
    InDoubt { message_id: i64 },
}

/// The locked actor and the due head of its mailbox, its transaction still open.
struct Taken {
    tx: Box<dyn Transaction>,
    instance: Instance,
    /// The state this process holds at the row's version, when the lock left it out.
    held_state: Option<Current>,
    head: StoredMessage,
}

/// What a head whose message or state does not decode comes to.
#[derive(Debug, Clone, Copy)]
enum Undecoded {
    /// It waits, noted and uncounted, for a build that can read it.
    Waits,
    /// Its arguments never will decode: a dead letter at once.
    Dead,
    /// A failed attempt, retried as any other.
    FailedAttempt,
}

/// The head's message and the actor's state, decoded, its transaction still open.
struct Decoded<A: Actor> {
    tx: Box<dyn Transaction>,
    message: A::Message,
    state: A,
}

impl Turns<'_> {
    /// Runs the actor's next ready message, if one is due, taking its lock as `lock` says.
    /// A turn that conflicts with other transactions runs again; a failure anywhere in the
    /// turn is counted as an attempt on its message.
    pub(crate) async fn run_next<A: Actor>(&self, actor_id: &str, lock: Lock) -> Result<Step> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let mut conflicts = 0;
        let mut in_doubt = 0;
        let mut alone = false;
        loop {
            let attempt = self.step::<A>(key, lock, alone).await;
            match attempt {
                Ok(Attempted::Done(step)) => return Ok(step),
                Ok(Attempted::OverBudget) => alone = true,
                Ok(Attempted::InDoubt { message_id }) => {
                    self.core().store().counters().commit_in_doubt();
                    crate::metrics::commit_in_doubt(A::TYPE_NAME);
                    in_doubt += 1;
                    if lock.deadline().is_some_and(|at| Instant::now() >= at) {
                        return Ok(Step::Busy);
                    }
                    // A connection cut at every COMMIT leaves the message for a later pass
                    // rather than spinning on it, a stall counted.
                    if in_doubt >= CONFLICT_RETRIES {
                        let why = "its commit kept going unanswered (the connection was lost \
                                   at COMMIT); it runs again in a later pass";
                        return self.record_stall(message_id, why).await;
                    }
                }
                Ok(Attempted::Conflict { head, why }) => {
                    self.core().store().counters().conflict();
                    crate::metrics::turn_conflict(A::TYPE_NAME);
                    conflicts += 1;
                    // A caller's deadline that passes while its turn conflicts (a Galera
                    // node's turn certified first) leaves the message as it was, nothing
                    // counted, as a turn abandoned at the deadline does.
                    if lock.deadline().is_some_and(|at| Instant::now() >= at) {
                        return Ok(Step::Busy);
                    }
                    // A conflict is no failure of its message, however many turns other
                    // nodes certify first: a caller's turn runs again until its deadline, a
                    // worker's is left for a later pass, a stall counted.
                    if conflicts >= CONFLICT_RETRIES && !lock.waits() {
                        let why = format!(
                            "its turn kept conflicting with other transactions ({why}); it \
                             runs again in a later pass"
                        );
                        return self.record_stall(head.id, &why).await;
                    }
                    tracing::debug!(actor_id, conflicts, %why, "a turn conflicted; running it again");
                    conflict_pause(conflicts).await;
                }
                Err(error) if error.is_busy() => return Ok(Step::Busy),
                // Taking the head conflicted (a Galera node's applier aborted the lock for a
                // write another node committed first): nothing was written, so it is taken
                // again, as a turn's conflict is run again.
                Err(error) if error.is_conflict() => {
                    self.core().store().counters().conflict();
                    crate::metrics::turn_conflict(A::TYPE_NAME);
                    if lock.deadline().is_some_and(|at| Instant::now() >= at) {
                        return Ok(Step::Busy);
                    }
                    conflicts += 1;
                    // A worker's pass that kept conflicting leaves the actor for a later
                    // pass: nothing was written, and a conflict is no error of the pass.
                    if conflicts >= CONFLICT_RETRIES && !lock.waits() {
                        tracing::debug!(actor_id, conflicts, %error, "taking a turn kept conflicting; leaving it for a later pass");
                        return Ok(Step::Busy);
                    }
                    tracing::debug!(actor_id, conflicts, %error, "taking a turn conflicted; taking it again");
                    conflict_pause(conflicts).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// One try at the actor's next message: take the head, decode it, run its turn.
    async fn step<A: Actor>(
        &self,
        key: ActorKey<'static, '_>,
        lock: Lock,
        alone: bool,
    ) -> Result<Attempted> {
        let tx = self.core().begin_turn(lock.deadline(), alone).await?;
        let Taken {
            tx,
            instance,
            held_state,
            head,
        } = match self.take_head(tx, key, lock).await? {
            ControlFlow::Continue(taken) => taken,
            ControlFlow::Break(step) => return Ok(Attempted::Done(step)),
        };
        let Decoded { tx, message, state } = match self
            .decode::<A>(tx, key, (&instance, held_state), &head)
            .await?
        {
            ControlFlow::Continue(decoded) => decoded,
            ControlFlow::Break(step) => return Ok(Attempted::Done(step)),
        };
        let delivery = Delivery::Stored {
            head: &head,
            message,
        };
        let ran = self
            .run_turn::<A>(
                tx,
                key,
                &instance,
                state,
                delivery,
                Waiter::until(lock.deadline()),
            )
            .await;
        let step = match ran {
            Ok(report) => Step::Ran(report),
            Err(Uncommitted::Conflict(why)) => return Ok(Attempted::Conflict { head, why }),
            Err(Uncommitted::OverBudget) => return Ok(Attempted::OverBudget),
            // The message's row says whether the turn was kept: the next try reads it.
            Err(Uncommitted::InDoubt) => {
                return Ok(Attempted::InDoubt {
                    message_id: head.id,
                })
            }
            Err(Uncommitted::Abandoned) => Step::Busy,
            Err(Uncommitted::Failed { error, retryable }) => {
                #[cfg(feature = "simulation")]
                if crate::simulation::reintroduced(
                    crate::simulation::Defect::FailureOutsideHandlerUncounted,
                ) {
                    return Ok(Attempted::Done(Step::Busy));
                }
                self.count_failure::<A>(key, &head, &error, retryable)
                    .await?
            }
        };
        Ok(Attempted::Done(step))
    }

    /// Locks the actor and takes the head of its mailbox if it is due; otherwise releases
    /// the transaction and says why there is no turn to run (a reminder of an earlier
    /// incarnation is ended as destroyed on the way).
    async fn take_head(
        &self,
        mut tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        lock: Lock,
    ) -> Result<ControlFlow<Step, Taken>> {
        let held = self.states().held(key);
        let known = held.as_ref().map(Held::version);
        let Some(locked) = tx
            .lock_actor(ActorLock {
                actor: key,
                wait: lock.wait(),
                now: micros(self.core().now()),
                known,
            })
            .await?
        else {
            // On PostgreSQL the skipped actor's row may have just been created.
            Core::release(tx).await;
            return Ok(ControlFlow::Break(Step::Busy));
        };
        if locked.instance.paused {
            // Paused after a worker listed it: workers leave it; a waiting caller hears why.
            Core::release(tx).await;
            return match lock {
                Lock::Skip => Ok(ControlFlow::Break(Step::Busy)),
                Lock::WaitUntil(_) => Err(paused(key)),
            };
        }
        let Some(head) = locked.head else {
            Core::release(tx).await;
            return Ok(ControlFlow::Break(Step::Idle));
        };
        if head.available_at > micros(self.core().now()) {
            Core::release(tx).await;
            return Ok(ControlFlow::Break(Step::Blocked {
                message_id: head.id,
                until: from_micros(head.available_at),
                attempts: head.attempts,
            }));
        }
        if head
            .incarnation
            .is_some_and(|incarnation| incarnation != locked.instance.incarnation)
        {
            // A reminder of an earlier incarnation fired after its actor was destroyed.
            let ended = MessageProgress {
                status: StoredStatus::Destroyed,
                finished_at: Some(micros(self.core().now())),
                ..MessageProgress::ready(head.attempts, head.available_at)
            };
            if tx.update_message(head.id, head.attempts, &ended).await? {
                tx.commit().await?;
            } else {
                Core::release(tx).await;
            }
            return Ok(ControlFlow::Break(Step::Ran(TurnReport {
                message_id: Some(head.id),
                outcome: Outcome::Destroyed,
            })));
        }
        let held_state = self.states().locked(key, held, &locked.instance);
        Ok(ControlFlow::Continue(Taken {
            tx,
            instance: locked.instance,
            held_state,
            head,
        }))
    }

    /// Decodes the head's message and the actor's state (its row, and the state this process
    /// holds if the lock left the row's out). What does not decode releases the
    /// transaction first: arguments that never will are a dead letter at once, a state that
    /// does not read is a failed attempt, and what this build cannot read yet waits, noted
    /// and uncounted, for a build that can.
    async fn decode<A: Actor>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        (instance, held_state): (&Instance, Option<Current>),
        head: &StoredMessage,
    ) -> Result<ControlFlow<Step, Decoded<A>>> {
        let message = decode_operation::<A::Message>(
            key.actor_type,
            key.actor_id,
            &head.operation,
            &head.arguments,
            head.id,
        );
        let message = match message {
            Ok(message) => message,
            // An operation this build does not know waits for a build that does; arguments
            // that do not decode never will: a dead letter at once.
            Err(error) => {
                let comes_to = match error {
                    Error::UnknownOperation { .. } => Undecoded::Waits,
                    _ => Undecoded::Dead,
                };
                return self.undecoded::<A, _>(tx, key, head, error, comes_to).await;
            }
        };
        let state = match decode_locked::<A>(key, instance, held_state) {
            Ok(state) => state,
            // A state this build cannot read yet (a newer build wrote it, or no migration
            // starts from its version) waits, uncounted, for a build that can; any other is a
            // failed attempt.
            Err(error) => {
                let comes_to = match error {
                    Error::StateFromNewerBuild { .. } | Error::NoMigration { .. } => {
                        Undecoded::Waits
                    }
                    _ => Undecoded::FailedAttempt,
                };
                return self.undecoded::<A, _>(tx, key, head, error, comes_to).await;
            }
        };
        Ok(ControlFlow::Continue(Decoded { tx, message, state }))
    }

    /// Releases `tx` after `error` decoding `head`, which comes to what `comes_to` says: a
    /// head that waits is noted and the error returned; any other counts a failed attempt,
    /// and the step that counted it breaks the loop.
    async fn undecoded<A: Actor, T>(
        &self,
        tx: Box<dyn Transaction>,
        key: ActorKey<'static, '_>,
        head: &StoredMessage,
        error: Error,
        comes_to: Undecoded,
    ) -> Result<ControlFlow<Step, T>> {
        Core::release(tx).await;
        let retryable = match comes_to {
            Undecoded::Waits => {
                self.note_waiting(head.id, &error).await?;
                return Err(error);
            }
            Undecoded::Dead => false,
            Undecoded::FailedAttempt => true,
        };
        let step = self
            .count_failure::<A>(key, head, &error.to_string(), retryable)
            .await?;
        Ok(ControlFlow::Break(step))
    }
}
