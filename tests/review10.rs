//! Adversarial review of issue 10 ("Operate it"): the administration API, pause, the audit
//! log, and PostgreSQL's LISTEN/NOTIFY wake-up. Each test states the promise it attacks.

mod support;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use solid_objects::admin::DeadLetterFilter;
use solid_objects::policy::{AdminRequest, Denied, Policy, Request};
use solid_objects::prelude::*;
use support::eventually;
use support::postgres::PgServer;
use tokio::sync::Semaphore;

/// A desk that counts and breaks on demand.
#[actor]
#[derive(Default)]
struct Desk {
    total: i64,
    broken: bool,
}

#[actor]
impl Desk {
    #[command]
    fn add(&mut self, n: i64) -> i64 {
        self.total += n;
        self.total
    }

    #[command]
    fn set_broken(&mut self, broken: bool) {
        self.broken = broken;
    }

    /// Fails for good while the desk is broken.
    #[command]
    fn fragile(&mut self, why: String) -> Result<i64, Failure> {
        if self.broken {
            return Err(Failure::permanent(why));
        }
        self.total += 1;
        Ok(self.total)
    }

    #[query]
    fn total(&self) -> i64 {
        self.total
    }
}

/// Holds its turn at a gate named after its id until the test opens it.
#[actor]
#[derive(Default)]
struct Door {
    held: u32,
}

#[actor]
impl Door {
    #[command]
    async fn hold(&mut self, turn: &mut Turn<Self>) -> u32 {
        gate(turn.actor_id()).pass().await;
        self.held += 1;
        self.held
    }
}

struct Gate {
    entered: Semaphore,
    open: Semaphore,
}

impl Gate {
    async fn pass(&self) {
        self.entered.add_permits(1);
        let _ = self.open.acquire().await;
    }

    async fn reached(&self) {
        tokio::time::timeout(Duration::from_secs(15), self.entered.acquire())
            .await
            .expect("the handler reached its gate")
            .unwrap()
            .forget();
    }

    fn open(&self) {
        self.open.close();
    }
}

static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

fn gate(name: &str) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(gates.entry(name.to_owned()).or_insert_with(|| {
        Arc::new(Gate {
            entered: Semaphore::new(0),
            open: Semaphore::new(0),
        })
    }))
}

/// Everything allowed, administration included.
struct Operators;

impl Policy for Operators {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_administration(&self, _request: &AdminRequest<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

/// A policy whose administration check panics.
struct Panicking;

impl Policy for Panicking {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_administration(&self, _request: &AdminRequest<'_>) -> Result<(), Denied> {
        panic!("the policy's directory lookup failed");
    }
}

/// Polls the inner future at most `left` times, then drops it where it stands (as a
/// `tokio::time::timeout`, a `select!` or a disconnected HTTP client would).
struct PollLimit<F: Future> {
    inner: Pin<Box<F>>,
    left: usize,
}

impl<F: Future> Future for PollLimit<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(value) => Poll::Ready(Some(value)),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn poll_limit<F: Future>(left: usize, inner: F) -> PollLimit<F> {
    PollLimit {
        inner: Box::pin(inner),
        left,
    }
}

fn ana() -> Value {
    json!({ "operator": "ana" })
}

// ---------------------------------------------------------------------------------------
// SQLite

struct Sqlite {
    dir: tempfile::TempDir,
    clock: ManualClock,
}

impl Sqlite {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            clock: ManualClock::starting_now(),
        }
    }

    fn builder(&self) -> solid_objects::Builder {
        Runtime::builder()
            .sqlite(self.dir.path().join("actors.db"))
            .clock(self.clock.clone())
            .policy(Operators)
            .actor::<Desk>()
            .actor::<Door>()
            .sync_timeout(Duration::from_secs(30))
    }

    async fn runtime(&self) -> Runtime {
        self.builder().start().await.unwrap()
    }

    async fn pool(&self) -> sqlx::SqlitePool {
        let options =
            sqlx::sqlite::SqliteConnectOptions::new().filename(self.dir.path().join("actors.db"));
        sqlx::SqlitePool::connect_with(options).await.unwrap()
    }
}

