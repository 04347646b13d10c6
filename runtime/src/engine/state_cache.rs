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
//! The cache is bounded by its bytes and its entries; past either it evicts the entry used
//! least recently. States shorter than [`StateCache::SMALLEST`] are not kept: the lock reads
//! them in the row it returns anyway, at no cost worth a copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::Engine;
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

/// One cached state and when it was last used.
struct Entry {
    held: Held,
    used: u64,
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
            self.bytes -= entry.held.text.len();
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
    /// The most bytes of state text it holds; 0 turns it off.
    max_bytes: usize,
}

impl StateCache {
    /// The shortest state the cache keeps, in bytes.
    pub(crate) const SMALLEST: usize = 8 * 1024;

    /// An empty cache that holds at most `max_bytes` of state text (0: none).
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

    /// The state text of the row a lock returned: the row's own, or the held one when the
    /// lock left the state out because the row is still at the held version. A row at any
    /// other version was committed elsewhere: the actor's entry is dropped (unless a turn of
    /// this process already cached that very version).
    pub(super) fn locked(
        &self,
        key: ActorKey<'_, '_>,
        held: Option<Held>,
        row: &Instance,
    ) -> Option<Arc<String>> {
        let held = held?;
        if held.version == row.version() {
            return match row.state {
                Some(_) => None,
                None => Some(held.text),
            };
        }
        let actor = (key.actor_type.to_owned(), key.actor_id.to_owned());
        let mut entries = self.entries();
        let current = entries.by_actor.get(&actor).map(|entry| entry.held.version);
        if current.is_some_and(|version| version != row.version()) {
            entries.remove(&actor);
        }
        None
    }

    /// Keeps the state text a turn committed at `version`, unless it is small, larger than
    /// the whole cache, or older than what the cache holds for the actor already.
    fn committed(&self, key: ActorKey<'_, '_>, version: Version, text: String) {
        if text.len() < Self::SMALLEST || text.len() > self.max_bytes {
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
        entries.make_room(text.len(), self.max_bytes);
        entries.uses += 1;
        entries.bytes += text.len();
        let entry = Entry {
            held: Held {
                version,
                text: Arc::new(text),
            },
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

impl Engine {
    /// Keeps what a turn whose commit returned `Ok` wrote to its actor's row, `instance`
    /// being the row it locked: the state text at the next revision of that incarnation, or
    /// nothing when the turn destroyed the actor (its entry is dropped). `None`: the turn
    /// wrote no state (a rejection or failure), and the row is where it was.
    pub(super) fn state_written(
        &self,
        key: ActorKey<'_, '_>,
        instance: &Instance,
        written: Option<super::turn_writes::Writes>,
    ) {
        let Some(writes) = written else {
            return;
        };
        match writes.into_state() {
            Some(text) if self.states.max_bytes > 0 => {
                let version = Version {
                    incarnation: instance.incarnation,
                    revision: instance.revision + 1,
                };
                self.states.committed(key, version, text);
            }
            Some(_) => {}
            None => self.states.forget(key),
        }
    }
}
