//! "Nothing wedges", on each server backend: no interleaving of turns, reminders, callers,
//! effects or other applications ends in a deadlock, a stuck connection, a stuck message or
//! work run twice. Each test forces its interleaving (barriers and pauses inside handlers,
//! and the server's own view of a session waiting for a lock), never by sleeping, and bounds
//! every wait so that a wedge fails the test instead of hanging it.
//!
//! The cases are written once, here; the binaries tests/postgres.rs and tests/mysql.rs each
//! run them (one process per backend: the cases' pauses and barriers are statics) on their
//! own `backend` module: how to reach the server, and the few statements that differ.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Workers;
use solid_objects::{Effect, EffectContext, MessageStatus};
use sqlx::Executor;
use tokio::sync::{Barrier, Notify};

use crate::backend::{self, database, runtime_on, scalar};
use crate::support::actors::Tally;
use crate::support::cancellation::{drop_after, next_random};
use crate::support::eventually;
use crate::support::workers::within;

// ---------------------------------------------------------------------------------------
// Shared setup
// ---------------------------------------------------------------------------------------

/// Waits until some session of this database waits for a lock, or `done` holds.
async fn until_a_session_waits_for_a_lock(observer: &backend::Observer, done: impl Fn() -> bool) {
    let waiting = eventually(Duration::from_secs(10), || {
        let observer = observer.clone();
        let done = done();
        async move { done || scalar(&observer, backend::SESSIONS_WAITING_FOR_A_LOCK).await > 0 }
    })
    .await;
    assert!(waiting, "no session came to wait for a lock");
}

/// Holds the first run of a handler at one point until the test releases it; later runs
/// (retries) pass straight through, so a retrying engine cannot wedge on it.
struct Pause {
    used: AtomicBool,
    entered: Notify,
    release: Notify,
}

impl Pause {
    const fn new() -> Self {
        Self {
            used: AtomicBool::new(false),
            entered: Notify::const_new(),
            release: Notify::const_new(),
        }
    }

    /// In the handler: on its first run, says it got here and waits for the release.
    async fn hold_first_run(&self) {
        if !self.used.swap(true, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
    }

    /// In the test: waits until the first run got to the pause.
    async fn entered(&self) {
        within(
            10,
            "the handler reaching its pause",
            self.entered.notified(),
        )
        .await;
    }

    fn release(&self) {
        self.release.notify_one();
    }
}

// ---------------------------------------------------------------------------------------
// 1. Two actors sending to each other
// ---------------------------------------------------------------------------------------

/// Both turns of the first two `write_to` calls are open together before either sends.
static PENS_MEET: LazyLock<Barrier> = LazyLock::new(|| Barrier::new(2));
static PENS_ARRIVED: AtomicUsize = AtomicUsize::new(0);

/// A pen pal: writes to a peer, and keeps the letters it received.
#[actor]
#[derive(Default)]
struct Pen {
    received: Vec<String>,
}

#[actor]
impl Pen {
    #[command]
    async fn write_to(&mut self, turn: &mut Turn<Self>, peer: String) {
        if PENS_ARRIVED.fetch_add(1, Ordering::SeqCst) < 2 {
            PENS_MEET.wait().await;
        }
        let me = turn.actor_id().to_owned();
        turn.send::<Pen>(peer).receive(me);
    }

    #[command]
    fn receive(&mut self, from: String) {
        self.received.push(from);
    }
}

/// Two actors whose turns are open at the same moment and send to each other both commit,
/// and both letters arrive: a turn never waits for a second actor's row while holding its
/// own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actors_sending_to_each_other_never_deadlock() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 8, &ManualClock::starting_now()).await;
    let ana = runtime.reference::<Pen>("ana");
    let bob = runtime.reference::<Pen>("bob");

    let (from_ana, from_bob) = within(30, "the two sends", async {
        tokio::join!(ana.write_to("bob"), bob.write_to("ana"))
    })
    .await;

    assert!(
        from_ana.is_ok() && from_bob.is_ok(),
        "ana -> bob: {from_ana:?}; bob -> ana: {from_bob:?}"
    );
    within(30, "the drain", runtime.testing().drain())
        .await
        .unwrap();
    assert_eq!(bob.snapshot().await.unwrap().received, ["ana"]);
    assert_eq!(ana.snapshot().await.unwrap().received, ["bob"]);
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// 2. Moving a reminder while it fires
// ---------------------------------------------------------------------------------------

static BELL_PAUSE: Pause = Pause::new();

/// A bell with one alarm, under the key "bell".
#[actor]
#[derive(Default)]
struct Bell {
    rings: u32,
}

#[actor]
impl Bell {
    #[command]
    fn arm(&mut self, turn: &mut Turn<Self>) {
        let at = turn.now() + TimeDelta::minutes(1);
        turn.schedule(at, "bell").ring();
    }