async fn sqlite_scalar(pool: &sqlx::SqlitePool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Promise: every admin call that changes something is audited (who, what, when), and any
/// future may be dropped at any await. A retry of a dead letter whose future is dropped
/// after its change committed must not leave the change without its audit row.
#[tokio::test]
async fn a_dropped_retry_never_leaves_a_retried_dead_letter_without_its_audit_row() {
    let db = Sqlite::new();
    let runtime = db.runtime().await;
    let pool = db.pool().await;
    let admin = runtime.admin().context(ana());
    let desk = runtime.reference::<Desk>("d1");
    desk.set_broken(true).await.unwrap();
    let mut unaudited = Vec::new();
    for polls in 1..=40 {
        assert!(desk.fragile(format!("broken {polls}")).await.is_err());
        let id = sqlite_scalar(
            &pool,
            "SELECT MAX(id) FROM solid_messages WHERE status = 'dead' AND retried_as IS NULL",
        )
        .await;
        let _ = poll_limit(polls, admin.retry_dead_letter(id)).await;
        let retried = sqlite_scalar(
            &pool,
            &format!("SELECT COUNT(*) FROM solid_messages WHERE id = {id} AND retried_as > 0"),
        )
        .await;
        let audited = sqlite_scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'retry_dead_letter' \
                 AND resource = 'message {id}'"
            ),
        )
        .await;
        if retried == 1 && audited == 0 {
            unaudited.push((polls, id));
        }
    }
    // The writer still works.
    assert_eq!(desk.add(1).await.unwrap(), 1);
    assert!(
        unaudited.is_empty(),
        "dead letters retried (committed) with no audit row, as (polls before the drop, \
         message id): {unaudited:?}"
    );
}

/// Promise: a change is never without its audit row: after a drop at any await, a paused
/// actor has its `pause` row (written before the pause acts; a row without a pause is a
/// call dropped before it acted).
#[tokio::test]
async fn a_dropped_pause_is_paused_and_audited_or_neither() {
    let db = Sqlite::new();
    let runtime = db.runtime().await;
    let pool = db.pool().await;
    let admin = runtime.admin().context(ana());
    for polls in 1..=30 {
        let id = format!("p{polls}");
        let _ = poll_limit(polls, admin.pause("Desk", &id)).await;
        let paused = sqlite_scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_instances WHERE actor_id = '{id}' \
                 AND paused_at IS NOT NULL"
            ),
        )
        .await;
        let audited = sqlite_scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'pause' \
                 AND resource = 'Desk/{id}'"
            ),
        )
        .await;
        assert!(
            paused <= audited,
            "after {polls} polls: paused {paused}, rows {audited}"
        );
    }
    assert_eq!(runtime.reference::<Desk>("x").add(2).await.unwrap(), 2);
}

/// Promise: any future may be dropped at any await and nothing is left behind. The
/// doctor's scratch actor (`solid_objects.doctor`) must not outlive a doctor call that was
/// dropped half-way: it would show in every listing and `status` forever.
#[tokio::test]
async fn a_dropped_doctor_leaves_no_scratch_actor_behind() {
    let db = Sqlite::new();
    let runtime = db.runtime().await;
    let pool = db.pool().await;
    let admin = runtime.admin().context(ana());
    let mut left_behind = Vec::new();
    for polls in 1..=40 {
        let _ = poll_limit(polls, admin.doctor()).await;
        let scratch = sqlite_scalar(
            &pool,
            "SELECT COUNT(*) FROM solid_instances WHERE actor_type = 'solid_objects.doctor'",
        )
        .await;
        if scratch > 0 {
            left_behind.push((polls, scratch));
            sqlx::query("DELETE FROM solid_instances WHERE actor_type = 'solid_objects.doctor'")
                .execute(&pool)
                .await
                .unwrap();
        }
    }
    let types = admin.actor_types().await.unwrap();
    assert!(
        left_behind.is_empty(),
        "doctor scratch actors left behind (polls before the drop, rows): {left_behind:?}; \
         types now {types:?}"
    );
}

