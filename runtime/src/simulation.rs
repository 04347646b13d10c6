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
//! With a [`Turnstile`] installed ([`interleave`]), the store's statements also wait to be
//! admitted one at a time, so that many callers, workers and group members run at once in
//! an order the seed decides.
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

    /// Whether the store answers as a database server does rather than as SQLite: many
    /// transactions at once (the engine then groups callers' turns across actors in one
    /// transaction), a transaction that waits for another's locks until its deadline, a
    /// stale head when [`stale_head`](Schedule::stale_head) says so, and a server's errors
    /// (a lock timeout where SQLite is busy, a deadlock for a conflict). Its rows still live
    /// in the SQLite file, whose writer stands for the locks.
    fn server_shaped(&self) -> bool {
        false
    }

    /// Whether a server-shaped store's transaction that is beginning reads the head of the
    /// mailbox it locks with the snapshot it had before it waited for the lock, as a server
    /// whose lock and read are one statement does (PostgreSQL's `READ COMMITTED` re-checks
    /// the locked row, not the rest of the statement). Asked once per transaction, in the
    /// order they begin; never for SQLite's shape.
    fn stale_head(&self) -> bool {
        false
    }

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

/// The one door a simulated runtime's database work goes through: each statement waits at
/// it until the simulator admits it, so statements run one at a time, in the order the
/// simulator draws from its seed, whatever order SQLite's threads would answer in.
///
/// A simulator installs one on its thread ([`interleave`]) and, each time nothing else can
/// run (no task of the runtime is ready, and no admitted statement is still running),
/// admits one of the statements [`waiting`](Turnstile::waiting) with
/// [`admit`](Turnstile::admit). Between two such moments only in-process work runs, which
/// the order of admissions decides: the same seed, the same run.
#[derive(Debug, Default)]
pub struct Turnstile {
    state: std::sync::Mutex<Gatehouse>,
    ended: tokio::sync::Notify,
}

/// The statements at a turnstile: those waiting, in order of arrival, and how many of those
/// admitted are still running.
#[derive(Debug, Default)]
struct Gatehouse {
    waiting: std::collections::VecDeque<(u64, tokio::sync::oneshot::Sender<()>)>,
    running: usize,
    arrivals: u64,
}

impl Turnstile {
    /// A turnstile with nobody at it.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Gatehouse> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many statements wait to be admitted.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// How many admitted statements are still running (on SQLite's threads, or before
    /// their caller saw the answer).
    pub fn running(&self) -> usize {
        self.state().running
    }

    /// Admits the statement at `index` among those waiting, in order of arrival; does
    /// nothing if fewer wait.
    pub fn admit(&self, index: usize) {
        let mut state = self.state();
        if let Some((_, admitted)) = state.waiting.remove(index) {
            state.running += 1;
            // A waiter gone since is taken back out of `running` by its own drop.
            let _ = admitted.send(());
        }
    }

    /// Waits until no admitted statement is running.
    pub async fn all_ended(&self) {
        while self.running() > 0 {
            self.ended.notified().await;
        }
    }

    /// Queues a statement; returns what admits it, and its place in the order of arrival.
    fn arrive(&self) -> (tokio::sync::oneshot::Receiver<()>, u64) {
        let (admit, admitted) = tokio::sync::oneshot::channel();
        let mut state = self.state();
        state.arrivals += 1;
        let arrival = state.arrivals;
        state.waiting.push_back((arrival, admit));
        (admitted, arrival)
    }

    /// A statement that waited as `arrival` went away: off the queue, or, admitted before
    /// it heard so, no longer running.
    fn leave(&self, arrival: u64) {
        let mut state = self.state();
        let queued = state.waiting.iter().position(|(at, _)| *at == arrival);
        match queued {
            Some(index) => {
                state.waiting.remove(index);
            }
            None => self.end(state),
        }
    }

    /// An admitted statement ended.
    fn done(&self) {
        self.end(self.state());
    }

    /// Counts an admitted statement out, telling whoever waits once none runs.
    fn end(&self, mut state: std::sync::MutexGuard<'_, Gatehouse>) {
        state.running -= 1;
        let none = state.running == 0;
        drop(state);
        if none {
            self.ended.notify_one();
        }
    }
}

thread_local! {
    /// The turnstile this thread's simulation runs its statements through, if any.
    static TURNSTILE: RefCell<Option<std::sync::Arc<Turnstile>>> = const { RefCell::new(None) };
}

/// Makes the runtime's statements on this thread wait at `turnstile` (`None`: run at once).
/// A simulation installs it once its runtime has started, and admits the statements while
/// it drives the runtime: a statement that comes while nobody admits waits until someone does.
pub fn interleave(turnstile: Option<std::sync::Arc<Turnstile>>) {
    TURNSTILE.with(|installed| *installed.borrow_mut() = turnstile);
}

/// A statement admitted through this thread's turnstile, running until the value drops.
pub(crate) struct Admitted(Option<std::sync::Arc<Turnstile>>);

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(turnstile) = self.0.take() {
            turnstile.done();
        }
    }
}

/// Waits until this thread's turnstile admits a statement (at once without one); the
/// statement runs while the returned value lives.
pub(crate) async fn admitted() -> Admitted {
    let Some(turnstile) = TURNSTILE.with(|installed| installed.borrow().clone()) else {
        return Admitted(None);
    };
    /// Takes a waiter that went away (its future dropped) off the turnstile.
    struct Waiting<'a> {
        turnstile: &'a Turnstile,
        arrival: Option<u64>,
    }

    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            if let Some(arrival) = self.arrival {
                self.turnstile.leave(arrival);
            }
        }
    }

    let (admission, arrival) = turnstile.arrive();
    let mut waiting = Waiting {
        turnstile: &turnstile,
        arrival: Some(arrival),
    };
    // A turnstile dropped with its queue (the simulation is over) lets the statement run.
    let heard = admission.await;
    waiting.arrival = None;
    drop(waiting);
    Admitted(heard.is_ok().then_some(turnstile))
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
    /// A turn writes its message's row without checking that the row is still ready at the
    /// attempts it read: a head read with a snapshot from before a lock wait (a
    /// server-shaped store's [`stale_head`](Schedule::stale_head)), which another
    /// transaction ran meanwhile, runs again.
    StaleHeadAfterLockWait,
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