    /// Moves the alarm an hour ahead, after a pause on its first run.
    #[command]
    async fn rearm_later(&mut self, turn: &mut Turn<Self>) {
        BELL_PAUSE.hold_first_run().await;
        let at = turn.now() + TimeDelta::hours(1);
        turn.schedule(at, "bell").ring();
    }

    #[reminder]
    fn ring(&mut self) {
        self.rings += 1;
    }
}

/// A turn that moves a reminder while that reminder fires: both the turn and the firing
/// succeed, and the outcome is consistent (one alarm, at the new time; the old one rang at
/// most once; the new one rings when due).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moving_a_reminder_while_it_fires_never_deadlocks() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 8, &clock).await;
    let observer = backend::observer(&url).await;
    let bell = runtime.reference::<Bell>("b");
    bell.arm().await.unwrap();
    clock.advance(Duration::from_secs(120));
    let moved_to = clock.now() + TimeDelta::hours(1);

    let rearming = tokio::spawn({
        let bell = bell.clone().timeout(Duration::from_secs(20));
        async move { bell.rearm_later().await }
    });
    BELL_PAUSE.entered().await;
    let firing = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.testing().run_due_reminders().await }
    });
    until_a_session_waits_for_a_lock(&observer, || firing.is_finished()).await;
    BELL_PAUSE.release();
    let rearmed = within(30, "the rearming call", rearming).await.unwrap();
    let fired = within(30, "the firing", firing).await.unwrap();

    assert!(
        rearmed.is_ok() && fired.is_ok(),
        "rearm: {rearmed:?}; firing: {fired:?}"
    );
    within(30, "the drain", runtime.testing().drain())
        .await
        .unwrap();
    let rang = bell.snapshot().await.unwrap().rings;
    assert!(rang <= 1, "the old alarm rang {rang} times");
    assert_eq!(
        scalar(
            &observer,
            &format!(
                "SELECT COUNT(*) FROM solid_reminders WHERE due_at = {}",
                moved_to.timestamp_micros()
            )
        )
        .await,
        1,
        "the alarm is at its new time"
    );
    assert_eq!(
        scalar(&observer, "SELECT COUNT(*) FROM solid_reminders").await,
        1
    );
    clock.advance(Duration::from_secs(2 * 3600));
    assert_eq!(
        runtime
            .testing()
            .run_due_reminders()
            .await
            .unwrap()
            .occurrences_fired,
        1
    );
    assert_eq!(bell.snapshot().await.unwrap().rings, rang + 1);
    observer.close().await;
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// 3. Deadlocks with another application
// ---------------------------------------------------------------------------------------

static TELLER_PAUSE: Pause = Pause::new();

/// Moves one unit from account 2 to account 1 in the application's own table.
#[actor]
#[derive(Default)]
struct Teller {
    transfers: u32,
}

#[actor]
impl Teller {
    #[command]
    async fn transfer(&mut self, turn: &mut Turn<Self>) -> Result<u32, TurnError> {
        let connection = backend::connection(turn).await?;
        if let Some(victim) = backend::DEADLOCK_VICTIM {
            connection.execute(victim).await?;
        }
        sqlx::query("UPDATE accounts SET balance = balance - 1 WHERE id = 2")
            .execute(&mut *connection)
            .await?;
        TELLER_PAUSE.hold_first_run().await;
        sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            .execute(&mut *connection)
            .await?;
        self.transfers += 1;
        Ok(self.transfers)
    }
}