/// Promise: bad input gets a clear error and changes nothing. An empty or oversized actor
/// type is bad input, as an empty or oversized id is.
#[tokio::test]
async fn pausing_an_empty_or_oversized_actor_type_is_refused_and_changes_nothing() {
    let db = Sqlite::new();
    let runtime = db.runtime().await;
    let pool = db.pool().await;
    let admin = runtime.admin().context(ana());
    let empty = admin.pause("", "d1").await;
    let huge_type = "T".repeat(1 << 20);
    let huge = admin.pause(&huge_type, "d1").await;
    let rows = sqlite_scalar(&pool, "SELECT COUNT(*) FROM solid_instances").await;
    let longest = sqlite_scalar(
        &pool,
        "SELECT COALESCE(MAX(length(actor_type)), 0) FROM solid_instances",
    )
    .await;
    assert!(
        empty.is_err() && huge.is_err() && rows == 0,
        "pause(\"\", \"d1\") = {empty:?}, pause(<1 MiB type>, \"d1\") = {:?}; solid_instances \
         now has {rows} rows, the longest actor_type {longest} bytes",
        huge.map_err(|e| e.to_string().chars().take(200).collect::<String>())
    );
}

/// Promise: a policy is user code; a panic in it denies the call, and the denial is
/// audited (expected to hold).
#[tokio::test]
async fn a_panicking_policy_denies_and_the_denial_is_audited() {
    let db = Sqlite::new();
    let runtime = db.builder().policy(Panicking).start().await.unwrap();
    let error = runtime
        .admin()
        .context(ana())
        .pause("Desk", "d1")
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::AdministrationDenied { .. }),
        "{error}"
    );
    runtime.close().await;
    let pool = db.pool().await;
    let denied = sqlite_scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'pause' AND outcome = 'denied'",
    )
    .await;
    assert_eq!(denied, 1);
    let paused = sqlite_scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_instances WHERE paused_at IS NOT NULL",
    )
    .await;
    assert_eq!(paused, 0);
}

/// Promise: a redrive retries each dead letter once and terminates. With workers running,
/// the retries of a poison message die again (new dead letters, higher ids) while the
/// redrive is still paging forward by id: it must not pick those up and send them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redrive_with_workers_running_retries_only_the_dead_letters_that_were_there() {
    let db = Sqlite::new();
    let runtime = db.runtime().await;
    let desks: Vec<_> = (0..30)
        .map(|i| runtime.reference::<Desk>(&format!("poison-{i}")))
        .collect();
    for desk in &desks {
        desk.set_broken(true).await.unwrap();
    }
    for round in 0..10 {
        for desk in &desks {
            assert!(desk.fragile(format!("poison {round}")).await.is_err());
        }
    }
    let admin = runtime.admin().context(ana());
    let before = admin
        .dead_letters(&DeadLetterFilter::new().limit(1000))
        .await
        .unwrap()
        .len();
    assert_eq!(before, 300);
    let running = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });
    let redriven = tokio::time::timeout(
        Duration::from_secs(20),
        admin.redrive(
            &DeadLetterFilter::new()
                .actor_type("Desk")
                .operation("fragile"),
        ),
    )
    .await;
    runtime.shutdown();
    running.await.unwrap().unwrap();
    let pool = db.pool().await;
    let retried = sqlite_scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_messages WHERE retried_as > 0",
    )
    .await;
    let messages = sqlite_scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_messages WHERE operation = 'fragile'",
    )
    .await;
    let retried_by_redrive = redriven.map(|r| r.unwrap().retried).ok();
    assert!(
        retried_by_redrive == Some(300) && retried == 300,
        "one redrive of 300 dead letters: returned {retried_by_redrive:?} (None: still \
         running after 20 s); dead letters retried {retried}, fragile messages now {messages}"
    );
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

struct Postgres {
    _server: PgServer,
    url: String,
    clock: ManualClock,
}

impl Postgres {
    async fn start() -> Option<Self> {
        let server = PgServer::start()?;
        let url = server.database().await;
        Some(Self {
            _server: server,
            url,
            clock: ManualClock::starting_now(),
        })
    }

    fn builder(&self, connections: u32) -> solid_objects::Builder {
        Runtime::builder()
            .postgres(&self.url, connections)
            .clock(self.clock.clone())
            .policy(Operators)
            .actor::<Desk>()
            .actor::<Door>()
            .sync_timeout(Duration::from_secs(30))
    }

    async fn scalar(&self, sql: &str) -> i64 {
        let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        let value = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
        pool.close().await;
        value
    }

