//! Folding the charts' tallies: the rows that finished in each complete minute are counted
//! once into the tallies the charts read, a few minutes at a time, by whichever process's
//! workers get to it first.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::conflicts::rerun_conflicts;
use super::core::Core;
use super::micros;
use crate::error::Result;
use crate::store::activity_tallies::MINUTE;
use crate::store::Transaction;

/// How long after a minute ends its rows are folded: a turn that stamped its finish in that
/// minute has long committed by then, on a host whose clock is up to a minute behind too.
const FOLD_LAG: i64 = 2 * MINUTE;

/// How far back the first fold of a database reaches: the longest window, a day, and the
/// half hour its first slice may start before that, and more. Older rows are never charted.
const FOLD_HISTORY: i64 = 25 * 60 * MINUTE;

/// How long the tallies of a minute are kept at least, whatever the finished messages'
/// retention: the longest window, a day, and its first slice's half hour. A dead letter kept
/// past that retention stays in the day's chart, as does every turn the day's chart counts.
pub(crate) const TALLIES_KEPT: i64 = FOLD_HISTORY;

/// The minutes one statement of a fold reads at first, so a fold that catches up (after an
/// upgrade, or a time with no workers) holds no lock for long.
const FOLD_STEP: i64 = 10 * MINUTE;

/// The most minutes one statement of a fold reads once the steps before it in its
/// transaction found nothing: a quiet stretch (a new database's day of history) is crossed
/// in a few statements, not a transaction per step.
const FOLD_LEAP: i64 = 8 * FOLD_STEP;

/// How long (on the runtime's clock) folds are left for later passes while transactions that
/// began before them are still open (PostgreSQL), so a turn that stamped its finish under
/// the mark a fold moves commits before the fold reads; past it, a fold folds anyway: a
/// transaction left open on the database (by the application, under any role) delays the
/// charts and the retention that waits for them by this much at most.
const HELD_BACK_AT_MOST: i64 = MINUTE;

/// How long a fold waits in its pass for transactions older than it to end before it
/// leaves the fold for a later pass (a pass while folds are held back asks once): turns in
/// flight end in far less.
const OLDER_WRITERS_WAIT: Duration = Duration::from_millis(100);

/// How often a fold that waits for older transactions asks again.
const OLDER_WRITERS_POLL: Duration = Duration::from_millis(5);

/// Since when (the runtime's clock, in microseconds) this process's folds have been left for
/// later passes because older transactions were open, and when one last was.
#[derive(Debug, Default)]
pub(crate) struct HeldBack {
    since: Mutex<Option<(i64, i64)>>,
}

impl HeldBack {
    /// Whether a fold at `now` that found older transactions open is left for a later pass:
    /// until [`HELD_BACK_AT_MOST`] after the first of the folds held back one after the
    /// other. A fold whose last held-back one was more than twice that before it (no fold
    /// was due meanwhile), or after it (the clock stepped back), starts a new wait.
    fn holds_back(&self, now: i64) -> bool {
        let mut held = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        let since = match *held {
            Some((since, last)) if (0..=2 * HELD_BACK_AT_MOST).contains(&(now - last)) => since,
            _ => now,
        };
        *held = Some((since, now));
        now - since < HELD_BACK_AT_MOST
    }

    /// Whether folds are being held back now.
    fn holding(&self) -> bool {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// A fold found no older transaction open, or folded anyway.
    fn clear(&self) {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The fold job. It borrows the core and the state of folds held back.
#[derive(Clone, Copy)]
pub(crate) struct ActivityFold<'e> {
    core: &'e Core,
    held_back: &'e HeldBack,
}

impl<'e> ActivityFold<'e> {
    /// The fold job over the engine's core.
    pub(super) fn new(core: &'e Core, held_back: &'e HeldBack) -> Self {
        Self { core, held_back }
    }
}

impl ActivityFold<'_> {
    /// Folds every minute that ended [`FOLD_LAG`] ago or more and is not folded yet, from
    /// the fold mark (or a day and an hour back, for a database never folded), a transaction
    /// per step that found something ([`step`](Self::step)); returns how many minutes. A
    /// process that finds another folding leaves it to that one.
    pub(crate) async fn run(&self) -> Result<i64> {
        let mut folded = 0;
        loop {
            let (earliest, target) = self.bounds();
            // A read first, so an idle database's workers begin no transaction to find the
            // mark where it should be.
            let mark = self.core.store().fold_mark().await?;
            if mark.max(earliest) >= target {
                return Ok(folded);
            }
            let minutes = rerun_conflicts(|| self.step()).await?;
            if minutes == 0 {
                return Ok(folded);
            }
            folded += minutes;
        }
    }

    /// The first minute a fold may start at, and the minute folding stops before, now.
    fn bounds(&self) -> (i64, i64) {
        let now = micros(self.core.now());
        let minute = now - now.rem_euclid(MINUTE);
        (minute - FOLD_HISTORY, minute - FOLD_LAG)
    }

    /// Folds from the fold mark, in a transaction of its own, [`FOLD_STEP`] minutes at a time
    /// until a step finds rows (each step that finds none twice as long as the one before,
    /// up to [`FOLD_LEAP`]), and moves the mark past them; returns how many minutes (0:
    /// nothing to fold, or another process holds the mark).
    async fn step(&self) -> Result<i64> {
        let mut tx = self.core.begin(None).await?;
        let Some(mark) = tx.lock_fold_mark().await? else {
            Core::release(tx).await;
            return Ok(0);
        };
        // A turn that stamped its finish under the mark this fold moves commits before the
        // fold reads: while one may still be open, the fold is left for a later pass, for a
        // while.
        // Held back already, a pass asks once: a worker's passes lose no time to it.
        let wait = match self.held_back.holding() {
            true => Duration::ZERO,
            false => OLDER_WRITERS_WAIT,
        };
        if older_writers_end(&mut *tx, wait).await? {
            self.held_back.clear();
        } else if self.held_back.holds_back(micros(self.core.now())) {
            Core::release(tx).await;
            return Ok(0);
        } else {
            tracing::warn!(
                "the charts' fold ran while a transaction older than it was still open (for \
                 a minute or more): a turn that transaction committed with a finish in the \
                 minutes it folded is in no chart; end transactions left open on the server"
            );
            self.held_back.clear();
        }
        let (earliest, target) = self.bounds();
        let start = mark.max(earliest);
        let (mut from, mut step) = (start, FOLD_STEP);
        while from < target {
            let until = target.min(from.saturating_add(step));
            let tallied = tx.fold_activity(from, until).await?;
            from = until;
            if tallied > 0 {
                break;
            }
            step = step.saturating_mul(2).min(FOLD_LEAP);
        }
        if from <= start {
            Core::release(tx).await;
            return Ok(0);
        }
        tx.move_fold_mark(from).await?;
        tx.commit().await?;
        Ok((from - start) / MINUTE)
    }
}

/// Whether the transactions older than `tx` end within `wait`.
async fn older_writers_end(tx: &mut dyn Transaction, wait: Duration) -> Result<bool> {
    let until = Instant::now() + wait;
    loop {
        if tx.older_writers_ended().await? {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        tokio::time::sleep(OLDER_WRITERS_POLL).await;
    }
}