/// A handler whose own SQL deadlocks with another application's transaction (and is the
/// victim) is retried inside the runtime within the call's deadline: the caller gets its
/// result, not an error, and the transfer is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlocks_from_other_applications_are_retried() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 8, &ManualClock::starting_now()).await;
    let observer = backend::observer(&url).await;
    sqlx::raw_sql(
        "CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL);
         INSERT INTO accounts VALUES (1, 0), (2, 0);
         CREATE TABLE audit (n INT NOT NULL);",
    )
    .execute(&observer)
    .await
    .unwrap();
    let mut other_application = observer.begin().await.unwrap();
    sqlx::raw_sql(backend::OTHER_APPLICATION_FIRST)
        .execute(&mut *other_application)
        .await
        .unwrap();
    let teller = runtime.reference::<Teller>("t");

    let other_work = async move {
        TELLER_PAUSE.entered().await;
        // Waits for the handler's row 2 while holding row 1, which the handler wants next.
        sqlx::query("UPDATE accounts SET balance = balance + 100 WHERE id = 2")
            .execute(&mut *other_application)
            .await?;
        other_application.commit().await
    };
    let release = async {
        // Only the other application's session comes to wait for a lock.
        until_a_session_waits_for_a_lock(&observer, || false).await;
        TELLER_PAUSE.release();
    };
    let (called, other, ()) = within(30, "the transfer", async {
        tokio::join!(teller.transfer(), other_work, release)
    })
    .await;

    assert!(called.is_ok(), "the transfer: {called:?}");
    other.expect("the other application commits");
    assert_eq!(
        scalar(&observer, "SELECT balance FROM accounts WHERE id = 1").await,
        101
    );
    assert_eq!(
        scalar(&observer, "SELECT balance FROM accounts WHERE id = 2").await,
        99
    );
    assert_eq!(teller.snapshot().await.unwrap().transfers, 1);
    observer.close().await;
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// 4. Callers giving up on a locked actor
// ---------------------------------------------------------------------------------------

static GATE_PAUSE: Pause = Pause::new();

/// An actor whose `hold` keeps its turn open until the test releases it.
#[actor]
#[derive(Default)]
struct Gate {
    touched: u32,
}

#[actor]
impl Gate {
    #[command]
    async fn hold(&mut self) {
        GATE_PAUSE.hold_first_run().await;
    }

    #[command]
    fn touch(&mut self) -> u32 {
        self.touched += 1;
        self.touched
    }
}

/// Callers that time out waiting for a busy actor give their connections back: with a
/// pool of 4, a turn holding one actor and three callers that gave up on it, a call to
/// another actor still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn caller_giving_up_on_a_locked_actor_leaves_no_connection_behind() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 4, &ManualClock::starting_now()).await;
    let slow = runtime.reference::<Gate>("slow");
    let holding = tokio::spawn({
        let slow = slow.clone().timeout(Duration::from_secs(30));
        async move { slow.hold().await }
    });
    GATE_PAUSE.entered().await;

    let impatient = slow.clone().timeout(Duration::from_millis(200));
    let gave_up = within(10, "the impatient callers", async {
        tokio::join!(impatient.touch(), impatient.touch(), impatient.touch())
    })
    .await;
    let idle = within(10, "the call to the idle actor", async {
        runtime
            .reference::<Gate>("idle")
            .timeout(Duration::from_secs(2))
            .touch()
            .await
    })
    .await;
    GATE_PAUSE.release();
    let held = within(30, "the slow turn", holding).await.unwrap();

    for result in [gave_up.0, gave_up.1, gave_up.2] {
        assert!(
            matches!(result, Err(Error::SyncTimeout { .. })),
            "an impatient caller: {result:?}"
        );
    }
    assert!(
        matches!(idle, Ok(1)),
        "the call to the idle actor: {idle:?}"
    );
    held.unwrap();
    within(30, "closing the runtime", runtime.close()).await;
}

static RELAY_PAUSE: Pause = Pause::new();

/// How many times `Relay::hold` ran, retries and stale reruns included.
static RELAY_HOLDS: AtomicUsize = AtomicUsize::new(0);

/// An actor whose `hold` keeps its turn open until the test releases it, and which logs
/// what it was told.
#[actor]
#[derive(Default)]
struct Relay {
    log: Vec<String>,
}

#[actor]
impl Relay {
    #[command]
    async fn hold(&mut self) {
        RELAY_HOLDS.fetch_add(1, Ordering::SeqCst);
        RELAY_PAUSE.hold_first_run().await;
        self.log.push("held".to_owned());
    }

    #[command]
    fn tell(&mut self, entry: String) -> usize {
        self.log.push(entry);
        self.log.len()
    }
}