    /// A runtime whose one worker runs, listens, and polls only every 10 minutes: it finds
    /// work through notices alone.
    async fn idle_listening_workers(
        &self,
    ) -> (Runtime, tokio::task::JoinHandle<Result<(), Error>>) {
        let workers = self
            .builder(4)
            .workers(1)
            .idle_poll(Duration::from_secs(600))
            .start()
            .await
            .unwrap();
        let running = tokio::spawn({
            let workers = workers.clone();
            async move { workers.run().await }
        });
        assert!(
            eventually(Duration::from_secs(10), || async {
                self.listening().await == 1
            })
            .await,
            "the workers listen"
        );
        (workers, running)
    }

    async fn listening(&self) -> i64 {
        self.scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %solid_objects_work%'",
        )
        .await
    }
}

/// Promise (54eab36): while `run` runs, one connection listens and idle workers wake on
/// commits; the builder accepts any number of connections from 1. With `postgres(url, 1)`
/// the listener must not take the only connection and starve every turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_one_connection_postgres_runtime_still_runs_calls_while_run_listens() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db
        .builder(1)
        .sync_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let running = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            db.listening().await == 1
        })
        .await,
        "the runtime listens"
    );
    let added = tokio::time::timeout(
        Duration::from_secs(20),
        runtime.reference::<Desk>("d1").add(1),
    )
    .await
    .expect("the call ends");
    runtime.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert_eq!(
        added.as_ref().ok(),
        Some(&1),
        "a call on a 1-connection runtime while run() listens: {added:?}"
    );
}

/// Promise (54eab36): the LISTEN relay reconnects by itself. Its connection killed by the
/// server (`pg_terminate_backend`, a failover, an idle-connection reaper), a commit in
/// another process must still reach the idle workers as a notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_listen_connection_comes_back_and_notices_flow_again() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let caller = db.builder(2).start().await.unwrap();
    let (workers, running) = db.idle_listening_workers().await;
    let first = db
        .scalar(
            "SELECT MIN(pid)::BIGINT FROM pg_stat_activity \
             WHERE query LIKE 'LISTEN %solid_objects_work%'",
        )
        .await;
    db.scalar(&format!(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend({first})) AS t"
    ))
    .await;
    let relistened = eventually(Duration::from_secs(15), || async {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %solid_objects_work%' \
             AND pid <> {first}"
        ))
        .await
            == 1
    })
    .await;
    assert!(relistened, "the relay listens again on a new connection");
    let before = workers.stats().work_notices;
    let queued = caller
        .reference::<Desk>("after-kill")
        .enqueue()
        .add(3)
        .await
        .unwrap();
    let noticed = eventually(Duration::from_secs(10), || async {
        workers.stats().work_notices > before
    })
    .await;
    let ran = eventually(Duration::from_secs(10), || async {
        matches!(queued.status().await, Ok(MessageStatus::Completed))
    })
    .await;
    workers.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(noticed && ran, "noticed {noticed}, ran {ran}");
}

/// Promise: resuming from another process (an operator's CLI) wakes the idle workers on
/// PostgreSQL (the trigger of migration 7), without waiting for the polling fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_from_another_runtime_wakes_idle_workers_on_postgres() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let operator = db.builder(2).start().await.unwrap();
    operator
        .reference::<Desk>("waiting")
        .enqueue()
        .add(5)
        .await
        .unwrap();
    let admin = operator.admin().context(ana());
    assert!(admin.pause("Desk", "waiting").await.unwrap());
    let (workers, running) = db.idle_listening_workers().await;
    let before = workers.stats().work_notices;
    assert!(admin.resume("Desk", "waiting").await.unwrap());
    let ran = eventually(Duration::from_secs(15), || async {
        db.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'completed'")
            .await
            == 1
    })
    .await;
    let notices = workers.stats().work_notices - before;
    workers.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(
        ran,
        "the resumed actor's message ran (notices since: {notices})"
    );
}

