//! Effects: work outside the database (charge a card, send an email) that a turn asks for
//! with [`Turn::emit`](crate::Turn::emit) and that runs after the turn commits.
//!
//! An emitted effect is a row written in the turn's transaction (the transactional outbox):
//! it exists if and only if the turn committed. Workers (and
//! [`Testing::run_effects`](crate::Testing::run_effects)) claim due effects with a lease,
//! run the application's handler outside any transaction, and record the outcome. Delivery is
//! at least once: a handler that fails is retried with backoff, a worker that dies mid-effect
//! leaves it to be claimed again when the lease runs out. Pass
//! [`EffectContext::id`] to the outside service as its idempotency key.
//!
//! Its outcome can come back to the actor as a message to one of its `#[reply]` operations
//! (see [`Emitted`](crate::Emitted)). Only the runtime delivers a reply: calling one through
//! a reference, an `enqueue()` or `turn.send` is a compile error, and the untyped reference
//! refuses one at the door with [`Error::ReplyNotCallable`](crate::Error::ReplyNotCallable),
//! so no caller can forge an outcome.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use futures_util::FutureExt;
use tracing::Instrument;

pub use crate::actor::effect::{Effect, EffectFailure};
use crate::actor::failure::Failure;
use crate::client::effect_tasks::EffectTasks;
pub use crate::client::shared::EffectContext;
use crate::client::shared::{EffectRunner, HandlerFuture, Runtime};
use crate::codec::{panic_text, store_value};
use crate::error::Result;
use crate::limits::RetryPolicy;
use crate::store::ClaimedEffect;
use crate::trace_context::TraceContext;

/// Effects waiting to run whose kind has no handler in this runtime, for operators: from
/// [`Admin::unhandled_effects`](crate::admin::Admin::unhandled_effects).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct UnhandledEffects {
    /// The kind of effect ([`Effect::NAME`]).
    pub name: String,
    /// How many wait.
    pub count: i64,
    /// When the oldest of them was emitted.
    pub oldest: chrono::DateTime<chrono::Utc>,
}

impl UnhandledEffects {
    pub(crate) fn new(pending: crate::store::PendingEffects) -> Self {
        Self {
            name: pending.name,
            count: pending.count,
            oldest: crate::time::micros::from_micros(pending.oldest_created_at),
        }
    }
}

/// The handler of effect `E`.
pub(crate) struct TypedEffect<E, F> {
    handler: F,
    effect: PhantomData<fn() -> E>,
}

impl<E, F> TypedEffect<E, F> {
    pub(crate) fn new(handler: F) -> Arc<Self> {
        Arc::new(Self {
            handler,
            effect: PhantomData,
        })
    }
}

impl<E, F, Fut> EffectRunner for TypedEffect<E, F>
where
    E: Effect,
    F: Fn(E, EffectContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<E::Output, Failure>> + Send + 'static,
{
    fn run(&self, payload: &str, context: EffectContext) -> HandlerFuture {
        // Decoding and the handler's synchronous part are user code too: a panic in either
        // is a failed attempt, like a panic in the future it returns.
        let started = catch_unwind(AssertUnwindSafe(|| {
            serde_json::from_str::<E>(payload)
                .map(|effect| (self.handler)(effect, context))
                .map_err(|error| {
                    Failure::permanent(format!(
                        "the stored {} effect does not deserialise: {error}",
                        E::NAME
                    ))
                })
        }));
        match started {
            Ok(Ok(running)) => Box::pin(async move {
                let output = AssertUnwindSafe(running)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| Err(panicked(&*panic)))?;
                // The work is done: an output that cannot be stored is the handler's bug, and
                // doing the work again would not mend it.
                store_value("effect output", E::NAME, &output).map_err(|error| {
                    Failure::permanent(format!(
                        "the {} effect succeeded, but its output cannot be stored: {error}",
                        E::NAME
                    ))
                })
            }),
            Ok(Err(failure)) => Box::pin(async move { Err(failure) }),
            Err(panic) => {
                let failure = panicked(&*panic);
                Box::pin(async move { Err(failure) })
            }
        }
    }

    fn retry(&self) -> Option<RetryPolicy> {
        E::retry_policy()
    }
}