/// A turn that waited for its actor's lock reads the mailbox as the turn it waited for left
/// it: the head that turn completed is gone, the message enqueued meanwhile is next. A head
/// read from a snapshot taken before the wait would run the completed message again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_that_waited_for_the_lock_reads_the_head_the_holder_left() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 4, &ManualClock::starting_now()).await;
    let observer = backend::observer(&url).await;
    let relay = runtime.reference::<Relay>("r");
    let held = relay.enqueue().hold().await.unwrap();
    let holding = tokio::spawn({
        let held = held.clone();
        async move { held.wait(Duration::from_secs(30)).await }
    });
    RELAY_PAUSE.entered().await;
    let told = relay
        .enqueue()
        .tell("told while held".to_owned())
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let told = told.clone();
        async move { told.wait(Duration::from_secs(30)).await }
    });

    until_a_session_waits_for_a_lock(&observer, || false).await;
    RELAY_PAUSE.release();
    within(30, "the held turn", holding).await.unwrap().unwrap();
    let position = within(30, "the waiting turn", waiting).await.unwrap();

    assert_eq!(position.unwrap(), 2);
    assert_eq!(
        RELAY_HOLDS.load(Ordering::SeqCst),
        1,
        "the held turn ran again"
    );
    assert_eq!(
        relay.snapshot().await.unwrap().log,
        ["held", "told while held"]
    );
    observer.close().await;
    within(30, "closing the runtime", runtime.close()).await;
}

// ---------------------------------------------------------------------------------------
// 5 and 6. Handlers whose writes fail
// ---------------------------------------------------------------------------------------

/// An actor whose handlers do what the server refuses; gives up after two attempts.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Clumsy {
    log: Vec<String>,
}

#[actor]
impl Clumsy {
    /// Runs SQL that leaves the turn's transaction unable to commit, ignores its outcome and
    /// returns Ok.
    #[command]
    async fn swallow_an_sql_error(&mut self, turn: &mut Turn<Self>) -> Result<(), TurnError> {
        let _ignored = backend::connection(turn)
            .await?
            .execute(backend::BREAKS_THE_TRANSACTION)
            .await;
        Ok(())
    }

    #[command]
    fn schedule_under(&mut self, turn: &mut Turn<Self>, key: String) {
        let at = turn.now() + TimeDelta::minutes(1);
        turn.schedule(at, key).ring();
    }

    #[command]
    fn send_to(&mut self, turn: &mut Turn<Self>, actor_id: String) {
        turn.send::<Clumsy>(actor_id).record("sent");
    }

    #[command]
    fn record(&mut self, entry: String) {
        self.log.push(entry);
    }

    #[reminder]
    fn ring(&mut self) {
        self.log.push("rang".to_owned());
    }
}

/// Past the first backoff (1 s), well within the second.
const PAST_BACKOFF: Duration = Duration::from_secs(30);

/// A handler that swallows an SQL error that left its transaction unable to commit and
/// returns Ok fails as a counted attempt with an error, backs off, becomes a dead letter
/// after `max_attempts`, and the actor's later messages then run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swallowed_sql_error_is_a_counted_attempt() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 8, &clock).await;
    let clumsy = runtime.reference::<Clumsy>("c");
    let swallowing = clumsy.enqueue().swallow_an_sql_error().await.unwrap();
    let later = clumsy.enqueue().record("later").await.unwrap();

    let first = within(30, "the first drain", runtime.testing().drain()).await;
    let status = swallowing.status().await.unwrap();
    assert!(
        matches!(&status, MessageStatus::Ready { attempts, last_error: Some(_), .. } if *attempts >= 1),
        "after the first drain ({first:?}) the message is {status:?}"
    );
    clock.advance(PAST_BACKOFF);
    let second = within(30, "the second drain", runtime.testing().drain()).await;
    let status = swallowing.status().await.unwrap();
    assert!(
        matches!(status, MessageStatus::Dead { attempts: 2, .. }),
        "after the second drain ({second:?}) the message is {status:?}"
    );
    assert_eq!(later.status().await.unwrap(), MessageStatus::Completed);
    assert_eq!(clumsy.snapshot().await.unwrap().log, ["later"]);
    runtime.close().await;
}

/// How often [`Swallower::swallow`] ran.
static SWALLOWS: AtomicUsize = AtomicUsize::new(0);

/// Swallows an SQL error that leaves its turn's transaction unable to commit, counting its
/// runs; gives up after two attempts.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Swallower {}

#[actor]
impl Swallower {
    /// Runs SQL that leaves the turn's transaction unable to commit, ignores its outcome and
    /// returns Ok.
    #[command]
    async fn swallow(&mut self, turn: &mut Turn<Self>) -> Result<(), TurnError> {
        SWALLOWS.fetch_add(1, Ordering::SeqCst);
        let _ignored = backend::connection(turn)
            .await?
            .execute(backend::BREAKS_THE_TRANSACTION)
            .await;
        Ok(())
    }
}

