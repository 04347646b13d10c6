//! [`Runtime`]: the handle an application holds, and what every clone of it shares, with the
//! effect handlers it carries ([`EffectRunner`]), whose [`EffectContext`] holds the handle.
//! The handle's methods are in `runtime.rs`, `worker.rs` (the workers) and `shutdown.rs`;
//! the files that keep a handle (references, messages, watches) import it from here.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::actor::failure::Failure;
use crate::client::effect_tasks::EffectTasks;
use crate::client::policy::Policy;
use crate::client::stopping::Stopping;
use crate::client::workers::Workers;
use crate::engine::Engine;
use crate::limits::RetryPolicy;

/// A running solid-objects runtime: a database, a clock, a policy, and the actor types it
/// runs. Cheap to clone; clones share everything.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn example() -> Result<(), solid_objects::Error> {
/// use solid_objects::{AllowAll, Runtime};
///
/// let runtime = Runtime::builder().sqlite("shows.db").policy(AllowAll).start().await?;
/// // ... runtime.reference::<SeatInventory>("show-42").hold(..).await? ...
/// runtime.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) sync_timeout: Duration,
    /// How many workers `run` starts, how they poll and how long a shutdown waits for them.
    pub(crate) workers: Workers,
    /// Whether `run` listens for work committed by other processes.
    pub(crate) listen: bool,
    /// Held by the idle worker whose turn it is to poll the database.
    pub(crate) poll_turn: tokio::sync::Mutex<()>,
    pub(crate) closed: AtomicBool,
    pub(crate) shutdown: Notify,
    /// The runs of the workers, and whether to abandon their work.
    pub(crate) stopping: Stopping,
    /// When the workers last did the upkeep (pruning, reports).
    pub(crate) last_upkeep: Mutex<Option<DateTime<Utc>>>,
    /// When the workers last folded the charts' tallies.
    pub(crate) last_fold: Mutex<Option<DateTime<Utc>>>,
    /// The effect handlers the workers started.
    pub(crate) effect_tasks: EffectTasks,
    /// The effect handlers, with the names of the effects they run.
    pub(crate) effect_runners: Vec<(&'static str, Arc<dyn EffectRunner>)>,
}

/// What an effect handler knows besides the effect.
#[derive(Debug, Clone)]
pub struct EffectContext {
    pub(crate) id: String,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) actor_type: String,
    pub(crate) actor_id: String,
    pub(crate) runtime: Runtime,
}

impl EffectContext {
    /// The effect's id, the same on every attempt: the idempotency key to give the outside
    /// service, so a repeated delivery does the work once.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Which attempt this is: 1 the first time.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many attempts the effect gets: its kind's
    /// [`Effect::retry_policy`](crate::Effect::retry_policy), or the runtime's.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether this is the effect's last attempt: if it fails (or its runner dies), the
    /// effect is dead and its failure reply is sent.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// The stored type name of the actor whose turn emitted it.
    pub fn actor_type(&self) -> &str {
        &self.actor_type
    }

    /// The id of the actor whose turn emitted it.
    pub fn actor_id(&self) -> &str {
        &self.actor_id
    }

    /// The runtime, to tell an actor how the effect went (`reference::<A>(id).confirm(..)`).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

/// The boxed future of a handler run: the effect's output as JSON, or how it failed.
pub(crate) type HandlerFuture =
    Pin<Box<dyn Future<Output = std::result::Result<String, Failure>> + Send>>;

/// Runs stored effects of one kind.
pub(crate) trait EffectRunner: Send + Sync {
    /// Decodes the payload and runs the handler; a panic or an undecodable payload is a
    /// failure.
    fn run(&self, payload: &str, context: EffectContext) -> HandlerFuture;

    /// The kind's own retry policy ([`Effect::retry_policy`]), if it has one.
    fn retry(&self) -> Option<RetryPolicy>;
}
