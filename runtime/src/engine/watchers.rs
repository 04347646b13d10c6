//! Who watches which actor, and how they hear of its commits.
//!
//! Each watched actor has one entry: a `tokio::sync::watch` channel of pokes (a counter that
//! only says "something was committed"), the newest version anyone saw, and the newest state
//! read, which the actor's watchers share. A commit in this process pokes the entry after its
//! `COMMIT` returned (never from inside a transaction or a group member's savepoint, which
//! may still roll back); commits in other processes reach it through PostgreSQL's
//! `NOTIFY`, and through one poll of the watched actors' revisions per interval (SQLite's
//! only way; on PostgreSQL the net under the notices). On PostgreSQL only watched actors
//! notify (a notifying commit takes a database-wide lock): a runtime that listens keeps a
//! lease on each actor it watches in `solid_watched`.
//!
//! Nothing here makes a commit wait or grows with the number of commits: a poke overwrites
//! the last one, and a watcher that was slow reads only the newest state when it comes
//! back. A watcher holds no database connection between its reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::error::Result;
use crate::store::{ActorKey, Instance, Reads, StateNotice, Store, Version};

/// How long the task that follows other processes' commits waits before it listens again
/// after an error.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
/// How many actors one poll of revisions asks about at once.
const POLL_BATCH: usize = 500;
/// How long a runtime's lease on the actors it watches lasts (renewed a third of the way,
/// and whenever the set of watched actors changes): a runtime that died stops their notices
/// within this.
const WATCH_LEASE: Duration = Duration::from_secs(60);

type Key = (String, String);

/// The watched actors of one runtime.
pub(crate) struct Watchers {
    /// This runtime's id in the leases on watched actors.
    id: String,
    actors: Mutex<Actors>,
    /// Woken when an actor is first watched or no longer watched: the follower renews the
    /// leases, or stops.
    changed: Arc<Notify>,
    /// Set once the runtime shuts down: every watch ends.
    closed: watch::Sender<bool>,
    /// How often commits of other processes are polled for where they are not notified.
    poll: Duration,
    /// Whether to `LISTEN` for other processes' commits where the database can.
    listen: bool,
}

#[derive(Default)]
struct Actors {
    entries: HashMap<Key, Arc<ActorWatch>>,
    /// Bumped whenever an actor is first watched or no longer watched.
    generation: u64,
    /// Whether the task that follows other processes' commits runs.
    following: bool,
}

/// One watched actor.
struct ActorWatch {
    /// A counter bumped at each commit this runtime hears of.
    pokes: watch::Sender<u64>,
    /// The newest version any commit notice, poll or read showed.
    known: Mutex<Version>,
    /// The newest state read, with the poke count at which its read began: it holds every
    /// commit poked up to that count, so watchers that were poked no later reuse it.
    latest: tokio::sync::Mutex<Option<(u64, Arc<Instance>)>>,
}

impl ActorWatch {
    /// Records a version seen; true if it is newer than any seen before.
    fn learn(&self, version: Version) -> bool {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if version > *known {
            *known = version;
            true
        } else {
            false
        }
    }

    fn poke(&self) {
        self.pokes
            .send_modify(|count| *count = count.wrapping_add(1));
    }
}

impl Watchers {
    pub(crate) fn new(poll: Duration, listen: bool) -> Self {
        Self {
            id: crate::ids::new_request_id(),
            actors: Mutex::default(),
            changed: Arc::default(),
            closed: watch::Sender::new(false),
            poll,
            listen,
        }
    }

    fn actors(&self) -> std::sync::MutexGuard<'_, Actors> {
        self.actors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the actor's watchers, if it has any, that a commit changed its state. Called
    /// after the commit returned; it never waits.
    pub(crate) fn committed(&self, key: ActorKey<'_, '_>) {
        let actors = self.actors();
        if actors.entries.is_empty() {
            return;
        }
        let found = actors
            .entries
            .get(&(key.actor_type.to_owned(), key.actor_id.to_owned()));
        if let Some(entry) = found {
            entry.poke();
        }
    }

