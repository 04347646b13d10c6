//! One simulated run: a SQLite file, a runtime on it behind the seeded schedule, callers
//! making operations (often several at once, with a worker's pass among them), the clock,
//! crashes, and the final recovery.
//!
//! The world is one thread: each runtime lives on a current-thread tokio runtime of its own,
//! its statements pass a turnstile the world admits them through one at a time in seeded
//! order (see `interleaving.rs`), and every other choice comes from the run's seed too, so a
//! seed replays the same run. A step the schedule hangs drops the future of the job it hung
//! in (a caller that went away), and sometimes the whole runtime with its tokio runtime (a
//! crash there, every job of the moment dying with it), after which a new runtime opens on
//! the same file.

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::admin::DeadLetterFilter;
use solid_objects::prelude::*;
use solid_objects::simulation::{Defect, Turnstile};
use solid_objects::{EffectContext, GroupCommit, RetryPolicy};

use super::box_office::{self, Show, Ticket, SHOWS};
use super::interleaving::{JobFuture, Jobs, Quiet};
use super::schedule::{Injected, Seeded, SeededSchedule};
use super::workload::{self, Charge, Ledger, Operation, Work, ACCOUNTS};

/// A run's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) seed: u64,
    /// How many operations (calls, clock moves, worker passes, crashes) the run makes.
    pub(crate) steps: usize,
    /// One store step in `fault_odds` fails or hangs.
    pub(crate) fault_odds: u64,
    /// A defect fixed earlier, put back for the run to find.
    pub(crate) defect: Option<Defect>,
    /// How the store answers.
    pub(crate) store: Store,
    /// The crash the run's steps end at, if they end early (the recovery and the checks
    /// follow it).
    pub(crate) last_crash: Option<LastCrash>,
}

/// How a run's store answers: as SQLite, or as a database server (many transactions at
/// once, lock waits with deadlines, a server's errors; its rows still in a SQLite file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Sqlite,
    Server,
}

/// The crash a run's steps end at: its `nth` crash, made `by` dropping the runtime in the
/// process or by the operating system killing the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastCrash {
    pub(crate) nth: u64,
    pub(crate) by: CrashBy,
}

/// How a crash happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CrashBy {
    /// The runtime and its tokio runtime are dropped where they are, in this process.
    Dropped,
    /// The world hands its model over on stdout ([`MODEL`]) and waits where it is, for the
    /// process that started it to kill it with SIGKILL and go on from the model.
    Killed,
}

/// The prefix of the line a world that waits to be killed writes its model on.
pub(crate) const MODEL: &str = "simulation model: ";

/// The most store steps one job (an operation, a pass, a recovery round) takes: one that
/// takes more never ends (a retry for ever), and is a violation.
const DRIVE_STEPS: u64 = 5_000;

/// How many callers a burst has at least.
const BURST_CALLERS: usize = 4;

/// How long a retry after the recovery waits for its answer (milliseconds of the paused
/// clock).
const RETRY_DEADLINE_MILLIS: u64 = 5_000;

/// What a killed world's process hands over, for another process to go on from: the
/// caller's side of the run, which dies with the process.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Model {
    operations: Vec<Operation>,
    now: usize,
    clock_micros: i64,
    charges: BTreeMap<u64, u32>,
    ids_drawn: u64,
    crashes: u64,
    /// Whether the process was killed with a step hung in it (a transaction open, a
    /// commit unanswered), not between steps.
    hung: bool,
    trace: Vec<String>,
}

/// What a run did and found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) store_steps: u64,
    pub(crate) injected: BTreeMap<Injected, u64>,
    pub(crate) violations: Vec<String>,
    pub(crate) trace: Vec<String>,
    /// The crashes during the run's steps.
    pub(crate) crashes: u64,
    /// The ledgers and the charges' runs at the end, as the checks read them.
    pub(crate) ending: String,
    /// Whether the run's process was killed with a step hung in it.
    pub(crate) killed_mid_step: bool,
    /// The crashes (by number) that came with a step of the runtime's hung in it.
    pub(crate) mid_step_crashes: Vec<u64>,
    /// The dead letters the run made (each redriven by an operator).
    pub(crate) dead_letters: u64,
}

impl Report {
    /// The hash of the trace: two runs of one seed must give the same.
    pub(crate) fn trace_hash(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.trace.hash(&mut hasher);
        hasher.finish()
    }
}

/// A runtime and the tokio runtime it lives on.
struct Live {
    tokio: tokio::runtime::Runtime,
    runtime: Runtime,
}

/// The world of one run.
pub(crate) struct World {
    settings: Settings,
    seeded: Seeded,
    _dir: Option<tempfile::TempDir>,
    path: std::path::PathBuf,
    clock: ManualClock,
    schedule: Arc<SeededSchedule>,
    /// The live runtime's turnstile, and what tells when its tokio runtime is idle.
    turnstile: Arc<Turnstile>,
    quiet: Arc<Quiet>,
    /// The order the turnstile admits statements in.
    interleaving: Seeded,
    /// How many times each charge's effect ran, across crashes.
    charges: Arc<Mutex<BTreeMap<u64, u32>>>,
    live: Option<Live>,
    /// The jobs' futures still running when the runtime crashed: they die with the
    /// runtime, mid-step, not before it as callers that went away.
    hung_work: Option<Box<dyn std::any::Any>>,
    operations: Vec<Operation>,
    /// Operations so far (the model's time).
    now: usize,
    /// The faults injected before the last drive began, and the busy ones among them.
    faults_before: u64,
    busy_before: u64,
    conflicts_before: u64,
    /// The crash a drive decided on, made once what its jobs came to is recorded (a
    /// process killed there hands over a model that knows it): its trace line.
    crash_pending: Option<&'static str>,
    /// Whether the steps are over (the recovery's crash is none of theirs).
    recovering: bool,
    /// Whether something ran past [`DRIVE_STEPS`]: the run stops there (nothing more runs).
    wedged: bool,
    report: Report,
}

