//! The states this process committed, by actor and version, so that a turn whose actor's row
//! is still at that version does not read its state back from the database.
//!
//! The version check is the lock's: a turn looks up what it holds, passes that version to
//! [`Transaction::lock_actor`](crate::store::Transaction::lock_actor), and the row comes back
//! without its state only when it is still at that version (the state then is the text this
//! process wrote). Any other version means a commit elsewhere (another process, a destroy):
//! the row's state is read, and the entry dropped. An entry is only ever made from a turn
//! whose commit returned `Ok`, with the text that turn wrote and the version it wrote
//! (revision + 1 in the incarnation it read), so an entry says what its row holds at that
//! version: a version is written once (a turn writes it under the row's lock; destroying an
//! actor moves the revision and the incarnation on).
//!
//! Beside the text, an entry keeps the state the turn read back from it before committing
//! (what decoding the text gives): the next turn that finds the row at that version takes it
//! and runs on it without parsing the text. Only one turn can take it; a turn that finds it
//! taken decodes the text, and a turn that took it and committed nothing (a rejection, a
//! failure) leaves the text for the next.
//!
//! The cache is bounded by its bytes and its entries; past either it evicts the entry used
//! least recently. An entry counts its text twice, for the decoded state beside it. States
//! shorter than [`StateCache::SMALLEST`] are not kept: the lock reads them in the row it
//! returns anyway, at no cost worth a copy.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::decode_stored;
use crate::actor::Actor;
use crate::error::Result;
use crate::store::{ActorKey, Instance, Version};

/// The most entries the cache holds, whatever its byte bound.
const MAX_ENTRIES: usize = 1024;

/// A state this process committed: the version it wrote and its stored text.
///
/// An `Arc<String>` takes the turn's encoded text without copying it.
#[derive(Clone)]
pub(super) struct Held {
    version: Version,
    text: Arc<String>,
}

impl Held {
    /// The version the state was committed at: what the lock binds as known.
    pub(super) fn version(&self) -> Version {
        self.version
    }
}

/// The state a turn runs on when its lock left the row's state out: the held text, and the
/// decoded state if this turn took it.
pub(super) struct Current {
    text: Arc<String>,
    decoded: Option<Box<dyn Any + Send + Sync>>,
}

impl Current {
    /// The actor's state: the decoded one taken from the cache, or the text decoded (written
    /// by version `state_version` of its type).
    pub(super) fn decode<A: Actor>(
        self,
        key: ActorKey<'static, '_>,
        state_version: i64,
    ) -> Result<A> {
        match self.decoded.map(|decoded| decoded.downcast::<A>()) {
            Some(Ok(state)) => Ok(*state),
            _ => decode_stored(key, state_version, Some(&self.text)),
        }
    }
}

/// Decodes the state of a row a lock returned: the row's own text, or the held state when
/// the lock left it out.
pub(super) fn decode_locked<A: Actor>(
    key: ActorKey<'static, '_>,
    row: &Instance,
    current: Option<Current>,
) -> Result<A> {
    match (&row.state, current) {
        (None, Some(current)) => current.decode(key, row.state_version),
        (state, _) => decode_stored(key, row.state_version, state.as_deref()),
    }
}

/// One cached state, its decoded form until a turn takes it, and when it was last used.
struct Entry {
    held: Held,
    decoded: Option<Box<dyn Any + Send + Sync>>,
    used: u64,
}

impl Entry {
    /// The bytes it counts against the bound: its text, twice.
    fn cost(&self) -> usize {
        cost(self.held.text.len())
    }
}

/// The bytes a state of `len` bytes of text counts against the bound.
fn cost(len: usize) -> usize {
    len.saturating_mul(2)
}

/// The entries, their total bytes, and a use counter that orders them for eviction.
#[derive(Default)]
struct Entries {
    by_actor: HashMap<(String, String), Entry>,
    bytes: usize,
    uses: u64,
}

impl Entries {
    fn remove(&mut self, actor: &(String, String)) {
        if let Some(entry) = self.by_actor.remove(actor) {
            self.bytes -= entry.cost();
        }
    }

    /// Evicts the least recently used entries until `bytes` more fit in `max_bytes` and
    /// one more entry fits.
    fn make_room(&mut self, bytes: usize, max_bytes: usize) {
        while !self.by_actor.is_empty()
            && (self.by_actor.len() >= MAX_ENTRIES || self.bytes + bytes > max_bytes)
        {
            let oldest = self
                .by_actor
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(actor, _)| actor.clone());
            match oldest {
                Some(actor) => self.remove(&actor),
                None => break,
            }
        }
    }
}