    /// Ends every watch: the runtime shuts down.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Whether the runtime shut down.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// A new watcher of `key`; the first watcher of a runtime also starts following the
    /// commits of other processes (until the last watcher goes).
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        store: &Arc<dyn Store>,
        actor_type: &'static str,
        actor_id: &str,
    ) -> Subscription {
        let key = (actor_type.to_owned(), actor_id.to_owned());
        let mut actors = self.actors();
        let entry = match actors.entries.get(&key) {
            Some(entry) => Arc::clone(entry),
            None => {
                let entry = Arc::new(ActorWatch {
                    pokes: watch::Sender::new(0),
                    known: Mutex::default(),
                    latest: tokio::sync::Mutex::new(None),
                });
                actors.entries.insert(key.clone(), Arc::clone(&entry));
                actors.generation = actors.generation.wrapping_add(1);
                self.changed.notify_one();
                entry
            }
        };
        let pokes = entry.pokes.subscribe();
        if !actors.following && !*self.closed.borrow() {
            actors.following = true;
            let follower = follow(
                Arc::downgrade(self),
                Arc::clone(store),
                self.closing(),
                Arc::clone(&self.changed),
            );
            tokio::spawn(follower);
        }
        Subscription {
            watchers: Arc::clone(self),
            key,
            entry,
            pokes: Some(pokes),
        }
    }

    /// Pokes the watchers of every actor whose notice (or polled version) is newer than any
    /// seen.
    fn noticed(&self, notices: &[StateNotice]) {
        let actors = self.actors();
        for notice in notices {
            let key = (notice.actor_type.clone(), notice.actor_id.clone());
            if let Some(entry) = actors.entries.get(&key) {
                if entry.learn(notice.version) {
                    entry.poke();
                }
            }
        }
    }

    /// Whether no actor is watched any more; if so, the follower stops (a later watcher
    /// starts another).
    fn stop_if_unwatched(&self) -> bool {
        let mut actors = self.actors();
        if actors.entries.is_empty() {
            actors.following = false;
            true
        } else {
            false
        }
    }

    /// Renews this runtime's lease on the actors it watches, if the set changed since
    /// `announced` or a third of the lease went by; `announced` is then this announcement.
    async fn announce(&self, store: &dyn Store, announced: &mut Option<(u64, Instant)>) {
        let (generation, keys) = {
            let actors = self.actors();
            let keys: Vec<&Key> = actors.entries.keys().collect();
            let keys = serde_json::to_string(&keys).unwrap_or_else(|_| "[]".to_owned());
            (actors.generation, keys)
        };
        let due = announced
            .is_none_or(|(last, at)| last != generation || at.elapsed() >= WATCH_LEASE / 3);
        if !due {
            return;
        }
        match store.announce_watched(&self.id, &keys, WATCH_LEASE).await {
            Ok(()) => *announced = Some((generation, Instant::now())),
            Err(error) => {
                tracing::debug!(%error, "renewing the leases on watched actors failed; trying again");
            }
        }
    }

    /// Gives up this runtime's leases: it watches nothing any more.
    async fn withdraw(&self, store: &dyn Store) {
        if let Err(error) = store.announce_watched(&self.id, "[]", WATCH_LEASE).await {
            tracing::debug!(%error, "giving up the leases on watched actors failed; they run out");
        }
    }

    /// Reads the versions of every watched actor and pokes those that moved.
    async fn refresh(&self, store: &dyn Store) -> Result<()> {
        let keys: Vec<Key> = self.actors().entries.keys().cloned().collect();
        for batch in keys.chunks(POLL_BATCH) {
            let pairs = serde_json::to_string(batch).unwrap_or_else(|_| "[]".to_owned());
            let versions = store.versions(&pairs).await?;
            self.noticed(&versions);
        }
        Ok(())
    }
}

