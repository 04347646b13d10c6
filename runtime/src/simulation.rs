//! Fault injection for deterministic simulation tests: a [`Schedule`] sees every step the
//! store takes and decides, at each, whether it proceeds, fails as a real database can, or
//! hangs there.
//!
//! A runtime built with [`Builder::simulation`](crate::Builder::simulation) runs its SQLite
//! store behind the schedule: each transaction's `BEGIN`, each statement (the runtime's own,
//! not a handler's), and each `COMMIT` asks [`Schedule::at`] first. A test drives one such
//! runtime from a seeded generator: which operation runs next, which step fails and how, when
//! the runtime crashes. It replays a failing run from its seed, because nothing else in the
//! run is random: with [`seed_ids`] the ids the runtime makes (request and effect ids, retry
//! jitter) come from the seed too.
//!
//! A step that hangs never returns: the test then drops the future waiting on it (a caller
//! that went away at that await) or the whole runtime with the tokio runtime it ran on (a
//! crash at that step: connections closed without a commit, tasks gone).

use std::cell::RefCell;

/// Where in a transaction the store is about to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// A write transaction's `BEGIN`.
    Begin,
    /// One of the runtime's statements, in a transaction or on the read pool.
    Statement,
    /// A write transaction's `COMMIT`.
    Commit,
}

/// What the store does at a [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// Goes on as usual.
    Proceed,
    /// Fails before the step as a busy SQLite does: another connection held the lock.
    Busy,
    /// Fails before the step as SQLite does on an I/O error: the disk failed a read or write.
    Io,
    /// Never returns, before the step: the test drops the future that waits (a cancellation
    /// or a crash there).
    Hang,
    /// At a `COMMIT`: commits, then never returns (a crash after the commit, before its
    /// answer). Elsewhere, as [`Fault::Hang`].
    HangAfter,
    /// Fails before the step as a server does when another transaction won: a
    /// serialization failure or a deadlock (PostgreSQL), a certification failure (Galera).
    /// Running the whole transaction again resolves it.
    Conflict,
    /// At a `COMMIT`: commits, then fails as a connection lost before its answer came (the
    /// server committed; the runtime cannot know). Elsewhere, fails before the step as a
    /// lost connection.
    LostAfter,
}

/// Decides what the store does at each step; see the [module docs](self).
pub trait Schedule: Send + Sync + 'static {
    /// What the store does at `step`. Called once per step, in the order the steps come.
    fn at(&self, step: Step) -> Fault;

    /// Told when a step starts to hang: before it ([`Fault::Hang`]), or once its `COMMIT`
    /// committed ([`Fault::HangAfter`]), so a simulator that waits for the hang hears of it
    /// only when nothing of the step is still running.
    fn hanging(&self, step: Step) {
        let _ = step;
    }

    /// Told when the future of a step that hung ([`Fault::Hang`], [`Fault::HangAfter`]) is
    /// dropped, so the schedule knows which hangs something still waits on.
    fn released(&self, step: Step) {
        let _ = step;
    }
}

/// Keeps a paused tokio clock from moving on by itself while the guard lives: a statement
/// runs on SQLite's own thread, and a paused runtime with nothing else to do would otherwise
/// jump to its next timer meanwhile, at a moment the run does not choose. A blocking task
/// holds the clock (tokio does not auto-advance while one runs) until the guard drops.
/// Outside a simulation (no [`seed_ids`] on this thread) the guard holds nothing.
pub(crate) struct ClockHeld(#[allow(dead_code)] Option<std::sync::mpsc::Sender<()>>);

/// Holds the paused clock until the guard drops, in a simulation; see [`ClockHeld`].
pub(crate) fn hold_clock() -> ClockHeld {
    if SEEDED.with(|seeded| seeded.borrow().is_none()) {
        return ClockHeld(None);
    }
    let (release, released) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        // Ends when the guard's sender drops.
        let _ = released.recv();
    });
    ClockHeld(Some(release))
}

