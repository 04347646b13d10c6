//! Watching an actor: its committed states as a stream ([`Reference::watch`]).

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{self, Stream, StreamExt};
use serde_json::Value;
use tokio::time::Instant;

use crate::actor::handler_scope::refuse_inside_handler;
use crate::actor::Actor;
use crate::client::policy::RequestKind;
use crate::client::reference::Reference;
use crate::client::shared::Runtime;
use crate::codec::panic_text;
use crate::engine::{read_until, Subscription};
use crate::error::{Error, Result};
use crate::limits::deadline_after;
use crate::store::{ActorKey, Instance, Version};

/// How long a watcher waits before it reads again after a read failed.
const READ_RETRY: Duration = Duration::from_secs(1);

/// One item of a [`Watch`]: a committed state, or the end of the actor's life.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Watched<T> {
    /// A committed state (for [`Reference::watch_with`], what the projection made of it).
    /// The first item is the state committed when the watch began (the default state of an
    /// actor never written), each later one a state committed after it.
    State {
        /// The state, or its projection.
        value: T,
        /// The actor's life this state belongs to: 1 at first, one more after each destroy
        /// (as [`Turn::incarnation`](crate::Turn::incarnation) says).
        incarnation: u64,
        /// How many commits into its life the actor is: 0 before its first turn, one more
        /// with each committed turn. Items come in increasing revisions, though not every
        /// revision (a slow watcher skips to the newest).
        revision: u64,
    },
    /// The actor was destroyed: the incarnation watched ended. The last item of the watch;
    /// the actor's id lives on in a new incarnation, which a new watch follows.
    Destroyed {
        /// The incarnation that ended.
        incarnation: u64,
    },
}

impl<T> Watched<T> {
    /// The state (or projection), unless this is the end of the actor's life.
    pub fn value(&self) -> Option<&T> {
        match self {
            Self::State { value, .. } => Some(value),
            Self::Destroyed { .. } => None,
        }
    }
}

/// The committed states of one actor, as they are committed: a [`Stream`] of
/// `Result<Watched<T>>` from [`Reference::watch`] or [`Reference::watch_with`].
///
/// It ends after [`Watched::Destroyed`], or when the runtime shuts down. A read that fails
/// (the database is unreachable, a state no longer deserialises, a projection panicked) is
/// an `Err` item, and the watch goes on with the next state. Dropping it stops watching.
#[must_use = "a watch does nothing until it is polled"]
pub struct Watch<T> {
    inner: Pin<Box<dyn Stream<Item = Result<Watched<T>>> + Send>>,
}

impl<T> Watch<T> {
    /// The next item: the next committed state, the end of the actor's life, or an error;
    /// `None` once the watch ended. The same as `StreamExt::next`, without the import.
    pub async fn next(&mut self) -> Option<Result<Watched<T>>> {
        std::future::poll_fn(|cx| self.inner.as_mut().poll_next(cx)).await
    }
}

