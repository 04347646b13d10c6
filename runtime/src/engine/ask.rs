//! Reads of an actor's state: an ordered query (the actor's earlier messages run first, then
//! its handler answers from the committed state) and a snapshot of the committed state.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::call::Call;
use super::call::Calls;
use super::{decode_state, micros, paused, read_until, Lock, Outcome, Step, WAIT_POLL};
use crate::actor::handled::Handled;
use crate::actor::turn::{Turn, TurnFacts};
use crate::actor::{Actor, Operations};
use crate::error::Result;
use crate::limits::deadline_after;
use crate::store::ErrorKinds;
use crate::store::{ActorKey, Instance};
use crate::trace_context::TraceContext;

impl Calls<'_> {
    /// An ordered read: runs the actor's earlier messages, then answers from its state.
    pub(crate) async fn ask<A: Actor>(
        &self,
        actor_id: &str,
        query: A::Query,
        timeout: Duration,
    ) -> Result<String> {
        let started = Instant::now();
        let operation = query.name();
        let call = Call {
            turns: self.turns(),
            groups: self.groups(),
            key: ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id,
            },
            operation,
            timeout,
            deadline: deadline_after(timeout),
            trace: TraceContext::NONE,
        };
        let answer = call.ask_until_answered::<A>(query).await;
        crate::metrics::call_duration(A::TYPE_NAME, operation, started.elapsed());
        answer
    }

    /// The actor's committed state, without a message; the default state if it has none.
    pub(crate) async fn snapshot<A: Actor>(&self, actor_id: &str) -> Result<A> {
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id,
        };
        let core = self.core();
        let committed = core.store().read_actor(key, micros(core.now())).await?;
        decode_state(key, &committed.instance.unwrap_or_default())
    }
}

impl Call<'_> {
    /// The answer to an ordered read.
    async fn ask_until_answered<A: Actor>(&self, query: A::Query) -> Result<String> {
        let mut drained = false;
        loop {
            let committed = match read_until(
                self.deadline,
                self.turns
                    .core()
                    .store()
                    .read_actor(self.key, micros(self.turns.core().now())),
            )
            .await
            {
                Err(error) if error.is_busy() => return Err(self.busy(None)),
                read => read?,
            };
            let instance = committed.instance.unwrap_or_default();
            if instance.paused {
                return Err(paused(self.key));
            }
            if committed.mailbox_empty || drained {
                return self.answer::<A>(&instance, query).await;
            }
            let step = self
                .turns
                .run_next::<A>(self.key.actor_id, Lock::WaitUntil(self.deadline))
                .await?;
            match step {
                Step::Ran(_) => {}
                Step::Idle => drained = true,
                Step::Busy if self.past_deadline() => return Err(self.busy(None)),
                Step::Busy => self.turns.core().wait_for_work(WAIT_POLL).await,
                Step::Blocked {
                    message_id, until, ..
                } => {
                    let pause =
                        WAIT_POLL.min(self.deadline.saturating_duration_since(Instant::now()));
                    self.turns.core().wait_for_work(pause).await;
                    if self.past_deadline() {
                        let waiting_on = format!("message {message_id}, not due until {until}");
                        return Err(self.timed_out(None, waiting_on));
                    }
                }
            }
        }
    }

    /// Answers a query from the committed state, within the turn timeout and the caller's
    /// deadline.
    async fn answer<A: Actor>(&self, instance: &Instance, query: A::Query) -> Result<String> {
        let state: A = decode_state(self.key, instance)?;
        let turn = Turn::<A>::new(TurnFacts {
            actor_id: self.key.actor_id,
            now: self.turns.core().now(),
            message_id: None,
            attempt: 1,
            incarnation: instance.incarnation,
            scheduled_at: None,
        });
        let deadline = self
            .deadline
            .min(deadline_after(self.turns.core().config().turn_timeout));
        let answering = crate::actor::handler_scope::as_handler(
            self.key.actor_type,
            self.key.actor_id,
            AssertUnwindSafe(state.answer(&turn, query)).catch_unwind(),
        );
        let handled = match tokio::time::timeout_at(deadline, answering).await {
            Ok(Ok(handled)) => handled,
            Ok(Err(panic)) => Handled::panicked(&*panic),
            Err(_) => {
                return Err(self.timed_out(None, "the query's handler, still running".to_owned()))
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
        self.result(outcome, None)
    }
}