/// Follows the commits of other processes while any actor is watched: `LISTEN` where the
/// database notifies (PostgreSQL, with a lease on each watched actor so that its commits
/// notify), and a poll of the watched actors' revisions every interval, which also catches
/// a commit whose notice could not reach this runtime (one that began before a lease).
async fn follow(
    watchers: Weak<Watchers>,
    store: Arc<dyn Store>,
    mut closed: watch::Receiver<bool>,
    changed: Arc<Notify>,
) {
    let (poll, listen) = match watchers.upgrade() {
        Some(watchers) => (watchers.poll, watchers.listen),
        None => return,
    };
    let mut notices = None;
    let mut listening = listen;
    let mut announced = None;
    loop {
        if listening && notices.is_none() {
            match store.listen_states().await {
                Ok(Some(listener)) => {
                    notices = Some(listener);
                    // Commits between a watcher's first read and this LISTEN were not
                    // notified to it: read where every watched actor stands now.
                    if !refresh(&watchers, &*store).await {
                        return;
                    }
                }
                Ok(None) => listening = false,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for committed states; polling until it can");
                }
            }
        }
        if notices.is_some() {
            match watchers.upgrade() {
                Some(watchers) => watchers.announce(&*store, &mut announced).await,
                None => return,
            }
        }
        let pause = if notices.is_some() || !listening {
            poll
        } else {
            LISTEN_RETRY.min(poll)
        };
        let stop = tokio::select! {
            () = shut_down(&mut closed) => true,
            notice = next_notice(&mut notices) => match notice {
                Ok(Some(notice)) => match watchers.upgrade() {
                    Some(watchers) => {
                        watchers.noticed(&[notice]);
                        false
                    }
                    None => true,
                },
                // Notices may have been lost while the connection was down.
                Ok(None) => !refresh(&watchers, &*store).await,
                Err(error) => {
                    tracing::warn!(%error, "listening for committed states failed; listening again");
                    notices = None;
                    false
                }
            },
            () = tokio::time::sleep(pause) => !refresh(&watchers, &*store).await,
            // An actor watched or left: renew the leases (above), or stop (below).
            () = changed.notified() => false,
        };
        let Some(live) = watchers.upgrade() else {
            return;
        };
        if stop || live.stop_if_unwatched() {
            if announced.is_some() {
                live.withdraw(&*store).await;
            }
            return;
        }
    }
}

/// Returns once the runtime shut down (or its engine is gone).
pub(crate) async fn shut_down(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closed| *closed).await;
}

/// The next notice, or never without a listener.
async fn next_notice(
    notices: &mut Option<Box<dyn crate::store::StateNotices>>,
) -> Result<Option<StateNotice>> {
    match notices {
        Some(notices) => notices.next().await,
        None => std::future::pending().await,
    }
}

/// Refreshes every watched actor's version; false once the runtime is gone.
async fn refresh(watchers: &Weak<Watchers>, store: &dyn Store) -> bool {
    let Some(watchers) = watchers.upgrade() else {
        return false;
    };
    if let Err(error) = watchers.refresh(store).await {
        tracing::debug!(%error, "polling the watched actors' revisions failed; trying again");
    }
    true
}

/// One watcher's place among the watchers of its actor. Dropped, it leaves; the last to
/// leave removes the actor's entry.
pub(crate) struct Subscription {
    watchers: Arc<Watchers>,
    key: Key,
    entry: Arc<ActorWatch>,
    /// Always `Some` until dropped.
    pokes: Option<watch::Receiver<u64>>,
}

impl Subscription {
    fn pokes(&mut self) -> &mut watch::Receiver<u64> {
        self.pokes
            .as_mut()
            .expect("a live subscription has its receiver")
    }

    /// Waits for the next commit this runtime hears of.
    pub(crate) async fn changed(&mut self) {
        // The sender lives in the entry this subscription holds: it cannot close.
        let _ = self.pokes().changed().await;
    }

    /// The actor's newest state: read from the database if `fresh`, or if no watcher read
    /// it since the last poke, else the state another watcher of the actor read.
    pub(crate) async fn read(&mut self, store: &dyn Reads, fresh: bool) -> Result<Arc<Instance>> {
        let pokes = *self.pokes().borrow_and_update();
        let mut latest = self.entry.latest.lock().await;
        if let Some((read_at, instance)) = &*latest {
            if !fresh && *read_at >= pokes {
                return Ok(Arc::clone(instance));
            }
        }
        let key = ActorKey {
            actor_type: &self.key.0,
            actor_id: &self.key.1,
        };
        let instance = Arc::new(store.read_instance(key).await?.unwrap_or_default());
        let version = instance.version();
        // A state at least as new as the one kept holds every commit the kept one held.
        let newer = latest
            .as_ref()
            .is_none_or(|(_, kept)| kept.version() <= version);
        if newer {
            let read_at = latest.as_ref().map_or(pokes, |(at, _)| (*at).max(pokes));
            *latest = Some((read_at, Arc::clone(&instance)));
        }
        drop(latest);
        // A version no notice told of (a commit of another process before the follower
        // listened, say): the actor's other watchers read it too.
        if self.entry.learn(version) {
            self.entry.poke();
        }
        Ok(instance)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut actors = self.watchers.actors();
        drop(self.pokes.take());
        if self.entry.pokes.receiver_count() == 0 {
            let ours = actors
                .entries
                .get(&self.key)
                .is_some_and(|entry| Arc::ptr_eq(entry, &self.entry));
            if ours {
                actors.entries.remove(&self.key);
                actors.generation = actors.generation.wrapping_add(1);
                self.watchers.changed.notify_one();
            }
        }
    }
}