impl<T> Stream for Watch<T> {
    type Item = Result<Watched<T>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl<T> fmt::Debug for Watch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl<A: Actor> Reference<A> {
    /// Watches the actor: the state committed now, then every later committed state in
    /// revision order, ending with [`Watched::Destroyed`] if the actor is destroyed.
    ///
    /// A watcher that falls behind skips to the newest state: nothing is buffered for it,
    /// and no turn waits for it. Commits in this process reach it at once; on PostgreSQL so
    /// do those of every process (`NOTIFY`), and on SQLite those of another process at the
    /// next [`Builder::watch_poll`](crate::Builder::watch_poll). A turn that rejects or fails
    /// commits no state, so no watcher sees it. The watch holds no database connection
    /// between reads, and ends when the runtime shuts down.
    ///
    /// Authorised by [`Policy::authorize_subscription`](crate::Policy::authorize_subscription)
    /// (operation `"watch"`), which denies unless the policy allows it: a denied watch yields
    /// [`Error::Unauthorized`] and ends.
    ///
    /// ```
    /// use solid_objects::prelude::*;
    /// use solid_objects::Watched;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Counter { value: u32 }
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
    /// # let runtime = Runtime::builder().sqlite(dir.path().join("a.db")).policy(AllowAll).start().await?;
    /// let counter = runtime.reference::<Counter>("visits");
    /// let mut watch = counter.watch();
    /// let first = watch.next().await.expect("the current state")?;
    /// assert_eq!(first.value().map(|counter| counter.value), Some(0));
    /// counter.increment().await?;
    /// let Some(Ok(Watched::State { value, revision, .. })) = watch.next().await else {
    ///     panic!("the next state")
    /// };
    /// assert_eq!((value.value, revision), (1, 1));
    /// # Ok(()) }
    /// ```
    pub fn watch(&self) -> Watch<A> {
        self.watching(Whole)
    }

    /// Watches what `project` makes of each committed state, for a page that needs only part
    /// of it: a revision whose projection equals the last one sent is skipped. Otherwise as
    /// [`watch`](Reference::watch); a projection that panics yields [`Error::Panicked`].
    ///
    /// ```no_run
    /// # use solid_objects::prelude::*;
    /// # #[actor]
    /// # #[derive(Default)]
    /// # pub struct Show { capacity: u32, held: u32, log: Vec<String> }
    /// # #[actor]
    /// # impl Show {}
    /// # async fn example(show: ShowRef) {
    /// // Only the seats left; a turn that changes just the log sends nothing.
    /// let mut seats_left = show.watch_with(|show| show.capacity - show.held);
    /// while let Some(Ok(item)) = seats_left.next().await {
    ///     println!("{:?} seats left", item.value());
    /// }
    /// # }
    /// ```
    pub fn watch_with<V, F>(&self, project: F) -> Watch<V>
    where
        F: Fn(&A) -> V + Send + 'static,
        V: PartialEq + Clone + Send + 'static,
    {
        self.watching(Projection {
            project,
            last: None,
        })
    }

    fn watching<P: Project<A>>(&self, project: P) -> Watch<P::View> {
        let start = || -> Result<Runtime> {
            refuse_inside_handler(A::TYPE_NAME, "watch")?;
            let runtime = self.prepare()?;
            self.authorize(&runtime, RequestKind::Subscription, "watch", &Value::Null)?;
            Ok(runtime)
        };
        let inner = match start() {
            Ok(runtime) => {
                let watcher = Watcher {
                    closing: runtime.engine().watchers().closing(),
                    runtime,
                    id: self.id().to_owned(),
                    subscription: None,
                    project,
                    incarnation: None,
                    last: None,
                    stale: true,
                    fresh: true,
                    retry_at: None,
                    ended: false,
                    actor: std::marker::PhantomData,
                };
                stream::unfold(watcher, |mut watcher| async move {
                    let item = watcher.next().await?;
                    Some((item, watcher))
                })
                .boxed()
            }
            Err(error) => stream::once(async move { Err(error) }).boxed(),
        };
        Watch { inner }
    }
}

/// What a watch sends of each state.
trait Project<A>: Send + 'static {
    type View: Send + 'static;

    /// What to send of `state`; `None` to skip it (unchanged).
    fn project(&mut self, actor_id: &str, state: A) -> Result<Option<Self::View>>;
}

/// The whole state, every revision.
struct Whole;

impl<A: Actor> Project<A> for Whole {
    type View = A;

    fn project(&mut self, _actor_id: &str, state: A) -> Result<Option<A>> {
        Ok(Some(state))
    }
}

/// The user's projection, when it changed.
struct Projection<F, V> {
    project: F,
    last: Option<V>,
}

