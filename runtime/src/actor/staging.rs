//! [`Staging`]: what a turn's builders stage for its commit, shared with the turn rather
//! than borrowed from it, and closed once the handler returned.

use std::sync::{Arc, Mutex, PoisonError};

/// What builders stage for their turn: shared with the turn, not borrowed from it. Closed
/// (`None`) once the handler returned: a builder kept past its turn cannot stage anything.
pub(crate) struct Staging<T>(Arc<Mutex<Option<Vec<T>>>>);

impl<T> Default for Staging<T> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Some(Vec::new()))))
    }
}

impl<T> Clone for Staging<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Staging<T> {
    /// Stages `item`, returning its place; a builder used after its turn ended is a bug in
    /// the handler, and panics rather than drop what it stages without a word.
    pub(crate) fn push(&self, item: T) -> usize {
        self.update_all(|staged| {
            staged.push(item);
            staged.len() - 1
        })
    }

    /// Changes the item staged at `index` (a reply named for an emitted effect).
    pub(crate) fn update(&self, index: usize, change: impl FnOnce(&mut T)) {
        self.update_all(|staged| {
            if let Some(item) = staged.get_mut(index) {
                change(item);
            }
        });
    }

    fn update_all<R>(&self, change: impl FnOnce(&mut Vec<T>) -> R) -> R {
        match &mut *self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(staged) => change(staged),
            None => panic!(
                "a send, a schedule or an effect's reply was staged after its turn ended: use \
                 the builder inside the handler, before it returns"
            ),
        }
    }

    /// What `read` makes of the items staged so far; `None` once the staging is closed.
    pub(crate) fn read<R>(&self, read: impl FnOnce(&[T]) -> R) -> Option<R> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .map(read)
    }

    /// Everything staged, closing the staging.
    pub(crate) fn close(&self) -> Vec<T> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }

    pub(crate) fn len(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, Vec::len)
    }
}
