//! A synchronous call in a group ([`groups`](super::groups)): entering it, the member's turn
//! that the group's leader runs in the group's transaction, and what the call makes of the
//! group's reply.
//!
//! A member's turn takes the steps of a fresh call's turn behind a savepoint of its own, and
//! leaves the group's transaction as it found it whenever it writes nothing: its savepoint
//! is rolled back, and its caller told why (run alone, try again, or the answer it has).

use tokio::time::Instant;

use super::call::{Attempt, Call, CallOptions, Tried};
use super::groups::{Entered, Heard, MemberOutcome, MemberRan, MemberTurn, Reply};
use super::one_turn::{FreshTurn, Turns, Unwritten};
use super::state_cache::{decode_locked, Held};
use super::tail::same_request;
use super::written::{Uncommitted, Written};
use super::{micros, paused};
use crate::actor::Actor;
use crate::store::ErrorKinds;
use crate::store::{ActorKey, ActorLock, LockWait, MessageLookup, Transaction};
use crate::trace_context::TraceContext;

/// A call's message as a member carries it to its group's leader.
struct MemberCall<A: Actor> {
    actor_id: String,
    message: A::Message,
    arguments: String,
    request_id: String,
    idempotency_key: Option<String>,
    deadline: Instant,
    /// The caller's trace context.
    trace: TraceContext,
}

impl Call<'_> {
    /// One try at a synchronous call: in the group of its actor, or of its server's calls,
    /// where one is open; otherwise in a transaction of its own, which leads a group.
    pub(super) async fn try_grouped<A: Actor>(
        &self,
        message: A::Message,
        arguments: &str,
        options: CallOptions<'_>,
        attempt: &mut Attempt<'_>,
    ) -> crate::error::Result<Tried> {
        if attempt.alone || attempt.in_doubt || attempt.ungrouped {
            return self
                .try_call::<A>(message, arguments, options, attempt, None)
                .await;
        }
        let mut message = Some(message);
        let entered = self.groups.enter(self.key, || {
            member_turn::<A>(MemberCall {
                actor_id: self.key.actor_id.to_owned(),
                message: message.take().expect("a call joins one group"),
                arguments: arguments.to_owned(),
                request_id: attempt.request_id.to_owned(),
                idempotency_key: options.idempotency_key.map(str::to_owned),
                deadline: self.deadline,
                trace: self.trace,
            })
        });
        let alone = |message: Option<A::Message>| message.expect("a call that joined no group");
        match entered {
            Entered::Alone => {
                self.try_call::<A>(alone(message), arguments, options, attempt, None)
                    .await
            }
            Entered::Lead(mut leading) => {
                self.try_call::<A>(
                    alone(message),
                    arguments,
                    options,
                    attempt,
                    Some(&mut leading),
                )
                .await
            }
            Entered::Joined(joined) => {
                let heard = joined.heard(self.deadline).await;
                self.heard(heard, arguments, options, attempt.request_id)
            }
        }
    }

    /// What a member's call makes of what it heard from its group.
    fn heard(
        &self,
        heard: Heard,
        arguments: &str,
        options: CallOptions<'_>,
        request_id: &str,
    ) -> crate::error::Result<Tried> {
        let reply = match heard {
            Heard::Reply(reply) => reply,
            Heard::Withdrawn => {
                return Ok(Tried::Answered(Err(self.timed_out(
                    None,
                    "another call, whose transaction it waited to join (nothing of it was \
                     written)"
                        .to_owned(),
                ))))
            }
            Heard::TakenAtDeadline => return Ok(Tried::Answered(Err(self.in_doubt(request_id)))),
        };
        Ok(match *reply {
            Reply::Ran(report) => Tried::Answered(self.result(report.outcome, Some(request_id))),
            Reply::InDoubt => Tried::InDoubt,
            Reply::Retry => Tried::Conflict,
            Reply::Alone => Tried::Ungrouped,
            Reply::Found(existing) => {
                if let Some(key) = options.idempotency_key {
                    same_request(&existing, self.operation, arguments, key)?;
                }
                self.answer_from(existing)
            }
            Reply::Failed(error) => return Err(error),
        })
    }
}

/// The turn a member hands its group's leader.
fn member_turn<A: Actor>(call: MemberCall<A>) -> MemberTurn {
    Box::new(move |turns, tx, until| Box::pin(run_member::<A>(turns, tx, call, until)))
}