impl<A, F, V> Project<A> for Projection<F, V>
where
    A: Actor,
    F: Fn(&A) -> V + Send + 'static,
    V: PartialEq + Clone + Send + 'static,
{
    type View = V;

    fn project(&mut self, actor_id: &str, state: A) -> Result<Option<V>> {
        // The projection is user code: a panic is an error item, never a panic here.
        let view = catch_unwind(AssertUnwindSafe(|| (self.project)(&state))).map_err(|panic| {
            Error::Panicked {
                during: format!("the projection of a watch of {} {actor_id:?}", A::TYPE_NAME),
                message: panic_text(&*panic).to_owned(),
            }
        })?;
        if self.last.as_ref() == Some(&view) {
            return Ok(None);
        }
        self.last = Some(view.clone());
        Ok(Some(view))
    }
}

/// A watch in progress.
struct Watcher<A, P> {
    runtime: Runtime,
    closing: tokio::sync::watch::Receiver<bool>,
    id: String,
    /// Taken at the first poll (so that a watch can be made outside a Tokio runtime), before
    /// the first read: no commit after that read goes unnoticed.
    subscription: Option<Subscription>,
    project: P,
    /// The incarnation watched, once read.
    incarnation: Option<i64>,
    /// The version of the last state considered.
    last: Option<Version>,
    /// Whether a commit may have happened since the last read.
    stale: bool,
    /// Whether the next read must go to the database (the first, and after a failure).
    fresh: bool,
    /// When to read again after a failed read.
    retry_at: Option<Instant>,
    ended: bool,
    actor: std::marker::PhantomData<fn() -> A>,
}

impl<A: Actor, P: Project<A>> Watcher<A, P> {
    async fn next(&mut self) -> Option<Result<Watched<P::View>>> {
        loop {
            if self.ended || *self.closing.borrow() {
                return None;
            }
            if std::mem::take(&mut self.stale) {
                match self.read().await {
                    Ok(instance) => {
                        if let Some(item) = self.consider(&instance) {
                            return Some(item);
                        }
                    }
                    Err(_) if *self.closing.borrow() => return None,
                    Err(error) => {
                        self.fresh = true;
                        self.retry_at = Some(Instant::now() + READ_RETRY);
                        return Some(Err(error));
                    }
                }
            }
            let subscription = self
                .subscription
                .as_mut()
                .expect("the first read subscribed");
            let retry_at = self.retry_at;
            tokio::select! {
                () = subscription.changed() => {}
                () = crate::engine::shut_down(&mut self.closing) => return None,
                () = sleep_until(retry_at) => self.retry_at = None,
            }
            self.stale = true;
        }
    }

    /// The newest state, within the runtime's sync timeout.
    async fn read(&mut self) -> Result<Arc<Instance>> {
        let engine = self.runtime.engine();
        let subscription = self
            .subscription
            .get_or_insert_with(|| engine.subscribe(A::TYPE_NAME, &self.id));
        let fresh = std::mem::take(&mut self.fresh);
        let deadline = deadline_after(self.runtime.sync_timeout());
        read_until(deadline, subscription.read(engine.reads(), fresh)).await
    }

    /// The item a state read makes, if any: `None` for a state already sent (or older), or
    /// a projection that did not change.
    fn consider(&mut self, instance: &Instance) -> Option<Result<Watched<P::View>>> {
        let version = instance.version();
        if self.last.is_some_and(|last| version <= last) {
            return None;
        }
        self.last = Some(version);
        let watched = *self.incarnation.get_or_insert(version.incarnation);
        if version.incarnation > watched {
            self.ended = true;
            return Some(Ok(Watched::Destroyed {
                incarnation: unsigned(watched),
            }));
        }
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id: &self.id,
        };
        let state = match crate::engine::decode_state::<A>(key, instance) {
            Ok(state) => state,
            Err(error) => return Some(Err(error)),
        };
        match self.project.project(&self.id, state) {
            Ok(Some(value)) => Some(Ok(Watched::State {
                value,
                incarnation: unsigned(version.incarnation),
                revision: unsigned(version.revision),
            })),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A stored count as the API gives it (never negative).
fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
