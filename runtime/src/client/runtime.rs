//! The methods of [`Runtime`] (defined in `shared.rs`): what an application reaches through
//! the handle. The workers' are in `worker.rs`, the shutdowns' with a deadline in
//! `shutdown.rs`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::client::builder::Builder;
use crate::client::message::MessageRef;
use crate::client::policy::Policy;
use crate::client::reference::{Addressable, Reference};
use crate::client::shared::{EffectRunner, Runtime};
use crate::client::testing::Testing;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::{MessageLookup, Stats};

impl Runtime {
    /// Starts configuring a runtime.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The runtime `Actor::reference(id)` reaches here: the one of the enclosing
    /// [`scope`](Runtime::scope), else the process default
    /// ([`make_default`](Runtime::make_default)), else none.
    pub fn current() -> Option<Self> {
        crate::client::default_runtime::current()
    }

    /// Makes this runtime the process default: `Actor::reference(id)` reaches it from any
    /// task that is not inside another runtime's [`scope`](Runtime::scope). A runtime is the
    /// default only when asked; the last one asked wins, and the default stays alive (even
    /// if every other handle was dropped) until another takes its place. The runtime's own
    /// workers and effect handlers always reach their runtime.
    pub fn make_default(&self) {
        crate::client::default_runtime::set(self);
    }

    /// Runs `future` with this runtime as the one `Actor::reference(id)` reaches inside it,
    /// whatever the process default is. The scope is the future itself: tasks it spawns do
    /// not inherit it. Tests running in parallel each scope their own runtime.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Counter {
    ///     value: u32,
    /// }
    ///
    /// #[actor]
    /// impl Counter {
    ///     #[command]
    ///     pub fn increment(&mut self) -> u32 {
    ///         self.value += 1;
    ///         self.value
    ///     }
    /// }
    ///
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let runtime = Runtime::builder()
    ///     .sqlite(dir.path().join("counters.db"))
    ///     .policy(AllowAll)
    ///     .start()
    ///     .await?;
    /// let value = runtime
    ///     .scope(async { Counter::reference("visits").increment().await })
    ///     .await?;
    /// assert_eq!(value, 1);
    /// # Ok(()) }
    /// ```
    pub async fn scope<F: std::future::Future>(&self, future: F) -> F::Output {
        crate::client::default_runtime::scope(self.clone(), future).await
    }

    /// A typed reference to the actor `A` with this id, on this runtime.
    pub fn reference<A: Addressable>(&self, id: impl Into<String>) -> A::Reference {
        if let Err(error) = self.engine().register::<A>() {
            tracing::error!(%error, "cannot register the actor type");
        }
        A::Reference::from(Reference::with_runtime(Some(self.clone()), id.into()))
    }

    /// A typed reference to the actor that a create request under idempotency key `key`
    /// makes, in `scope`, on this runtime: see [`Reference::for_key`].
    pub fn reference_for_key<A: Addressable>(
        &self,
        scope: &str,
        key: impl Into<String>,
    ) -> A::Reference {
        if let Err(error) = self.engine().register::<A>() {
            tracing::error!(%error, "cannot register the actor type");
        }
        A::Reference::from(Reference::for_key_with_runtime(
            Some(self.clone()),
            scope,
            key.into(),
        ))
    }

    /// Whether [`shutdown`](Runtime::shutdown) (or [`close`](Runtime::close), or a shutdown
    /// with a deadline) was asked: the runtime then refuses new calls and its workers claim
    /// no more work. A readiness probe can report it.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Completes once the runtime is closed ([`shutdown`](Runtime::shutdown),
    /// [`close`](Runtime::close), a shutdown with a deadline, or a signal to
    /// [`run_until_signal`](Runtime::run_until_signal)), at once if it is already.
    ///
    /// Hand it to a web server to stop taking requests when the runtime stops, as axum's
    /// `with_graceful_shutdown` takes it:
    ///
    /// ```no_run
    /// # #[cfg(feature = "axum")]
    /// # async fn serve(runtime: solid_objects::Runtime, router: axum::Router) -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    /// axum::serve(listener, router)
    ///     .with_graceful_shutdown(runtime.closed())
    ///     .await
    /// # }
    /// ```
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let runtime = self.clone();
        async move {
            loop {
                // Made before the check, so a shutdown from here on completes it.
                let shutdown = runtime.shared.shutdown.notified();
                if runtime.is_closed() {
                    return;
                }
                shutdown.await;
            }
        }
    }

    /// The time on the runtime's clock ([`Builder::clock`]): what handlers read as
    /// [`Turn::now`](crate::Turn::now) and what reminders fall due by, so code outside a
    /// handler (a web handler computing a deadline, a test) reads the same time.
    pub fn now(&self) -> DateTime<Utc> {
        self.engine().core().now()
    }

    /// A message, found by its request id.
    pub async fn message(&self, request_id: &str) -> Result<Option<MessageRef>> {
        let record = self
            .engine()
            .reads()
            .message(MessageLookup::RequestId(request_id))
            .await?;
        Ok(record.map(|record| MessageRef::new(self.clone(), &record)))
    }

    /// Asks [`run`](Runtime::run) to return and refuses new calls; committed work and queued
    /// messages stay in the database. The workers finish what they are doing first, however
    /// long it takes; [`shutdown_with_deadline`](Runtime::shutdown_with_deadline) bounds that.
    pub fn shutdown(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.shutdown.notify_waiters();
        self.engine().core().wake_here();
        self.engine().watchers().close();
    }

    /// Shuts down and closes the database connections the runtime opened (a pool the
    /// application passed in stays open).
    pub async fn close(&self) {
        self.shutdown();
        self.engine().close().await;
    }

    /// Counts of the work done so far: transactions and statements.
    pub fn stats(&self) -> Stats {
        self.engine().stats()
    }

    /// The testing API: run due reminders, drain queued messages, deliver a message.
    pub fn testing(&self) -> Testing<'_> {
        Testing::new(self)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// The effect handlers, with the names of the effects they run.
    pub(crate) fn effect_runners(&self) -> Vec<(&'static str, Arc<dyn EffectRunner>)> {
        self.shared.effect_runners.clone()
    }

    pub(crate) fn policy(&self) -> &dyn Policy {
        &*self.shared.policy
    }

    pub(crate) fn sync_timeout(&self) -> Duration {
        self.shared.sync_timeout
    }

    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .field("sync_timeout", &self.shared.sync_timeout)
            .finish_non_exhaustive()
    }
}