/// The failure of an effect handler that panicked: retried like any failure.
fn panicked(panic: &(dyn std::any::Any + Send)) -> Failure {
    Failure::retryable(format!(
        "the effect handler panicked: {}",
        panic_text(panic)
    ))
}

/// Claims and runs, one after the other, the due effects this runtime has handlers for, up
/// to `limit` of each kind (each lease starts when its effect starts); returns how many ran.
/// The testing API's way: it returns once they ran.
pub(crate) async fn run_due(runtime: &Runtime, limit: usize) -> Result<usize> {
    let engine = runtime.engine();
    let mut ran = 0;
    for (name, runner) in runtime.effect_runners() {
        for _ in 0..limit {
            let Some(claimed) = engine.effects().claim_effect(name).await? else {
                break;
            };
            // The testing API's run is its caller's: nothing abandons it but dropping it.
            run_claimed(runtime, name, &*runner, claimed, std::future::pending()).await?;
            ran += 1;
        }
    }
    Ok(ran)
}

/// Claims the due effects this runtime has handlers for and starts each in a task of its
/// own, as many at once as `tasks` allows, so that no handler (a hung one included) holds
/// a worker; returns how many started. Once the runtime shuts down it claims no more. The
/// workers' way.
///
/// The kinds take turns, one effect each, so that a kind with a backlog does not keep every
/// task while another kind's effects wait (every process registers its kinds in the same
/// order: a kind that always came first would starve the others everywhere).
pub(crate) async fn start_due(runtime: &Runtime, tasks: &EffectTasks) -> Result<usize> {
    let mut kinds = runtime.effect_runners();
    let mut started = 0;
    while !kinds.is_empty() {
        let mut index = 0;
        while index < kinds.len() {
            if runtime.is_closed() {
                return Ok(started);
            }
            let Some(permit) = tasks.try_permit() else {
                return Ok(started);
            };
            let (name, runner) = &kinds[index];
            let name: &'static str = name;
            let Some(claimed) = runtime.engine().effects().claim_effect(name).await? else {
                // None of this kind is due: the other kinds go on without it.
                kinds.remove(index);
                continue;
            };
            spawn_claimed(runtime, tasks, name, runner, claimed, permit);
            started += 1;
            index += 1;
        }
    }
    Ok(started)
}

/// Starts a claimed effect in a task of its own, holding `permit` until it ends.
fn spawn_claimed(
    runtime: &Runtime,
    tasks: &EffectTasks,
    name: &'static str,
    runner: &Arc<dyn EffectRunner>,
    claimed: ClaimedEffect,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let (runtime, runner) = (runtime.clone(), Arc::clone(runner));
    let abandoning = tasks.abandoning();
    tasks.spawn(async move {
        let ran = run_claimed(&runtime, name, &*runner, claimed, abandoning).await;
        if let Err(error) = ran {
            tracing::error!(effect = name, %error, "an effect's outcome was not recorded");
        }
        drop(permit);
    });
}

/// How long a runner that a shutdown stops may take to give its effect's lease back; past it
/// the lease runs out by itself (and the attempt counts).
const RELEASE_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs one claimed effect's handler, for at most the effect timeout, renewing its lease
/// every third of it while the handler runs, and records how it went (if the lease is
/// still this runner's then: a stale runner's outcome is discarded). If `abandoning`
/// resolves first (a shutdown's deadline passed), the handler is dropped and the lease given
/// back with the attempt not counted.
///
/// The attempt runs in the effect's span, a child of the turn that emitted it, and the reply
/// its outcome sends continues that span's trace.
async fn run_claimed(
    runtime: &Runtime,
    name: &'static str,
    runner: &dyn EffectRunner,
    claimed: ClaimedEffect,
    abandoning: impl Future<Output = ()>,
) -> Result<()> {
    let span = crate::engine::effect_span(&claimed);
    let trace = TraceContext::of(&span);
    attempt(runtime, (name, runner), claimed, abandoning, trace)
        .instrument(span)
        .await
}

