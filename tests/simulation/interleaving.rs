//! Many futures of a run at once, in an order the seed decides: the world polls its jobs
//! (callers' operations, workers' passes) on its one thread, and admits the runtime's
//! statements through the turnstile one at a time, each only when nothing else can run.
//!
//! "Nothing else can run" is the tokio runtime's own verdict: it is about to park (its
//! `on_thread_park` hook runs) with no task ready. The world is woken there instead of the
//! runtime parking, so the clock never moves while a statement is on SQLite's thread, and
//! what runs between two admissions is in-process work alone, the same in every run.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

thread_local! {
    /// The job being polled on this thread, if the world is polling one.
    static CURRENT_JOB: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The job the world is polling right now: `None` inside a task of the runtime's own.
pub(crate) fn current_job() -> Option<usize> {
    CURRENT_JOB.with(Cell::get)
}

/// A job's future: what a caller or a worker does on the runtime.
pub(crate) type JobFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// The world's jobs in one drive: those still running, and what each that ended came to.
pub(crate) struct Jobs<T> {
    running: RefCell<Vec<Option<JobFuture<T>>>>,
    ended: RefCell<Vec<Option<T>>>,
}

impl<T> Jobs<T> {
    pub(crate) fn new(futures: Vec<JobFuture<T>>) -> Self {
        let ended = futures.iter().map(|_| None).collect();
        Self {
            running: RefCell::new(futures.into_iter().map(Some).collect()),
            ended: RefCell::new(ended),
        }
    }

    /// Polls every job still running, each with its number as the current job; never
    /// ready (the scheduler decides when the drive ends).
    pub(crate) fn poll_all(&self, context: &mut Context<'_>) -> Poll<()> {
        let mut running = self.running.borrow_mut();
        for (index, slot) in running.iter_mut().enumerate() {
            let Some(future) = slot else {
                continue;
            };
            CURRENT_JOB.with(|current| current.set(Some(index)));
            let polled = future.as_mut().poll(context);
            CURRENT_JOB.with(|current| current.set(None));
            if let Poll::Ready(done) = polled {
                *slot = None;
                self.ended.borrow_mut()[index] = Some(done);
            }
        }
        Poll::Pending
    }

    /// Whether every job ended (or was dropped).
    pub(crate) fn all_ended(&self) -> bool {
        self.running.borrow().iter().all(Option::is_none)
    }

    /// Drops job `index`'s future where it waits (a caller that went away).
    pub(crate) fn drop_job(&self, index: usize) -> Option<JobFuture<T>> {
        self.running.borrow_mut()[index].take()
    }

    /// The futures of the jobs still running, taken out (to die with a crashed runtime).
    pub(crate) fn take_running(&self) -> Vec<JobFuture<T>> {
        self.running
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect()
    }

    /// What each job came to: `None` for one that never ended.
    pub(crate) fn into_ended(self) -> Vec<Option<T>> {
        self.ended.into_inner()
    }
}

/// Tells the world when its tokio runtime has nothing left to run: the runtime's park hook
/// wakes a waiting [`idle`](Quiet::idle) instead of letting it park.
#[derive(Default)]
pub(crate) struct Quiet {
    state: Mutex<QuietState>,
}

#[derive(Default)]
struct QuietState {
    /// Whether a wait is under way, and how many parks it lets happen first.
    armed: bool,
    parks_to_let: u32,
    /// Bumped each time a wait is woken.
    woken: u64,
    waker: Option<Waker>,
}

impl Quiet {
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The runtime's `on_thread_park` hook.
    pub(crate) fn hook(self: &Arc<Self>) -> impl Fn() + Send + Sync + 'static {
        let quiet = Arc::clone(self);
        move || quiet.parking()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, QuietState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn parking(&self) {
        let mut state = self.state();
        if !state.armed {
            return;
        }
        if state.parks_to_let > 0 {
            state.parks_to_let -= 1;
            return;
        }
        state.armed = false;
        state.woken += 1;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Ends once the runtime has nothing left to run, after letting it park (and its paused
    /// clock move to its next timer) `parks` times first.
    pub(crate) fn idle(&self, parks: u32) -> Idle<'_> {
        Idle {
            quiet: self,
            woken_at: None,
            parks,
        }
    }
}

/// A wait for the runtime to have nothing to run ([`Quiet::idle`]).
pub(crate) struct Idle<'q> {
    quiet: &'q Quiet,
    /// The count of wakes when this wait armed, once it has.
    woken_at: Option<u64>,
    parks: u32,
}

impl Future for Idle<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let mut state = self.quiet.state();
        match self.woken_at {
            Some(at) if state.woken > at => Poll::Ready(()),
            Some(_) => {
                state.waker = Some(context.waker().clone());
                Poll::Pending
            }
            None => {
                state.armed = true;
                state.parks_to_let = self.parks;
                state.waker = Some(context.waker().clone());
                let at = state.woken;
                drop(state);
                self.woken_at = Some(at);
                Poll::Pending
            }
        }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        if self.woken_at.is_some() {
            let mut state = self.quiet.state();
            state.armed = false;
            state.waker = None;
        }
    }
}
