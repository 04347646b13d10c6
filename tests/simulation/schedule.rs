//! The seeded generator every choice of a run comes from, and the schedule that injects the
//! store's faults from it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use solid_objects::simulation::{Fault, Schedule, Step};

/// A small seeded generator (SplitMix64): the same seed, the same numbers.
#[derive(Debug, Clone)]
pub(crate) struct Seeded(u64);

impl Seeded {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `bound` (at least 1).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    /// True one time in `odds`.
    pub(crate) fn one_in(&mut self, odds: u64) -> bool {
        self.below(odds) == 0
    }
}

/// The kinds of fault a run injects, as the summary counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Injected {
    Busy,
    Io,
    Cancel,
    HangAfterCommit,
    /// A server's answer that another transaction won (a serialization failure, a deadlock,
    /// a Galera certification failure).
    Conflict,
    /// A connection lost before a step, or with a `COMMIT` that committed.
    LostConnection,
    Crash,
    /// A crash by SIGKILL: the process the run went on in was killed.
    Kill,
}

/// The store's schedule in a run: each step fails one time in `odds`, drawn from its own
/// seeded generator; it counts the steps and what it injected, and knows which hangs are
/// still held (a hung step whose future nobody dropped yet).
pub(crate) struct SeededSchedule {
    state: Mutex<ScheduleState>,
    hung: AtomicUsize,
    /// Whether faults are injected (off for the final recovery).
    on: AtomicBool,
    /// Whether a runtime is starting: its steps then go on untouched and uncounted (a fault
    /// there would be the start's to report, which is not what a run explores).
    opening: AtomicBool,
    /// Whether the store answers as a database server.
    server: bool,
    /// The jobs whose steps hung since the simulator last looked (`None`: a step of a
    /// task of the runtime's own).
    hung_jobs: Mutex<Vec<Option<usize>>>,
    /// Whether a step past the budget hung (see [`SeededSchedule::budget`]).
    wedged: AtomicBool,
}

struct ScheduleState {
    seeded: Seeded,
    odds: u64,
    steps: u64,
    /// The step past which whatever runs is wedged, if one is set.
    budget: Option<u64>,
    injected: BTreeMap<Injected, u64>,
    /// The last fault, with the step it came at, for the trace.
    log: Vec<(u64, Step, Fault)>,
}

impl SeededSchedule {
    /// A schedule for `seed` that fails one step in `odds`, as SQLite answers or, `server`,
    /// as a database server does.
    pub(crate) fn new(seed: u64, odds: u64, server: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ScheduleState {
                seeded: Seeded::new(seed ^ 0x5EED_FA17),
                odds,
                steps: 0,
                budget: None,
                injected: BTreeMap::new(),
                log: Vec::new(),
            }),
            hung: AtomicUsize::new(0),
            on: AtomicBool::new(true),
            opening: AtomicBool::new(false),
            server,
            hung_jobs: Mutex::default(),
            wedged: AtomicBool::new(false),
        })
    }

    /// Lets what runs now take `steps` more store steps (`None`: any number); the step after
    /// them hangs, and [`take_wedged`](Self::take_wedged) says so: a caller or a pass that
    /// never ends, retrying for ever, is stopped there instead of wedging the run.
    pub(crate) fn budget(&self, steps: Option<u64>) {
        let mut state = self.state();
        state.budget = steps.map(|steps| state.steps + steps);
    }

    /// Whether a step past the budget hung since the last call.
    pub(crate) fn take_wedged(&self) -> bool {
        self.wedged.swap(false, Ordering::SeqCst)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ScheduleState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says whether a runtime is starting (see [`SeededSchedule::opening`]).
    pub(crate) fn opening(&self, opening: bool) {
        self.opening.store(opening, Ordering::SeqCst);
    }

    /// Stops (or starts again) injecting faults.
    pub(crate) fn inject(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// Hangs not released yet: a hung step whose future is still held somewhere.
    pub(crate) fn held_hangs(&self) -> usize {
        self.hung.load(Ordering::SeqCst)
    }

    /// The jobs whose steps started to hang since the last call, in the order they did.
    pub(crate) fn take_hung(&self) -> Vec<Option<usize>> {
        std::mem::take(
            &mut *self
                .hung_jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Forgets the hangs of a runtime that crashed (its futures went with it).
    pub(crate) fn forget_hangs(&self) {
        self.hung.store(0, Ordering::SeqCst);
        self.take_hung();
    }

    /// Counts a fault the simulator injected itself (a crash, a kill).
    pub(crate) fn count(&self, injected: Injected) {
        *self.state().injected.entry(injected).or_default() += 1;
    }

    pub(crate) fn steps(&self) -> u64 {
        self.state().steps
    }

    /// How many busy databases the schedule injected so far.
    pub(crate) fn busy_count(&self) -> u64 {
        self.count_of(Injected::Busy)
    }

    /// How many conflicts the schedule injected so far.
    pub(crate) fn conflict_count(&self) -> u64 {
        self.count_of(Injected::Conflict)
    }

    /// How many faults of kind `injected` the schedule injected so far.
    fn count_of(&self, injected: Injected) -> u64 {
        self.state().injected.get(&injected).copied().unwrap_or(0)
    }

    /// How many faults the schedule injected so far.
    pub(crate) fn injected_count(&self) -> u64 {
        self.state().injected.values().sum()
    }

    pub(crate) fn injected(&self) -> BTreeMap<Injected, u64> {
        self.state().injected.clone()
    }

    /// The faults injected since the last call, as trace lines.
    pub(crate) fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.state().log)
            .into_iter()
            .map(|(step, at, fault)| format!("step {step} {at:?}: {fault:?}"))
            .collect()
    }
}

impl Schedule for SeededSchedule {
    fn server_shaped(&self) -> bool {
        self.server
    }

    /// One transaction in two, drawn from the seed.
    fn stale_head(&self) -> bool {
        self.server && self.state().seeded.one_in(2)
    }

    fn at(&self, step: Step) -> Fault {
        if self.opening.load(Ordering::SeqCst) {
            return Fault::Proceed;
        }
        let mut state = self.state();
        state.steps += 1;
        if state.budget.is_some_and(|budget| state.steps > budget) {
            state.budget = None;
            self.wedged.store(true, Ordering::SeqCst);
            self.hung.fetch_add(1, Ordering::SeqCst);
            return Fault::Hang;
        }
        let odds = state.odds;
        if !self.on.load(Ordering::SeqCst) || !state.seeded.one_in(odds) {
            return Fault::Proceed;
        }
        let (fault, injected) = match state.seeded.below(14) {
            0..=3 => (Fault::Busy, Injected::Busy),
            4..=6 => (Fault::Io, Injected::Io),
            7 if step == Step::Commit => (Fault::HangAfter, Injected::HangAfterCommit),
            10..=11 => (Fault::Conflict, Injected::Conflict),
            12..=13 => (Fault::LostAfter, Injected::LostConnection),
            _ => (Fault::Hang, Injected::Cancel),
        };
        *state.injected.entry(injected).or_default() += 1;
        let at = state.steps;
        state.log.push((at, step, fault));
        // A hang counts as held from the moment it is chosen (a process killed before a
        // hung `COMMIT` ended waits for it first); the simulator hears of it once it hangs.
        if matches!(fault, Fault::Hang | Fault::HangAfter) {
            self.hung.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    fn hanging(&self, _step: Step) {
        self.hung_jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(super::interleaving::current_job());
    }

    fn released(&self, _step: Step) {
        self.hung.fetch_sub(1, Ordering::SeqCst);
    }
}