/// What a job of a drive does.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// An attempt at the operation of that index.
    Attempt(usize),
    /// A worker's pass: `drain`, `reminders` or `effects`.
    Pass(&'static str),
    /// An operator's redrive of every dead letter.
    Redrive,
}

/// What an operation's future came to.
enum Ended<T> {
    Done(T),
    /// A step hung: the future was dropped there.
    Hung,
}

impl Model {
    /// How many lines of the run's trace the model carries.
    pub(crate) fn trace_lines(&self) -> usize {
        self.trace.len()
    }
}

impl World {
    pub(crate) fn new(settings: Settings) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("simulated.db");
        let mut world = Self::on_file(settings, path);
        world._dir = Some(dir);
        world
    }

    /// A world whose SQLite file is at `path` (its folder the caller's).
    pub(crate) fn on_file(settings: Settings, path: std::path::PathBuf) -> Self {
        solid_objects::simulation::seed_ids(Some(settings.seed));
        solid_objects::simulation::reintroduce(settings.defect);
        let start = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a start time");
        Self {
            settings,
            seeded: Seeded::new(settings.seed),
            _dir: None,
            path,
            clock: ManualClock::new(start),
            schedule: SeededSchedule::new(
                settings.seed,
                settings.fault_odds,
                settings.store == Store::Server,
            ),
            turnstile: Turnstile::new(),
            quiet: Quiet::new(),
            interleaving: Seeded::new(settings.seed ^ 0x1_4E7E_A7E5),
            charges: Arc::default(),
            live: None,
            hung_work: None,
            operations: Vec::new(),
            now: 0,
            faults_before: 0,
            busy_before: 0,
            conflicts_before: 0,
            crash_pending: None,
            recovering: false,
            wedged: false,
            report: Report::default(),
        }
    }

    /// The world a killed process's world handed over in `model`, on its file at `path`,
    /// with no runtime open: what it goes on with is [`finish`](Self::finish).
    pub(crate) fn resume(settings: Settings, path: std::path::PathBuf, model: Model) -> Self {
        let mut world = Self::on_file(settings, path);
        solid_objects::simulation::resume_ids(settings.seed, model.ids_drawn);
        world.operations = model.operations;
        world.now = model.now;
        world.clock = ManualClock::new(
            chrono::DateTime::from_timestamp_micros(model.clock_micros).expect("the model's time"),
        );
        world.charges = Arc::new(Mutex::new(model.charges));
        world.report.crashes = model.crashes;
        world.report.killed_mid_step = model.hung;
        world.report.trace = model.trace;
        world.schedule.count(Injected::Kill);
        world
    }

    /// Runs the world's steps (until its last crash, if it has one), recovers, checks the
    /// invariants; returns what it found.
    pub(crate) fn run(mut self) -> Report {
        self.open();
        for _ in 0..self.settings.steps {
            self.step();
            self.now += 1;
            if self.ended() {
                break;
            }
        }
        self.finish()
    }

    /// Whether the steps reached the run's last crash.
    fn ended(&self) -> bool {
        self.settings
            .last_crash
            .is_some_and(|last| self.report.crashes >= last.nth)
    }

    /// Recovers, checks the invariants, and returns what the run found.
    pub(crate) fn finish(mut self) -> Report {
        self.recovering = true;
        self.recover();
        if self.retry_in_doubt_under_their_keys() {
            // What the retries enqueued or scheduled runs.
            self.recover();
        }
        self.retry_answered_under_their_keys();
        self.check();
        self.drop_runtime();
        self.report.store_steps = self.schedule.steps();
        self.report.injected = self.schedule.injected();
        solid_objects::simulation::seed_ids(None);
        solid_objects::simulation::reintroduce(None);
        solid_objects::simulation::interleave(None);
        self.report
    }

    fn trace(&mut self, line: String) {
        for fault in self.schedule.take_log() {
            self.report.trace.push(fault);
        }
        let steps = self.schedule.steps();
        self.report.trace.push(format!("{line} [{steps}]"));
    }

    /// Opens a runtime on the file, behind the schedule, and installs its turnstile once it
    /// has started.
    fn open(&mut self) {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(self.quiet.hook())
            .build()
            .expect("a tokio runtime");
        let charges = Arc::clone(&self.charges);
        let builder = Runtime::builder()
            .sqlite(&self.path)
            .group_commit(GroupCommit::default())
            .clock(self.clock.clone())
            .policy(AllowAll)
            .sync_timeout(Duration::from_secs(60))
            .retry(
                RetryPolicy::new()
                    .max_attempts(1000)
                    .base_delay(Duration::from_millis(100))
                    .max_delay(Duration::from_secs(5)),
            )
            .simulation(self.schedule.clone())
            .actor::<Ledger>()
            .actor::<Show>()
            .actor::<Ticket>()
            .effect(move |charge: Charge, _: EffectContext| {
                let charges = Arc::clone(&charges);
                async move {
                    *charges
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(charge.entry)
                        .or_default() += 1;
                    Ok(charge.entry)
                }
            });
        // The clock stands still from the start: it is held while the file opens on SQLite's
        // thread, so every timer the runtime sets is at the same distance from its start in
        // every run.
        tokio.block_on(async { tokio::time::pause() });
        self.schedule.opening(true);
        let runtime = tokio
            .block_on(async {
                let _held = ClockHold::new();
                builder.start().await
            })
            .expect("the runtime opens the simulated file");
        self.schedule.opening(false);
        self.turnstile = Turnstile::new();
        solid_objects::simulation::interleave(Some(Arc::clone(&self.turnstile)));
        self.live = Some(Live { tokio, runtime });
    }

    /// Drops the runtime and every task of it, mid-step: a crash. Its connections close
    /// without committing.
    fn crash(&mut self) {
        if !self.recovering {
            self.report.crashes += 1;
            if self.schedule.held_hangs() > 0 {
                self.report.mid_step_crashes.push(self.report.crashes);
            }
            let last = self.settings.last_crash;
            if last.is_some_and(|last| last.by == CrashBy::Killed && self.ended()) {
                self.hand_over();
            }
        }
        self.drop_runtime();
        self.wait_for_the_writer();
        self.schedule.forget_hangs();
        self.schedule.count(Injected::Crash);
        // At the run's last crash the steps end, and the recovery opens the next runtime:
        // as after a kill, where no runtime opens in between (and draws no id).
        if self.recovering || !self.ended() {
            self.open();
        }
    }

    /// Writes the world's model on stdout and waits, the runtime as it is (a step hung, a
    /// transaction open), for the process that started this one to kill it.
    fn hand_over(&mut self) -> ! {
        self.wait_for_the_writer();
        let operations = self.operations.clone();
        let model = Model {
            operations,
            now: self.now,
            clock_micros: self.clock.now().timestamp_micros(),
            charges: self
                .charges
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            ids_drawn: solid_objects::simulation::ids_drawn().expect("a seeded run"),
            crashes: self.report.crashes,
            hung: self.schedule.held_hangs() > 0,
            trace: std::mem::take(&mut self.report.trace),
        };
        let line = serde_json::to_string(&model).expect("the model as JSON");
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "\n{MODEL}{line}").expect("the model written");
        stdout.flush().expect("the model written");
        loop {
            std::thread::park();
        }
    }

    /// Waits, a second at most, for the file's write lock, on a connection and a tokio runtime
    /// of its own (the live one is not driven meanwhile). A step chosen to hang after its
    /// `COMMIT` counts as hung as soon as it is chosen, while that `COMMIT` may still run on
    /// SQLite's thread: a killed process must be killed after it, and the runtime opened after
    /// a crash must read the file after it, or the seed's runs part where SQLite's thread
    /// was slow.
    fn wait_for_the_writer(&self) {
        self.on_side_connection(|pool| async move {
            let Ok(mut connection) = pool.acquire().await else {
                return;
            };
            let _ = sqlx::query("PRAGMA busy_timeout = 1000")
                .execute(&mut *connection)
                .await;
            if sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut *connection)
                .await
                .is_ok()
            {
                let _ = sqlx::query("ROLLBACK").execute(&mut *connection).await;
            }
        });
    }

    /// Drops the runtime inside its tokio runtime (its pools close there), then the tokio
    /// runtime with every task still on it.
    fn drop_runtime(&mut self) {
        solid_objects::simulation::interleave(None);
        let hung_work = self.hung_work.take();
        if let Some(Live { tokio, runtime }) = self.live.take() {
            tokio.block_on(async move {
                drop(hung_work);
                drop(runtime);
            });
            tokio.shutdown_background();
        }
    }

    /// Runs `work` on the live runtime until it ends or one of its steps hangs (then it is
    /// dropped there, or dies with the runtime); see [`drive_all`](Self::drive_all).
    fn drive<T: 'static, F, Fut>(&mut self, work: F) -> Ended<T>
    where
        F: FnOnce(Runtime) -> Fut,
        Fut: Future<Output = T> + 'static,
    {
        let Some(live) = self.live.as_ref() else {
            return Ended::Hung;
        };
        let future: JobFuture<T> = Box::pin(work(live.runtime.clone()));
        let ended = self
            .drive_all(vec![future])
            .pop()
            .expect("one job, one end");
        self.crash_if_pending();
        ended
    }

    /// Makes the crash a drive decided on, if it did.
    fn crash_if_pending(&mut self) {
        if let Some(line) = self.crash_pending.take() {
            self.crash();
            self.trace(line.to_owned());
        }
    }

    /// Runs `futures` at once on the live runtime, their statements admitted one at a time in
    /// seeded order, until each ends or hangs. A job whose step hangs is dropped there (a
    /// caller that went away), or the runtime crashes with every job still running (one
    /// time in three, and always for a hang in a task of the runtime's own or a wedge): the
    /// jobs still running are kept to die with it, and the crash is left pending for the
    /// caller to make once it recorded what the others came to.
    fn drive_all<T: 'static>(&mut self, futures: Vec<JobFuture<T>>) -> Vec<Ended<T>> {
        if self.wedged {
            return futures.iter().map(|_| Ended::Hung).collect();
        }
        self.faults_before = self.schedule.injected_count();
        self.busy_before = self.schedule.busy_count();
        self.conflicts_before = self.schedule.conflict_count();
        self.schedule
            .budget(Some(DRIVE_STEPS * futures.len() as u64));
        let jobs = Jobs::new(futures);
        let crashed = loop {
            let hung = self.run_until_hang(&jobs);
            if hung.is_empty() {
                break false;
            }
            let wedged = self.schedule.take_wedged();
            if wedged {
                self.report.violations.push(format!(
                    "step {}: wedged: what ran took {DRIVE_STEPS} store steps a job without \
                     ending",
                    self.now
                ));
                self.wedged = true;
            }
            let in_the_runtime = hung.iter().any(Option::is_none);
            if wedged || in_the_runtime || self.seeded.one_in(3) {
                // The runtime crashes while the steps hang: the jobs die with it, mid-step.
                self.hung_work = Some(Box::new(jobs.take_running()));
                self.crash_pending = Some(if wedged {
                    "wedged; crash; the run stops"
                } else {
                    "crash"
                });
                break true;
            }
            // The callers go away: their futures are dropped where they wait.
            let live = self.live.as_ref().expect("a live runtime");
            for index in hung.into_iter().flatten() {
                let dropped = jobs.drop_job(index);
                live.tokio.block_on(async move { drop(dropped) });
            }
        };
        self.schedule.budget(None);
        if !crashed && self.schedule.conflict_count() > self.conflicts_before {
            self.no_conflict_counted();
        }
        jobs.into_ended()
            .into_iter()
            .map(|ended| ended.map_or(Ended::Hung, Ended::Done))
            .collect()
    }

    /// Drives `jobs` until every one ended, or a step hung: returns the jobs whose steps
    /// hung (`None`: a task of the runtime's), empty once all ended. Each time the runtime
    /// has nothing left to run and no statement is running, the turnstile admits one waiting
    /// statement, drawn from the seed; with none waiting, the paused clock moves on to the
    /// next timer.
    fn run_until_hang<T>(&mut self, jobs: &Jobs<T>) -> Vec<Option<usize>> {
        let live = self.live.as_ref().expect("a live runtime");
        let (schedule, turnstile, quiet) = (&self.schedule, &self.turnstile, &self.quiet);
        let interleaving = &mut self.interleaving;
        live.tokio.block_on(async {
            let scheduler = async {
                // The paused clock is held while statements run on SQLite's thread (the
                // runtime parks meanwhile), and let go only when everything waits for time.
                let mut clock = ClockHold::new();
                loop {
                    quiet.idle(0).await;
                    if turnstile.running() > 0 {
                        turnstile.all_ended().await;
                        continue;
                    }
                    let hung = schedule.take_hung();
                    if !hung.is_empty() {
                        return hung;
                    }
                    if jobs.all_ended() {
                        return Vec::new();
                    }
                    let waiting = turnstile.waiting();
                    if waiting > 0 {
                        turnstile.admit(interleaving.below(waiting as u64) as usize);
                        turnstile.all_ended().await;
                        continue;
                    }
                    // Everything waits for time: the clock moves to the next timer (once the
                    // hold's task has ended: a park before that leaves the clock where it is).
                    drop(clock);
                    let before = tokio::time::Instant::now();
                    while tokio::time::Instant::now() == before && turnstile.waiting() == 0 {
                        tokio::select! {
                            biased;
                            () = quiet.idle(1) => {}
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                    clock = ClockHold::new();
                }
            };
            // The scheduler looks first: woken because the runtime had nothing to run, it
            // decides before any job it did not see moves on.
            tokio::select! {
                biased;
                hung = scheduler => hung,
                () = std::future::poll_fn(|context| jobs.poll_all(context)) => {
                    unreachable!("the jobs' poller never ends")
                }
            }
        })
    }

    /// One step: callers' operations at once (with a worker's pass among them, sometimes),
    /// one caller's operation, a retry of one that failed, the clock, a worker's pass alone,
    /// or a crash.
    fn step(&mut self) {
        match self.seeded.below(100) {
            0..=39 => self.burst(),
            40..=49 => {
                let index = self.new_operation();
                self.run_jobs(vec![Job::Attempt(index)]);
            }
            50..=59 => {
                let index = self.retry_operation(&[]);
                self.run_jobs(vec![Job::Attempt(index)]);
            }
            60..=68 => {
                let millis = self.seeded.below(3_000);
                self.clock.advance(Duration::from_millis(millis));
                self.trace(format!("{} clock +{millis} ms", self.now));
            }
            69 => {
                // The host's clock is corrected backwards (NTP steps it).
                let millis = self.seeded.below(5_000);
                let back = chrono::TimeDelta::milliseconds(i64::try_from(millis).unwrap_or(0));
                self.clock.set(self.clock.now() - back);
                self.trace(format!("{} clock -{millis} ms", self.now));
            }
            70..=79 => self.pass_alone("drain"),
            80..=86 => self.pass_alone("reminders"),
            87..=94 => self.pass_alone("effects"),
            95..=96 => {
                self.crash();
                self.trace(format!("{} crash", self.now));
            }
            97 => self.run_jobs(vec![Job::Redrive]),
            _ => {
                // The caller's own deadline: it gives up at once, without a fault.
                self.trace(format!("{} idle", self.now));
            }
        }
    }

    /// Four to six callers at once, each with a new operation or a retry of one that failed,
    /// and, one time in two, a worker's pass among them.
    fn burst(&mut self) {
        let callers = BURST_CALLERS + self.seeded.below(3) as usize;
        let mut attempted = Vec::new();
        for _ in 0..callers {
            let index = if self.seeded.one_in(4) {
                self.retry_operation(&attempted)
            } else {
                self.new_operation()
            };
            attempted.push(index);
        }
        let mut jobs: Vec<Job> = attempted.into_iter().map(Job::Attempt).collect();
        if self.seeded.one_in(2) {
            let which = ["drain", "reminders", "effects"][self.seeded.below(3) as usize];
            let at = self.seeded.below(jobs.len() as u64 + 1) as usize;
            jobs.insert(at, Job::Pass(which));
        }
        self.run_jobs(jobs);
    }

    /// A new operation, made by the model; returns its index.
    fn new_operation(&mut self) -> usize {
        let (account, work) = match self.seeded.below(20) {
            0..=11 => self.ledger_work(),
            12..=16 => self.show_work(),
            _ => self.ticket_work(),
        };
        let deadline_millis =
            (work != Work::Enqueue && self.seeded.one_in(4)).then(|| 1 + self.seeded.below(2_000));
        self.operations.push(Operation {
            entry: self.operations.len() as u64,
            account,
            work,
            issued_at: self.now,
            acknowledged_at: None,
            said_nothing: 0,
            unknown: 0,
            answer: None,
            deadline_millis,
        });
        self.operations.len() - 1
    }

    /// The entries of the operations `matching` that were acknowledged with an answer that
    /// starts with `answered`.
    fn acknowledged(&self, matching: impl Fn(&Operation) -> bool, answered: &str) -> Vec<u64> {
        self.operations
            .iter()
            .filter(|operation| matching(operation))
            .filter(|operation| {
                operation
                    .answer
                    .as_deref()
                    .is_some_and(|answer| answer.starts_with(answered))
            })
            .map(|operation| operation.entry)
            .collect()
    }

    /// An operation on a show: a hold, or the confirmation of one it answered.
    fn show_work(&mut self) -> (usize, Work) {
        let show = self.seeded.below(SHOWS as u64) as usize;
        let held = self.acknowledged(
            |operation| operation.account == show && matches!(operation.work, Work::Hold { .. }),
            "held",
        );
        if !held.is_empty() && self.seeded.one_in(2) {
            let hold = held[self.seeded.below(held.len() as u64) as usize];
            return (show, Work::Confirm { hold });
        }
        let seats = 1 + self.seeded.below(3) as u32;
        (show, Work::Hold { seats })
    }

    /// An operation on a ticket: an issue, or the void of one issued.
    fn ticket_work(&mut self) -> (usize, Work) {
        let issued = self.acknowledged(|operation| operation.work == Work::Issue, "issued");
        if !issued.is_empty() && self.seeded.one_in(3) {
            let ticket = issued[self.seeded.below(issued.len() as u64) as usize];
            return (0, Work::Void { ticket });
        }
        (0, Work::Issue)
    }

    /// An operation on a ledger.
    fn ledger_work(&mut self) -> (usize, Work) {
        let account = self.seeded.below(ACCOUNTS as u64) as usize;
        let work = match self.seeded.below(10) {
            0..=3 => Work::Apply,
            4..=5 => Work::Enqueue,
            6 => Work::Transfer {
                to: (account + 1 + self.seeded.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS,
            },
            7..=8 => Work::Remind {
                after_millis: i64::try_from(self.seeded.below(10_000)).unwrap_or(0),
            },
            _ => Work::Charge,
        };
        (account, work)
    }

    /// An operation not acknowledged yet (none of those `taken` by other callers of the
    /// moment), for a client to retry; a new one if there is none.
    fn retry_operation(&mut self, taken: &[usize]) -> usize {
        let failed: Vec<usize> = (0..self.operations.len())
            .filter(|&index| self.operations[index].acknowledged_at.is_none())
            .filter(|index| !taken.contains(index))
            .collect();
        if failed.is_empty() {
            return self.new_operation();
        }
        failed[self.seeded.below(failed.len() as u64) as usize]
    }

    /// A worker's pass with nothing else running.
    fn pass_alone(&mut self, which: &'static str) {
        if which == "drain" {
            // What waits for a retry, before the drain runs what is due of it.
            self.retries_on_the_clock();
        }
        self.run_jobs(vec![Job::Pass(which)]);
    }

    /// Runs `jobs` at once, then records what each came to, in their order.
    fn run_jobs(&mut self, jobs: Vec<Job>) {
        let Some(live) = self.live.as_ref() else {
            return;
        };
        let futures: Vec<JobFuture<solid_objects::Result<String>>> = jobs
            .iter()
            .map(|job| job_future(&live.runtime, *job, &self.operations))
            .collect();
        let ended = self.drive_all(futures);
        let alone = jobs.len() == 1;
        for (job, ended) in jobs.into_iter().zip(ended) {
            match job {
                Job::Attempt(index) => self.attempted(index, ended),
                Job::Pass(which) => self.passed(which, ended, alone),
                Job::Redrive => self.redriven(ended),
            }
        }
        self.crash_if_pending();
    }

    /// Records what an attempt at operation `index` came to, as its client hears it.
    fn attempted(&mut self, index: usize, ended: Ended<solid_objects::Result<String>>) {
        let operation = self.operations[index].clone();
        let line = match ended {
            Ended::Done(Ok(answer)) => {
                let now = self.now;
                let operation = &mut self.operations[index];
                operation.acknowledged_at.get_or_insert(now);
                let first = operation
                    .answer
                    .get_or_insert_with(|| answer.clone())
                    .clone();
                if first != answer {
                    self.report.violations.push(format!(
                        "step {now}: operation {} under its key answered {answer:?}, but \
                         {first:?} before",
                        operation.entry
                    ));
                }
                format!("ok {answer}")
            }
            Ended::Done(Err(error)) => {
                self.uncaused(&error, &format!("operation {}", operation.entry));
                let operation = &mut self.operations[index];
                if workload::says_nothing_was_written(&error) {
                    operation.said_nothing += 1;
                    let never_in_doubt =
                        operation.unknown == 0 && operation.acknowledged_at.is_none();
                    if never_in_doubt {
                        self.nothing_under_the_key(index, &error);
                    }
                } else {
                    operation.unknown += 1;
                }
                format!("err {}", workload::variant(&error))
            }
            Ended::Hung => {
                self.operations[index].unknown += 1;
                "hung".to_owned()
            }
        };
        let line = format!(
            "{} op {} {:?} -> {line}",
            self.now, operation.entry, operation.work
        );
        self.trace(line);
    }

    /// Records what a worker's pass came to; `alone`: nothing else ran beside it.
    fn passed(
        &mut self,
        which: &'static str,
        ended: Ended<solid_objects::Result<String>>,
        alone: bool,
    ) {
        let line = match ended {
            Ended::Done(Ok(turns)) => {
                if which == "drain" && alone && self.schedule.busy_count() == self.busy_before {
                    self.left_unattempted();
                }
                format!("ran {turns}")
            }
            Ended::Done(Err(error)) => {
                self.uncaused(&error, which);
                format!("err {}", workload::variant(&error))
            }
            Ended::Hung => "hung".to_owned(),
        };
        self.trace(format!("{} {which} -> {line}", self.now));
    }

    /// Records what an operator's redrive came to.
    fn redriven(&mut self, ended: Ended<solid_objects::Result<String>>) {
        let line = match ended {
            Ended::Done(Ok(retried)) => format!("retried {retried}"),
            Ended::Done(Err(error)) => {
                self.uncaused(&error, "redrive");
                format!("err {}", workload::variant(&error))
            }
            Ended::Hung => "hung".to_owned(),
        };
        self.trace(format!("{} redrive -> {line}", self.now));
    }

    /// A database's error where no fault was injected: something the world did not cause (a
    /// connection left inside a transaction, say) is a violation.
    fn uncaused(&mut self, error: &solid_objects::Error, what: &str) {
        let database = matches!(
            workload::variant(error).as_str(),
            "Database" | "GroupCommitFailed" | "GroupRolledBack" | "TransactionAborted"
        );
        if database && self.schedule.injected_count() == self.faults_before {
            self.report.violations.push(format!(
                "step {}: {what} failed with no fault injected: {error}",
                self.now
            ));
        }
    }

    /// After an attempt at operation `index` was told that nothing of it was written, as
    /// every attempt before it was, no message is stored under the operation's key: the
    /// claim is true when it is made.
    fn nothing_under_the_key(&mut self, index: usize, error: &solid_objects::Error) {
        let key = self.operations[index].key();
        let stored: i64 = self.on_side_connection(|pool| async move {
            sqlx::query_scalar("SELECT COUNT(*) FROM solid_messages WHERE idempotency_key = ?")
                .bind(key)
                .fetch_one(&pool)
                .await
                .expect("a count")
        });
        if stored > 0 {
            self.report.violations.push(format!(
                "step {}: operation {} was told {error}, but its message is stored",
                self.now, self.operations[index].entry
            ));
        }
    }

    /// After a drive in which a transaction conflicted, no message holds the conflict as a
    /// failed attempt: a conflict runs its transaction again (or leaves the turn for a later
    /// pass, a stall noted), and never moves a message toward dead.
    fn no_conflict_counted(&mut self) {
        let counted = self.count(
            "SELECT COUNT(*) FROM solid_messages \
             WHERE status IN ('ready', 'dead') AND attempts > 0 \
               AND (last_error LIKE '%could not serialize access%' \
                    OR last_error LIKE '%deadlock detected%') \
               AND last_error NOT LIKE 'its turn kept conflicting%'",
            None,
        );
        if counted > 0 {
            self.report.violations.push(format!(
                "step {}: {counted} messages count a conflict as a failed attempt",
                self.now
            ));
        }
    }

    /// After a drain that succeeded and met no busy database (which leaves a turn for later,
    /// uncounted), no message at the head of its mailbox that is due stays ready without an
    /// attempt counted: the drain ran it, or counted why not.
    fn left_unattempted(&mut self) {
        let left = self.count(
            "SELECT COUNT(*) FROM solid_messages AS m \
             WHERE status = 'ready' AND attempts = 0 AND available_at <= ? \
               AND NOT EXISTS (SELECT 1 FROM solid_messages AS e \
                               WHERE e.actor_type = m.actor_type AND e.actor_id = m.actor_id \
                                 AND e.status = 'ready' AND e.id < m.id)",
            Some(self.clock.now().timestamp_micros()),
        );
        if left > 0 {
            self.report.violations.push(format!(
                "step {}: a drain that met no busy database left {left} due messages at the head of \
                 their mailboxes ready with no attempt counted",
                self.now
            ));
        }
    }

    /// Every message waiting to be retried waits by the runtime's clock: its retry time is
    /// within an hour of the clock's now (the run moves the clock minutes at most), never
    /// one read from the host's clock or far out of reach.
    fn retries_on_the_clock(&mut self) {
        let now = self.clock.now().timestamp_micros();
        let off: Vec<(i64, i64)> = self.read(
            "SELECT id, available_at FROM solid_messages \
             WHERE status = 'ready' AND attempts > 0 AND (available_at < ?1 - 3600000000 \
                OR available_at > ?1 + 3600000000)",
            Some(now),
        );
        for (id, at) in off {
            let when = if at < now { "before" } else { "after" };
            self.report.violations.push(format!(
                "step {}: message {id} waits for a retry more than an hour {when} the clock's \
                 now, which a run never moves that far",
                self.now
            ));
        }
    }

    /// Without faults, runs everything left until nothing is: what a restarted process
    /// does. A wedge (work left after many rounds) is a violation.
    fn recover(&mut self) {
        self.schedule.inject(false);
        self.crash();
        for round in 0..40 {
            self.clock.advance(Duration::from_secs(60));
            let ended = self.drive(|runtime| async move {
                let testing = runtime.testing();
                let fired = testing.run_due_reminders().await?.turns;
                let effects = testing.run_effects().await?;
                let drained = testing.drain().await?.turns;
                // An operator redrives what died.
                let retried = runtime
                    .admin()
                    .redrive(&DeadLetterFilter::new())
                    .await?
                    .retried;
                Ok::<usize, solid_objects::Error>(fired + effects + drained + retried as usize)
            });
            if let Ended::Done(Ok(ran)) = &ended {
                self.trace(format!("recovery round {round}: ran {ran}"));
            }
            match ended {
                Ended::Done(Ok(0)) if round > 0 => return,
                Ended::Done(Ok(_)) => {}
                Ended::Done(Err(error)) => {
                    self.report
                        .violations
                        .push(format!("the recovery failed without faults: {error}"));
                    return;
                }
                // No fault is injected during the recovery: it wedged (a violation).
                Ended::Hung => return,
            }
        }
        self.report
            .violations
            .push("work was left after 40 rounds of recovery: wedged".to_owned());
    }

    /// One more attempt at `operation` under its key, after the recovery: nothing hangs or
    /// fails now, so a retry that does not answer within [`RETRY_DEADLINE_MILLIS`] never will.
    fn retry_under_key(&mut self, operation: &Operation) -> Ended<solid_objects::Result<String>> {
        let attempted = Operation {
            deadline_millis: Some(RETRY_DEADLINE_MILLIS),
            ..operation.clone()
        };
        self.drive(|runtime| async move { workload::attempt(&runtime, &attempted).await })
    }

    /// After the recovery, each operation whose caller never heard an answer and was not
    /// told each time that nothing of it was written (it hung, or its error left it in doubt)
    /// is made once more under its key, as a client that lost every answer retries it: it
    /// answers now (nothing fails), and from then on it is held to what an acknowledged
    /// operation owes: in the state once, at the place its answer says, answering the same
    /// to every retry. Returns whether it retried any.
    fn retry_in_doubt_under_their_keys(&mut self) -> bool {
        let mut retried = false;
        for index in 0..self.operations.len() {
            let operation = self.operations[index].clone();
            if self.wedged || operation.answer.is_some() || operation.unknown == 0 {
                continue;
            }
            retried = true;
            let heard = match self.retry_under_key(&operation) {
                Ended::Done(Ok(answer)) => {
                    self.trace(format!(
                        "retried in doubt op {} {:?} -> {answer}",
                        operation.entry, operation.work
                    ));
                    let now = self.now;
                    let operation = &mut self.operations[index];
                    operation.acknowledged_at = Some(now);
                    operation.answer = Some(answer);
                    continue;
                }
                // Its ticket was destroyed before its message ran: that is what it came to.
                Ended::Done(Err(solid_objects::Error::Destroyed { .. })) => continue,
                Ended::Done(Err(error)) => format!("the error {error}"),
                Ended::Hung => "nothing (it hung)".to_owned(),
            };
            self.report.violations.push(format!(
                "after the recovery, operation {} left in doubt and retried under its key \
                 answered {heard}",
                operation.entry
            ));
        }
        retried
    }

    /// After the recovery, each operation whose caller heard an answer is made once more
    /// under its key, as a client that lost the answer retries it: it must answer what it
    /// answered, from what the file holds, without running again (a violation otherwise).
    fn retry_answered_under_their_keys(&mut self) {
        for index in 0..self.operations.len() {
            if self.wedged {
                return;
            }
            let operation = self.operations[index].clone();
            let Some(first) = operation.answer.clone() else {
                continue;
            };
            let heard = match self.retry_under_key(&operation) {
                Ended::Done(Ok(answer)) if answer == first => continue,
                Ended::Done(Ok(answer)) => format!("{answer:?}"),
                Ended::Done(Err(error)) => format!("the error {error}"),
                Ended::Hung => "nothing (it hung)".to_owned(),
            };
            self.trace(format!(
                "retried op {} {:?} -> {heard}",
                operation.entry, operation.work
            ));
            self.report.violations.push(format!(
                "after the recovery, operation {} retried under its key answered {heard}, but \
                 {first:?} before",
                operation.entry
            ));
        }
    }

    /// The invariants, on what the file holds after the recovery.
    fn check(&mut self) {
        let tickets: Vec<u64> = self
            .operations
            .iter()
            .filter(|operation| operation.work == Work::Issue)
            .map(|operation| operation.entry)
            .collect();
        let read = self.drive(|runtime| async move {
            let mut ledgers = Vec::new();
            for account in 0..ACCOUNTS {
                let reference = runtime.reference::<Ledger>(workload::account(account));
                ledgers.push(reference.snapshot().await?);
            }
            let mut shows = Vec::new();
            for show in 0..SHOWS {
                let reference = runtime.reference::<Show>(box_office::show(show));
                shows.push(reference.snapshot().await?);
            }
            let mut issued = BTreeMap::new();
            for entry in tickets {
                let reference = runtime.reference::<Ticket>(box_office::ticket(entry));
                issued.insert(entry, reference.snapshot().await?);
            }
            Ok::<_, solid_objects::Error>((ledgers, shows, issued))
        });
        // No fault is injected during the checks: a run that wedged reads nothing more.
        let Ended::Done(read) = read else {
            return;
        };
        let (ledgers, shows, tickets) = match read {
            Ok(read) => read,
            Err(error) => {
                self.report
                    .violations
                    .push(format!("the actors' states could not be read: {error}"));
                return;
            }
        };
        let charges = self
            .charges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let ready = self.ready_messages();
        self.no_effect_left_claimed();
        let attempts = self.effect_attempts();
        let died = self.died();
        let dead = self.count(
            "SELECT COUNT(*) FROM solid_messages WHERE status = 'dead'",
            None,
        );
        self.report.dead_letters = u64::try_from(dead).unwrap_or_default();
        self.trace(format!("dead letters: {dead}, of entries {died:?}"));
        let violations = &mut self.report.violations;
        violations.extend(super::invariants::check(
            &self.operations,
            &ledgers,
            &charges,
            ready,
            &died,
        ));
        violations.extend(super::invariants::attempts_cover_runs(&charges, &attempts));
        violations.extend(super::invariants::shows(&self.operations, &shows));
        violations.extend(super::invariants::tickets(&self.operations, &tickets));
        let rows = self.rows_digest();
        self.report.ending = format!(
            "{ledgers:?}; {shows:?}; {tickets:?}; charges run {charges:?}; {}",
            rows.join("; ")
        );
        let summary = format!("{ledgers:?} {shows:?}");
        self.trace(summary);
        for line in rows {
            self.trace(line);
        }
    }

    /// Every row the file holds, table by table, as a hash each: a seed replays what the
    /// runtime wrote (times, attempts, retry times, ids), not only what its callers heard.
    fn rows_digest(&mut self) -> Vec<String> {
        use sqlx::{Column, Row, ValueRef};
        let tables: Vec<(String,)> = self.read(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
               AND name NOT IN ('solid_schema_migrations', 'sqlite_sequence') ORDER BY name",
            None,
        );
        self.on_side_connection(|pool| async move {
            let mut lines = Vec::new();
            for (table,) in tables {
                let rows = sqlx::query(&format!("SELECT * FROM \"{table}\""))
                    .fetch_all(&pool)
                    .await
                    .expect("a table's rows");
                let mut hashes = Vec::new();
                for row in &rows {
                    let mut hasher = DefaultHasher::new();
                    for column in row.columns() {
                        let index = column.ordinal();
                        let raw = row.try_get_raw(index).expect("a column");
                        if raw.is_null() {
                            "null".hash(&mut hasher);
                        } else if let Ok(value) = row.try_get::<i64, _>(index) {
                            value.hash(&mut hasher);
                        } else if let Ok(value) = row.try_get::<String, _>(index) {
                            value.hash(&mut hasher);
                        } else if let Ok(value) = row.try_get::<Vec<u8>, _>(index) {
                            value.hash(&mut hasher);
                        } else if let Ok(value) = row.try_get::<f64, _>(index) {
                            value.to_bits().hash(&mut hasher);
                        }
                    }
                    hashes.push(hasher.finish());
                }
                hashes.sort_unstable();
                let mut hasher = DefaultHasher::new();
                hashes.hash(&mut hasher);
                lines.push(format!(
                    "rows of {table}: {} ({:x})",
                    rows.len(),
                    hasher.finish()
                ));
            }
            lines
        })
    }

    /// The entries whose ledger message died at least once (and was redriven): a dead letter
    /// lets the later messages of its actor pass it.
    fn died(&mut self) -> std::collections::BTreeSet<u64> {
        let rows: Vec<(String,)> = self.read(
            "SELECT arguments FROM solid_messages WHERE status = 'dead' \
               AND operation IN ('apply', 'transfer')",
            None,
        );
        rows.into_iter()
            .filter_map(|(arguments,)| {
                let arguments: serde_json::Value = serde_json::from_str(&arguments).ok()?;
                arguments
                    .get("entry")
                    .or_else(|| arguments.get(0))
                    .and_then(serde_json::Value::as_u64)
            })
            .collect()
    }

    /// Liveness: after the recovery (whose rounds move the clock a minute each, past every
    /// lease), no effect is left claimed by a runner that is gone, or due and unrun.
    fn no_effect_left_claimed(&mut self) {
        let left = self.count(
            "SELECT COUNT(*) FROM solid_effects WHERE status IN ('ready', 'running')",
            None,
        );
        if left > 0 {
            self.report.violations.push(format!(
                "{left} effects still claimed or due after the recovery: a runner that died \
                 holds them past its lease"
            ));
        }
    }

    /// Messages still ready after the recovery.
    fn ready_messages(&mut self) -> i64 {
        self.count(
            "SELECT COUNT(*) FROM solid_messages WHERE status = 'ready'",
            None,
        )
    }

    /// Each charge's effect's attempts, as its row counts them.
    fn effect_attempts(&mut self) -> BTreeMap<u64, i64> {
        let rows: Vec<(String, i64)> = self.read(
            "SELECT payload, attempts FROM solid_effects WHERE name = 'charge'",
            None,
        );
        rows.into_iter()
            .map(|(payload, attempts)| {
                let charge: workload::Charge =
                    serde_json::from_str(&payload).expect("a charge's payload");
                (charge.entry, attempts)
            })
            .collect()
    }

    /// A count read from the file on a connection of its own.
    fn count(&mut self, sql: &'static str, bound: Option<i64>) -> i64 {
        let counts: Vec<(i64,)> = self.read(sql, bound);
        counts.first().map_or(0, |(count,)| *count)
    }

    /// Rows read from the file on a connection of its own.
    fn read<Row>(&mut self, sql: &'static str, bound: Option<i64>) -> Vec<Row>
    where
        Row: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> + Send + Unpin + 'static,
    {
        self.on_side_connection(|pool| async move {
            let mut query = sqlx::query_as(sql);
            if let Some(value) = bound {
                query = query.bind(value);
            }
            query.fetch_all(&pool).await.expect("rows of the file")
        })
    }

    /// Runs `work` on a pool of its own on the file, on a tokio runtime of its own (the live
    /// one, and its clock, stand still meanwhile), and closes the pool after.
    fn on_side_connection<T, F, Fut>(&self, work: F) -> T
    where
        F: FnOnce(sqlx::SqlitePool) -> Fut,
        Fut: Future<Output = T>,
    {
        let url = format!("sqlite://{}", self.path.display());
        let side = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        side.block_on(async move {
            let pool = sqlx::SqlitePool::connect(&url)
                .await
                .expect("the simulated file opens");
            let done = work(pool.clone()).await;
            pool.close().await;
            done
        })
    }
}

/// The future of `job` on `runtime`: what it answered, as text.
fn job_future(
    runtime: &Runtime,
    job: Job,
    operations: &[Operation],
) -> JobFuture<solid_objects::Result<String>> {
    let runtime = runtime.clone();
    match job {
        Job::Attempt(index) => {
            let operation = operations[index].clone();
            Box::pin(async move { workload::attempt(&runtime, &operation).await })
        }
        Job::Pass(which) => Box::pin(async move {
            let testing = runtime.testing();
            let ran = match which {
                "drain" => testing.drain().await.map(|ran| ran.turns),
                "reminders" => testing.run_due_reminders().await.map(|ran| ran.turns),
                _ => testing.run_effects().await,
            };
            ran.map(|turns| turns.to_string())
        }),
        Job::Redrive => Box::pin(async move {
            runtime
                .admin()
                .redrive(&DeadLetterFilter::new())
                .await
                .map(|redriven| redriven.retried.to_string())
        }),
    }
}

/// Holds the paused clock while the value lives: a blocking task keeps tokio from moving it
/// on when the runtime parks (waiting for SQLite's threads).
struct ClockHold(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl ClockHold {
    fn new() -> Self {
        let (release, released) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            // Ends when the hold drops.
            let _ = released.recv();
        });
        Self(release)
    }
}