/// The attempt of [`run_claimed`], in its span, whose context is `trace`.
async fn attempt(
    runtime: &Runtime,
    (name, runner): (&'static str, &dyn EffectRunner),
    claimed: ClaimedEffect,
    abandoning: impl Future<Output = ()>,
    trace: TraceContext,
) -> Result<()> {
    let engine = runtime.engine();
    let max_attempts = engine.effect_kinds().retry(name).max_attempts;
    let context = EffectContext {
        id: claimed.effect_id.clone(),
        attempt: u32::try_from(claimed.attempts).unwrap_or(u32::MAX),
        max_attempts: u32::try_from(max_attempts).unwrap_or(u32::MAX),
        actor_type: claimed.actor_type.clone(),
        actor_id: claimed.actor_id.clone(),
        runtime: runtime.clone(),
    };
    let timeout = engine.core().config().effect_timeout;
    // The handler runs inside the runtime's scope: `Actor::reference(id)` reaches it.
    let running = runtime.scope(runner.run(&claimed.payload, context));
    let running = tokio::time::timeout(timeout, running);
    tokio::pin!(running);
    let lease = engine.core().config().effect_lease;
    let mut renewals = tokio::time::interval_at(tokio::time::Instant::now() + lease / 3, lease / 3);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewing = true;
    // A renewal runs beside the handler, never instead of it: one waiting for a connection
    // (SQLite's one writer) must not stop the handler that holds it from finishing. Once
    // started, a renewal is awaited to its end, not dropped in the middle of its
    // transaction.
    let effects = engine.effects();
    let mut renewal: Option<std::pin::Pin<Box<dyn Future<Output = Result<bool>> + Send + '_>>> =
        None;
    tokio::pin!(abandoning);
    let outcome = loop {
        tokio::select! {
            finished = &mut running => break Some(finished),
            () = &mut abandoning => break None,
            _ = renewals.tick(), if renewing && renewal.is_none() => {
                renewal = Some(Box::pin(effects.renew_effect(&claimed)));
            }
            renewed = async { renewal.as_mut().expect("a renewal runs").await },
                if renewal.is_some() =>
            {
                renewal = None;
                match renewed {
                    Ok(true) => {}
                    Ok(false) => {
                        // Another runner owns it now: this outcome will be discarded.
                        renewing = false;
                    }
                    Err(error) => {
                        tracing::warn!(effect = name, id = claimed.effect_id, %error,
                            "an effect's lease was not renewed; trying again");
                    }
                }
            }
        }
    };
    let Some(outcome) = outcome else {
        let release = async {
            if let Some(renewal) = renewal {
                let _ = renewal.await;
            }
            engine.effects().release_effect(&claimed).await
        };
        return match tokio::time::timeout(RELEASE_BOUND, release).await {
            Ok(released) => released.map(drop),
            Err(_) => {
                tracing::warn!(
                    effect = name,
                    id = claimed.effect_id,
                    "an abandoned effect's lease was not given back in time; it runs again once \
                     the lease runs out, and that attempt counts"
                );
                Ok(())
            }
        };
    };
    if let Some(renewal) = renewal {
        let _ = renewal.await;
    }
    let outcome = outcome.unwrap_or_else(|_| {
        Err(Failure::retryable(format!(
            "the effect handler ran longer than the effect timeout of {timeout:?} and was \
             abandoned"
        )))
    });
    if let Err(failure) = &outcome {
        tracing::warn!(effect = name, id = claimed.effect_id, %failure, "an effect failed");
    }
    engine
        .effects()
        .finish_effect(&claimed, outcome, trace)
        .await?;
    Ok(())
}