/// A bounded cache of committed states by actor and version (see the module doc).
pub(crate) struct StateCache {
    entries: Mutex<Entries>,
    /// The most bytes its entries count (each its text twice); 0 turns it off.
    max_bytes: usize,
}

impl StateCache {
    /// The shortest state the cache keeps, in bytes.
    pub(crate) const SMALLEST: usize = 8 * 1024;

    /// An empty cache whose entries count at most `max_bytes` (0: none).
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(Entries::default()),
            max_bytes,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state this process holds for the actor, if any: its version is what the turn's
    /// lock binds as known.
    pub(super) fn held(&self, key: ActorKey<'_, '_>) -> Option<Held> {
        if self.max_bytes == 0 {
            return None;
        }
        let mut entries = self.entries();
        if entries.by_actor.is_empty() {
            return None;
        }
        entries.uses += 1;
        let uses = entries.uses;
        let actor = (key.actor_type.to_owned(), key.actor_id.to_owned());
        let entry = entries.by_actor.get_mut(&actor)?;
        entry.used = uses;
        Some(entry.held.clone())
    }

    /// What a turn runs on when the lock left the row's state out, the row being still at
    /// the `held` version: the held text, and the decoded state unless another turn took it.
    /// `None` when the lock returned the row's state: a row at another version than the held
    /// one was committed elsewhere, and the actor's entry is dropped (unless a turn of this
    /// process already cached that very version).
    pub(super) fn locked(
        &self,
        key: ActorKey<'_, '_>,
        held: Option<Held>,
        row: &Instance,
    ) -> Option<Current> {
        let held = held?;
        let actor = (key.actor_type.to_owned(), key.actor_id.to_owned());
        let mut entries = self.entries();
        let entry = entries.by_actor.get_mut(&actor);
        if held.version == row.version() {
            if row.state.is_some() {
                return None;
            }
            let decoded = entry
                .filter(|entry| entry.held.version == held.version)
                .and_then(|entry| entry.decoded.take());
            return Some(Current {
                text: held.text,
                decoded,
            });
        }
        if entry.is_some_and(|entry| entry.held.version != row.version()) {
            entries.remove(&actor);
        }
        None
    }

    /// Keeps the state text a turn committed at `version` and the state read back from it,
    /// unless it is small, larger than the whole cache, or older than what the cache holds for
    /// the actor already.
    fn committed(
        &self,
        key: ActorKey<'_, '_>,
        version: Version,
        text: String,
        decoded: Box<dyn Any + Send + Sync>,
    ) {
        if text.len() < Self::SMALLEST || cost(text.len()) > self.max_bytes {
            self.forget(key);
            return;
        }
        let actor = (key.actor_type.to_owned(), key.actor_id.to_owned());
        let mut entries = self.entries();
        if let Some(entry) = entries.by_actor.get(&actor) {
            if entry.held.version >= version {
                return;
            }
        }
        entries.remove(&actor);
        entries.make_room(cost(text.len()), self.max_bytes);
        entries.uses += 1;
        entries.bytes += cost(text.len());
        let entry = Entry {
            held: Held {
                version,
                text: Arc::new(text),
            },
            decoded: Some(decoded),
            used: entries.uses,
        };
        entries.by_actor.insert(actor, entry);
    }

    /// Drops what the cache holds for the actor.
    pub(super) fn forget(&self, key: ActorKey<'_, '_>) {
        if self.max_bytes == 0 {
            return;
        }
        let actor = (key.actor_type.to_owned(), key.actor_id.to_owned());
        self.entries().remove(&actor);
    }
}

impl StateCache {
    /// Keeps what a turn whose commit returned `Ok` wrote to its actor's row, `ran_on`
    /// being the version of the row it ran on: the state text at the next revision of that
    /// incarnation, or nothing when the turn destroyed the actor (its entry is dropped).
    /// `None`: the turn wrote no state (a rejection or failure), and the row is where it was.
    pub(super) fn turn_written(
        &self,
        key: ActorKey<'_, '_>,
        ran_on: Version,
        written: Option<super::turn_writes::Writes>,
    ) {
        let Some(writes) = written else {
            return;
        };
        match writes.into_state() {
            Some((text, decoded)) if self.max_bytes > 0 => {
                let version = Version {
                    incarnation: ran_on.incarnation,
                    revision: ran_on.revision + 1,
                };
                self.committed(key, version, text, decoded);
            }
            Some(_) => {}
            None => self.forget(key),
        }
    }
}