/// A defect fixed in an earlier release, which a simulation puts back to show that it
/// finds it ([`reintroduce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Defect {
    /// A turn cancelled mid-way is not undone: SQLite's writer keeps its statements, and
    /// whoever takes the writer next commits them with its own.
    CancelledTurnKept,
    /// A turn that failed outside its handler (a statement of its writes) is not counted as
    /// an attempt of its message: it stays ready, as if it never ran.
    FailureOutsideHandlerUncounted,
    /// A claim that takes over an effect whose runner's lease ran out does not count the
    /// attempt it takes over: the effect's handler runs more often than its attempts say,
    /// and past its retry policy's limit.
    ReclaimedLeaseUncounted,
    /// A conflict with another transaction is counted as a failed attempt of the turn's
    /// message, so a hot actor's healthy messages die of conflicts.
    ConflictCountedAsFailure,
    /// A synchronous call whose connection was lost with its `COMMIT` tells its caller that
    /// the database was unavailable and nothing of the call was written, instead of reading
    /// its message back: a turn the server committed is reported as one that was not.
    LostCommitReportedAsFailed,
    /// A synchronous call under an idempotency key does not look up a message already
    /// committed under that key: its retry, after an answer was lost, runs the operation
    /// again or fails on the key's unique index instead of answering what the first did.
    KeyedCallNotLookedUp,
    /// A failed message's retry time is computed from the host's clock, not the runtime's
    /// [`Clock`](crate::Clock): under a clock of its own (a manual clock, or a host whose
    /// clock was stepped), the retry comes at once or never.
    RetryOnHostClock,
}

thread_local! {
    /// The defect this thread's simulation put back, if any.
    static REINTRODUCED: std::cell::Cell<Option<Defect>> = const { std::cell::Cell::new(None) };
}

/// Puts `defect` back in the runtime on this thread (`None`: the runtime as it is), so a
/// simulation can show how many seeds it takes to find it.
pub fn reintroduce(defect: Option<Defect>) {
    REINTRODUCED.with(|reintroduced| reintroduced.set(defect));
}

/// Whether this thread's simulation put `defect` back.
pub(crate) fn reintroduced(defect: Defect) -> bool {
    REINTRODUCED.with(|reintroduced| reintroduced.get() == Some(defect))
}

thread_local! {
    /// The seeded source of this thread's ids, if a simulation set one.
    static SEEDED: RefCell<Option<SeededIds>> = const { RefCell::new(None) };
}

/// Ids drawn from a seed: a counter behind a fixed version-7 timestamp, so they are unique,
/// ordered by creation, and the same in every run from one seed.
struct SeededIds {
    seed: u64,
    next: u64,
}

/// Makes the ids the runtime creates on this thread (request ids, effect ids, retry jitter)
/// come from `seed`, or, with `None`, from the system's clock and randomness again.
///
/// A simulation runs its world on one thread (a current-thread tokio runtime), so every id
/// of a run comes from its seed and a run replays the same from it.
pub fn seed_ids(seed: Option<u64>) {
    SEEDED.with(|seeded| {
        *seeded.borrow_mut() = seed.map(|seed| SeededIds { seed, next: 0 });
    });
}

/// How many seeded ids this thread drew since [`seed_ids`] (or [`resume_ids`]) set its
/// seed; `None` outside a simulation.
pub fn ids_drawn() -> Option<u64> {
    SEEDED.with(|seeded| seeded.borrow().as_ref().map(|ids| ids.next))
}

/// Makes this thread's ids come from `seed` past the first `drawn`, as they would after
/// [`seed_ids`] and that many ids: a run that goes on in another process (after the first
/// was killed) makes no id twice.
pub fn resume_ids(seed: u64, drawn: u64) {
    SEEDED.with(|seeded| {
        *seeded.borrow_mut() = Some(SeededIds { seed, next: drawn });
    });
}

/// Whether a simulation runs on this thread ([`seed_ids`] set a seed).
pub(crate) fn active() -> bool {
    SEEDED.with(|seeded| seeded.borrow().is_some())
}

/// The next seeded id on this thread, if [`seed_ids`] set a seed.
pub(crate) fn next_seeded() -> Option<u128> {
    SEEDED.with(|seeded| {
        seeded.borrow_mut().as_mut().map(|ids| {
            ids.next += 1;
            (u128::from(ids.seed) << 64) | u128::from(ids.next)
        })
    })
}