/// A synchronous call whose handler swallows an SQL error that left its transaction unable
/// to commit hears that its handler failed, after one run, as an enqueued one counts an
/// attempt (`swallowed_sql_error_is_a_counted_attempt`): the same handler breaks the same
/// transaction on every run, so running it again until the caller's deadline and then
/// answering "timed out" hides the handler's error behind a wait. About a second on a
/// working runtime; 5 s deadline, 20 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_whose_handler_swallows_an_sql_error_hears_it_failed_after_one_run() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 8, &clock).await;
    let called = within(
        20,
        "the call",
        runtime
            .reference::<Swallower>("called")
            .timeout(Duration::from_secs(5))
            .swallow(),
    )
    .await;
    let runs = SWALLOWS.load(Ordering::SeqCst);
    within(30, "closing the runtime", runtime.close()).await;
    assert!(
        runs == 1 && matches!(called, Err(Error::HandlerFailed { .. })),
        "a call whose handler swallowed an SQL error ran it {runs} times and heard \
         {called:?}; want one run and HandlerFailed"
    );
}

/// A NUL byte (which PostgreSQL text refuses) is caught before anything is written: an
/// actor id with one is `Error::InvalidActorId`, an idempotency key with one a typed error
/// (not a database error), and a handler that schedules a reminder under such a key or
/// sends to such an id fails as a counted attempt (a dead letter), not a wedged mailbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nul_bytes_are_a_typed_error_not_a_database_error() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 8, &clock).await;
    let observer = backend::observer(&url).await;
    let mut wrong = Vec::new();

    // The doors: a NUL in an id or a key is refused with a typed error.
    let nul_id = runtime.reference::<Clumsy>("nul\0id");
    let called = nul_id.record("x").await;
    if !matches!(called, Err(Error::InvalidActorId { .. })) {
        wrong.push(format!("a call to an id with NUL: {called:?}"));
    }
    let enqueued = nul_id.enqueue().record("x").await.map(|_| ());
    if !matches!(enqueued, Err(Error::InvalidActorId { .. })) {
        wrong.push(format!("an enqueue to an id with NUL: {enqueued:?}"));
    }
    let keyed = runtime.reference::<Clumsy>("k");
    let called = keyed.clone().idempotency_key("key\0").record("x").await;
    if !matches!(called, Err(ref error) if !matches!(error, Error::Database(_))) {
        wrong.push(format!("a call with a NUL key: {called:?}"));
    }
    let enqueued = keyed
        .enqueue()
        .idempotency_key("key\0")
        .record("x")
        .await
        .map(|_| ());
    if !matches!(enqueued, Err(ref error) if !matches!(error, Error::Database(_))) {
        wrong.push(format!("an enqueue with a NUL key: {enqueued:?}"));
    }
    let written = scalar(&observer, "SELECT COUNT(*) FROM solid_messages").await;
    if written != 0 {
        wrong.push(format!("the refused calls wrote {written} messages"));
    }

    // The handlers: a NUL key or target id fails the turn, which ends as a dead letter.
    let scheduler = runtime.reference::<Clumsy>("scheduler");
    let scheduling = scheduler.enqueue().schedule_under("bell\0").await.unwrap();
    let after_scheduling = scheduler.enqueue().record("after").await.unwrap();
    let sender = runtime.reference::<Clumsy>("sender");
    let sending = sender.enqueue().send_to("nul\0id").await.unwrap();
    let after_sending = sender.enqueue().record("after").await.unwrap();
    for round in 0..2 {
        let drained = within(30, "a drain", runtime.testing().drain()).await;
        if let Err(error) = drained {
            wrong.push(format!("drain {round}: {error:?}"));
        }
        clock.advance(PAST_BACKOFF);
    }
    for (what, message) in [("scheduling", &scheduling), ("sending", &sending)] {
        let status = message.status().await.unwrap();
        if !matches!(status, MessageStatus::Dead { attempts, .. } if attempts >= 1) {
            wrong.push(format!("the {what} message: {status:?}"));
        }
    }
    for (what, message) in [
        ("after scheduling", &after_scheduling),
        ("after sending", &after_sending),
    ] {
        let status = message.status().await.unwrap();
        if status != MessageStatus::Completed {
            wrong.push(format!("the message {what}: {status:?}"));
        }
    }

    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    observer.close().await;
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// 7 and 8. Effect leases
// ---------------------------------------------------------------------------------------

/// A ping to the outside world.
#[derive(Serialize, Deserialize)]
struct Ping {
    n: u32,
}

impl Effect for Ping {
    const NAME: &'static str = "ping";
    type Output = ();
}

/// Emits pings.
#[actor]
#[derive(Default)]
struct Herald {}