/// Runs a member's turn behind its savepoint in the group's transaction `tx`; anything but a
/// written turn rolls back to the savepoint.
async fn run_member<A: Actor>(
    turns: Turns<'_>,
    mut tx: Box<dyn Transaction>,
    call: MemberCall<A>,
    until: Instant,
) -> MemberRan {
    // A savepoint statement that failed leaves the transaction poisoned: it is dropped.
    if tx.member_savepoint().await.is_err() {
        return MemberRan {
            tx: None,
            outcome: MemberOutcome::Reply(Reply::Alone),
        };
    }
    let (tx, reply) = match member_steps::<A>(turns, tx, call, until).await {
        Ok((tx, written)) => {
            return MemberRan {
                tx: Some(tx),
                outcome: MemberOutcome::Written(written),
            };
        }
        Err(unwritten) => unwritten,
    };
    let tx = match tx {
        Some(mut tx) => tx.rollback_member().await.is_ok().then_some(tx),
        None => None,
    };
    // A member that lost the group's transaction runs alone: whatever lost it may again.
    let reply = if tx.is_none() { Reply::Alone } else { reply };
    MemberRan {
        tx,
        outcome: MemberOutcome::Reply(reply),
    }
}

/// What a member that wrote nothing leaves: the group's transaction (unless lost with it)
/// and what its caller hears.
type NotWritten = (Option<Box<dyn Transaction>>, Reply);

/// A member's steps: lock its actor without waiting, look its key up, check that it can run
/// now, decode its state, run and write its turn.
async fn member_steps<A: Actor>(
    turns: Turns<'_>,
    mut tx: Box<dyn Transaction>,
    call: MemberCall<A>,
    until: Instant,
) -> Result<(Box<dyn Transaction>, Written), NotWritten> {
    let key = ActorKey {
        actor_type: A::TYPE_NAME,
        actor_id: &call.actor_id,
    };
    let held = turns.states().held(key);
    let known = held.as_ref().map(Held::version);
    let locked = match tx
        .lock_actor(ActorLock {
            actor: key,
            wait: LockWait::SkipMissing,
            now: micros(turns.core().now()),
            known,
        })
        .await
    {
        Ok(Some(locked)) => locked,
        // Another transaction holds the actor, or its row is missing (creating it could
        // wait for another transaction's): the call runs alone.
        Ok(None) => return Err((Some(tx), Reply::Alone)),
        Err(error) if error.is_conflict() => return Err((Some(tx), Reply::Retry)),
        Err(_) => return Err((Some(tx), Reply::Alone)),
    };
    if let Some(idempotency_key) = call.idempotency_key.as_deref() {
        let lookup = MessageLookup::IdempotencyKey(key, idempotency_key);
        match tx.message(lookup).await {
            Ok(Some(existing)) => return Err((Some(tx), Reply::Found(existing))),
            Ok(None) => {}
            Err(_) => return Err((Some(tx), Reply::Alone)),
        }
    }
    if locked.instance.paused {
        return Err((Some(tx), Reply::Failed(paused(key))));
    }
    // Queued messages run first, in order: the call enqueues behind them, alone.
    if locked.head.is_some() {
        return Err((Some(tx), Reply::Alone));
    }
    let held_state = turns.states().locked(key, held, &locked.instance);
    let state = match decode_locked::<A>(key, &locked.instance, held_state) {
        Ok(state) => state,
        Err(error) => return Err((Some(tx), Reply::Failed(error))),
    };
    let turn = FreshTurn {
        message: call.message,
        arguments: &call.arguments,
        request_id: &call.request_id,
        idempotency_key: call.idempotency_key.as_deref(),
        trace: call.trace,
        caller_deadline: call.deadline,
        budget: until,
    };
    let ran = turns
        .run_member_turn::<A>(tx, key, &locked.instance, state, turn)
        .await;
    ran.map_err(|Unwritten { tx, why }| {
        let reply = match why {
            Uncommitted::Conflict(_) | Uncommitted::Abandoned => Reply::Retry,
            Uncommitted::InDoubt => Reply::InDoubt,
            Uncommitted::OverBudget | Uncommitted::Failed { .. } => Reply::Alone,
        };
        (tx, reply)
    })
}