/// Promise: "once pause returns, no turn of it runs (a turn in flight finished first)". On
/// PostgreSQL a turn in flight holds the actor's row; the pause must wait for its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_during_a_turn_returns_after_that_turn_committed_on_postgres() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db.builder(4).start().await.unwrap();
    let door = runtime.reference::<Door>("pg-door");
    let holding = tokio::spawn({
        let door = door.clone();
        async move { door.hold().await }
    });
    gate("pg-door").reached().await;
    let pausing = tokio::spawn({
        let admin = runtime.admin().context(ana());
        async move { admin.pause("Door", "pg-door").await }
    });
    // The pause cannot finish while the turn holds the row.
    let early = tokio::time::timeout(Duration::from_millis(300), async {
        while !pausing.is_finished() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    gate("pg-door").open();
    assert!(pausing.await.unwrap().unwrap());
    let revision = db
        .scalar("SELECT revision FROM solid_instances WHERE actor_id = 'pg-door'")
        .await;
    assert!(
        early.is_err(),
        "the pause returned while the turn was in flight"
    );
    assert_eq!(
        revision, 1,
        "the turn in flight committed before the pause returned"
    );
    assert_eq!(holding.await.unwrap().unwrap(), 1);
    let after = door.hold().await.unwrap_err();
    assert!(matches!(after, Error::Paused { .. }), "{after}");
}

/// Promise: bad input (NUL bytes) gets a clear, typed error at the door (the project's rule:
/// "never a database error") and changes nothing, the audit table included.
#[tokio::test]
async fn a_nul_byte_in_an_actor_type_is_a_typed_error_and_the_failed_pause_is_audited() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db.builder(2).start().await.unwrap();
    let admin = runtime.admin().context(ana());
    let error = admin.pause("Desk\0evil", "d1").await.unwrap_err();
    let events = admin.audit_log(5).await.unwrap();
    let pauses: Vec<_> = events.iter().filter(|e| e.action == "pause").collect();
    assert!(
        matches!(
            error,
            Error::InvalidKey {
                what: "actor type",
                ..
            }
        ) && pauses.is_empty(),
        "pause(\"Desk\\0evil\", \"d1\") failed with {error:?}; audit rows of pauses: {pauses:?}"
    );
}

/// Promise: filters with NUL bytes get a clear error, not a database one (PostgreSQL).
#[tokio::test]
async fn a_nul_byte_in_a_listing_filter_is_a_typed_error_on_postgres() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db.builder(2).start().await.unwrap();
    let admin = runtime.admin().context(ana());
    let listed = admin
        .actors(&solid_objects::admin::ActorFilter::new().id_prefix("d\0"))
        .await;
    let inspected = admin.inspect("Desk\0", "d1").await;
    assert!(
        !matches!(listed, Err(Error::Database(_))) && !matches!(inspected, Err(Error::Database(_))),
        "actors(id_prefix \"d\\0\") = {listed:?}; inspect(\"Desk\\0\", \"d1\") = {inspected:?}"
    );
}

/// Promise: redrive is idempotent with two operators at once, racing single retries and a
/// prune (expected to hold): each dead letter is retried exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_redrives_retries_and_prunes_retry_each_dead_letter_once_on_postgres() {
    let Some(db) = Postgres::start().await else {
        return;
    };
    let runtime = db.builder(8).start().await.unwrap();
    let desk = runtime.reference::<Desk>("crowd");
    desk.set_broken(true).await.unwrap();
    for i in 0..60 {
        assert!(desk.fragile(format!("no {i}")).await.is_err());
    }
    let admin = runtime.admin().context(ana());
    let ids: Vec<i64> = admin
        .dead_letters(&DeadLetterFilter::new().limit(1000))
        .await
        .unwrap()
        .iter()
        .map(|letter| letter.message_id)
        .collect();
    assert_eq!(ids.len(), 60);
    let ids = Arc::new(ids);
    let outputs = support::together(4, |task| {
        let admin = admin.clone();
        let ids = Arc::clone(&ids);
        async move {
            match task {
                0 | 1 => admin
                    .redrive(&DeadLetterFilter::new())
                    .await
                    .map(|r| r.retried)
                    .unwrap(),
                2 => {
                    for &id in ids.iter().rev() {
                        admin.retry_dead_letter(id).await.unwrap();
                    }
                    0
                }
                _ => {
                    for _ in 0..5 {
                        admin.prune().await.unwrap();
                    }
                    0
                }
            }
        }
    })
    .await;
    let total = db
        .scalar("SELECT COUNT(*) FROM solid_messages WHERE operation = 'fragile'")
        .await;
    let linked = db
        .scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'dead' AND retried_as > 0")
        .await;
    assert_eq!((total, linked), (120, 60), "redrives retried {outputs:?}");
    assert!(outputs[0] + outputs[1] <= 60);
}