#[actor]
impl Herald {
    #[command]
    fn ping(&mut self, turn: &mut Turn<Self>, count: u32) {
        for n in 0..count {
            turn.emit(Ping { n });
        }
    }
}

/// What the ping handler saw: the effect ids it began, in order; its first run pauses.
struct EffectProbe {
    begun: Mutex<Vec<String>>,
    pause: Pause,
}

impl EffectProbe {
    const fn new() -> Self {
        Self {
            begun: Mutex::new(Vec::new()),
            pause: Pause::new(),
        }
    }

    fn begun(&self) -> Vec<String> {
        self.begun
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A runtime whose ping handler reports to `probe`.
async fn pinging_runtime(url: &str, clock: ManualClock, probe: &'static EffectProbe) -> Runtime {
    pinging(backend::builder(url, 8).clock(clock), probe).await
}

/// A runtime whose ping handler reports to `probe`, with an effect lease of `lease`.
async fn pinging_runtime_leased(
    url: &str,
    probe: &'static EffectProbe,
    lease: Duration,
) -> Runtime {
    let builder = backend::builder(url, 8)
        .clock(ManualClock::starting_now())
        .workers(Workers::default().effect_lease(lease));
    pinging(builder, probe).await
}

/// Starts `builder` with a ping handler that reports to `probe`.
async fn pinging(builder: solid_objects::Builder, probe: &'static EffectProbe) -> Runtime {
    builder
        .policy(AllowAll)
        .effect(move |_: Ping, context: EffectContext| async move {
            probe
                .begun
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(context.id().to_owned());
            probe.pause.hold_first_run().await;
            Ok::<(), Failure>(())
        })
        .start()
        .await
        .expect("the runtime starts")
}

static LEASE_PROBE: EffectProbe = EffectProbe::new();

/// A host whose clock is an hour ahead cannot take an effect that another host is running:
/// leases are measured by the database server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn effect_lease_uses_the_database_clock() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let on_time = pinging_runtime(&url, ManualClock::starting_now(), &LEASE_PROBE).await;
    let ahead = ManualClock::starting_now();
    ahead.advance(Duration::from_secs(3600));
    let ahead = pinging_runtime(&url, ahead, &LEASE_PROBE).await;
    on_time.reference::<Herald>("h").ping(1).await.unwrap();

    let running = tokio::spawn({
        let on_time = on_time.clone();
        async move { on_time.testing().run_effects().await }
    });
    LEASE_PROBE.pause.entered().await;
    let stolen = within(30, "the other host's pass", ahead.testing().run_effects()).await;
    let begun_meanwhile = LEASE_PROBE.begun();
    LEASE_PROBE.pause.release();
    let ran = within(30, "the slow effect", running).await.unwrap();

    assert!(
        matches!(stolen, Ok(0)),
        "the host ahead ran {stolen:?} effects; the handler began {begun_meanwhile:?}"
    );
    assert_eq!(begun_meanwhile.len(), 1, "{begun_meanwhile:?}");
    assert!(matches!(ran, Ok(1)), "{ran:?}");
    on_time.close().await;
    ahead.close().await;
}

static RENEWAL_PROBE: EffectProbe = EffectProbe::new();

/// A running effect's runner renews its lease (by the server's clock) while the handler
/// runs: once the lease it was claimed with has run out, another host still cannot take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_effect_keeps_its_lease_past_the_first() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let lease = Duration::from_millis(600);
    let runner = pinging_runtime_leased(&url, &RENEWAL_PROBE, lease).await;
    let other = pinging_runtime_leased(&url, &RENEWAL_PROBE, lease).await;
    let observer = backend::observer(&url).await;
    runner.reference::<Herald>("h").ping(1).await.unwrap();

    let running = tokio::spawn({
        let runner = runner.clone();
        async move { runner.testing().run_effects().await }
    });
    RENEWAL_PROBE.pause.entered().await;
    let claimed_until = scalar(&observer, "SELECT MAX(available_at) FROM solid_effects").await;
    // A renewal after the first lease ran out leases it past the first lease's end plus
    // another lease.
    let past_first = i64::try_from(lease.as_micros()).unwrap() + claimed_until;
    let renewed_late = eventually(Duration::from_secs(20), || {
        let observer = observer.clone();
        async move {
            let sql = format!(
                "SELECT COUNT(*) FROM solid_effects \
                 WHERE status = 'running' AND available_at > {past_first}"
            );
            scalar(&observer, &sql).await == 1
        }
    })
    .await;
    let stolen = within(30, "the other host's pass", other.testing().run_effects()).await;
    let begun_meanwhile = RENEWAL_PROBE.begun();
    RENEWAL_PROBE.pause.release();
    let ran = within(30, "the slow effect", running).await.unwrap();

    assert!(renewed_late, "the running effect's lease was not renewed");
    assert!(
        matches!(stolen, Ok(0)),
        "the other host ran {stolen:?} effects; the handler began {begun_meanwhile:?}"
    );
    assert_eq!(begun_meanwhile.len(), 1, "{begun_meanwhile:?}");
    assert!(matches!(ran, Ok(1)), "{ran:?}");
    observer.close().await;
    runner.close().await;
    other.close().await;
}

static BATCH_PROBE: EffectProbe = EffectProbe::new();

/// A worker holds a lease only on effects it is running: while it is stuck in the first
/// effect of a pass, the others are not leased to it (leased but not begun, they would be
/// claimed and run again by another worker once a slow pass outlives the lease). Then
/// every effect runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn effects_run_once_per_lease() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = pinging_runtime(&url, ManualClock::starting_now(), &BATCH_PROBE).await;
    let observer = backend::observer(&url).await;
    runtime.reference::<Herald>("h").ping(5).await.unwrap();

    let running = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.testing().run_effects().await }
    });
    BATCH_PROBE.pause.entered().await;
    let leased: Vec<String> = sqlx::query_scalar(backend::RUNNING_EFFECT_IDS)
        .fetch_all(&observer)
        .await
        .unwrap();
    let begun = BATCH_PROBE.begun();
    BATCH_PROBE.pause.release();
    let ran = within(30, "the pass", running).await.unwrap();

    let leased_not_begun: Vec<&String> = leased.iter().filter(|id| !begun.contains(id)).collect();
    assert!(
        leased_not_begun.is_empty(),
        "{} effects are leased to the stuck worker but not begun: {leased_not_begun:?}",
        leased_not_begun.len()
    );
    assert!(matches!(ran, Ok(5)), "{ran:?}");
    let mut all = BATCH_PROBE.begun();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 5, "every effect ran once");
    assert_eq!(BATCH_PROBE.begun().len(), 5, "every effect ran once");
    observer.close().await;
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_calls_never_wedge_the_pool() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 4, &clock).await;
    let mut tasks = Vec::new();
    for task in 0..8_u64 {
        let runtime = runtime.clone();
        tasks.push(tokio::spawn(async move {
            let mut random = (task + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let tally = runtime.reference::<Tally>(format!("t-{}", task % 3));
            for _ in 0..120 {
                let roll = next_random(&mut random);
                match roll % 4 {
                    0 => {
                        let deadline = Duration::from_micros(roll % 3_000);
                        let _ = tokio::time::timeout(deadline, tally.add()).await;
                    }
                    1 => drop_after(tally.add(), roll % 150).await,
                    2 => drop_after(tally.enqueue().add(), roll % 150).await,
                    _ => {
                        let quick = tally.clone().timeout(Duration::from_millis(roll % 3 + 1));
                        let _ = quick.add().await;
                    }
                }
            }
        }));
    }
    within(120, "the cancelled calls", async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;

    let tally = runtime.reference::<Tally>("after");
    for n in 1..=100 {
        let added = within(10, "a call after the cancellations", tally.add()).await;
        assert_eq!(added.unwrap(), n);
    }
    let outsider = runtime_on(&url, 1, &clock).await;
    let other = within(10, "another runtime's call", async {
        outsider.reference::<Tally>("after").add().await
    })
    .await;
    assert_eq!(other.unwrap(), 101);
    outsider.close().await;
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_handler_gives_up_its_row_lock_after_the_turn_timeout() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = backend::builder(&url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .turn_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let tally = runtime.reference::<Tally>("t");
    let hung = tally.enqueue().stall().await.unwrap();
    let later = tally.enqueue().add().await.unwrap();

    within(10, "the abandoned turn", runtime.testing().drain())
        .await
        .unwrap();
    let first = hung.status().await.unwrap();
    clock.advance(Duration::from_secs(3600));
    within(30, "the remaining turns", async {
        while later.result().await.unwrap().is_none() {
            runtime.testing().drain().await.unwrap();
            clock.advance(Duration::from_secs(3600));
        }
    })
    .await;

    assert!(
        matches!(&first, MessageStatus::Ready { attempts: 1, last_error: Some(error), .. } if error.contains("turn timeout")),
        "{first:?}"
    );
    assert!(matches!(
        hung.status().await.unwrap(),
        MessageStatus::Dead { attempts: 5, .. }
    ));
    assert_eq!(later.result().await.unwrap(), Some(1));
    runtime.close().await;
}

/// A call that locks its actor and ends without a commit (here: the actor is paused) ends
/// its transaction before it returns, so the actor's row is free at once, not when the
/// pool gets the connection back; so is the row after a worker pass that ran the last
/// message and found the mailbox empty. (A dropped transaction kept the row locked until a
/// task switch later, and a drain right after could skip the actor: the likely cause of an
/// intermittent failure of `moving_a_reminder_while_it_fires_never_deadlocks`.)
#[tokio::test(flavor = "current_thread")]
async fn an_actor_is_unlocked_when_a_call_or_pass_that_commits_nothing_returns() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let clock = ManualClock::starting_now();
    let runtime = runtime_on(&url, 4, &clock).await;
    let bell = runtime.reference::<Bell>("b");
    bell.enqueue().arm().await.unwrap();
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    assert!(backend::row_is_free_while_this_thread_blocks(&url, "b"));

    runtime.admin().pause("Bell", "b").await.unwrap();
    let paused = bell.arm().await;
    assert!(matches!(paused, Err(Error::Paused { .. })), "{paused:?}");
    assert!(backend::row_is_free_while_this_thread_blocks(&url, "b"));
    runtime.close().await;
}

// ---------------------------------------------------------------------------------------
// A transaction waiting for the pool
// ---------------------------------------------------------------------------------------

/// A transaction that waits for a connection from the pool gets one: while it waits, the
/// connections other transactions leave go back to the pool, not to the ones the store keeps
/// parked for the next transactions (which take those first, and would overtake it for
/// ever under a steady load).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_waiting_for_the_pool_is_not_overtaken_for_ever() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 4, &ManualClock::starting_now()).await;
    let busy = AtomicBool::new(true);
    let load = (0..8).map(|lane| {
        let (busy, runtime) = (&busy, &runtime);
        async move {
            let other = runtime.reference::<Pen>(format!("busy-{lane}"));
            while busy.load(Ordering::SeqCst) {
                other
                    .enqueue()
                    .receive(format!("{lane}"))
                    .await
                    .expect("another actor's enqueue");
            }
        }
    });
    let load = futures_util::future::join_all(load);
    let patient = async {
        let pen = runtime.reference::<Pen>("patient");
        for entry in 0..40 {
            within(
                10,
                "an enqueue waiting for the pool under a steady load",
                pen.enqueue().receive(format!("{entry}")),
            )
            .await
            .expect("the enqueue is acknowledged");
        }
        busy.store(false, Ordering::SeqCst);
    };
    tokio::join!(load, patient);
    runtime.close().await;
}

/// Holds the first run of [`Holder::hold`] until the test releases it.
static HOLDER_PAUSE: Pause = Pause::new();

/// Holds its turn, and its connection, while the test looks.
#[actor]
#[derive(Default)]
struct Holder {
    held: u32,
}

#[actor]
impl Holder {
    #[command]
    async fn hold(&mut self) -> u32 {
        HOLDER_PAUSE.hold_first_run().await;
        self.held += 1;
        self.held
    }
}

/// A read (an actor's snapshot, an operator's listing) takes its connection from the pool,
/// and the store parks at most half of the pool so that reads always find some: on a pool
/// of two, with one connection in a long turn and the other left parked by a call that
/// committed meanwhile, a snapshot of another actor still reads at once, not after the long
/// turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_finds_a_connection_while_the_other_is_in_a_long_turn() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let runtime = runtime_on(&url, 2, &ManualClock::starting_now()).await;
    let held = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            runtime
                .reference::<Holder>("long")
                .timeout(Duration::from_secs(30))
                .hold()
                .await
        })
    };
    HOLDER_PAUSE.entered().await;
    // A call of another actor commits meanwhile, on the pool's other connection.
    let quick = runtime.reference::<Pen>("quick");
    within(10, "another actor's call", quick.receive("x".to_owned()))
        .await
        .expect("another actor's call");
    let read = tokio::time::timeout(Duration::from_secs(3), quick.snapshot())
        .await
        .map(|state| state.map(|state| state.received));
    HOLDER_PAUSE.release();
    within(10, "the long turn", held).await.unwrap().unwrap();
    runtime.close().await;
    assert!(
        matches!(&read, Ok(Ok(received)) if received == &["x"]),
        "a snapshot with one connection in a long turn and the other parked heard {read:?}"
    );
}
