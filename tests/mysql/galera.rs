//! The MySQL store on a three-node MariaDB Galera cluster (tests/support/galera.rs, one for
//! this test process, a database of its own per test), with runtimes on different nodes at
//! once. Galera certifies a transaction's writes at `COMMIT` against what other nodes
//! committed meanwhile and aborts the loser (error 1213, SQLSTATE 40001); it does not
//! replicate `GET_LOCK` or `LOCK TABLES`. These pin what the runtime does there: runtimes
//! that start at once on an empty database migrate it once; calls on one actor through two
//! nodes all commit, each once, with no failed attempt counted, and a hot actor's turns that
//! lose certification for whole passes count conflicts and stalls, never attempts; a due
//! reminder fires once
//! and an effect runs once whichever nodes' workers look; an operator's pause, resume and
//! retry of a dead effect through one node is answered as on one server whatever other
//! nodes commit meanwhile; and a read on another node sees
//! the latest commit when that node waits for causality (`wsrep_sync_wait`). A node tells
//! of an abort only the client's next command: with a turn's `COMMIT` behind other
//! statements in one string, the calls' and the effects' cases see a turn that committed
//! nothing answered as committed.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use solid_objects::admin::{DeadLetterFilter, EffectFilter};
use solid_objects::prelude::*;
use solid_objects::EffectContext;

use sqlx::Connection;

use crate::support::actors::{Noted, Tally, TallyRef};
use crate::support::galera::{Galera, NODES};
use crate::support::runtimes::{close_all, start_at_once, state_of};

/// How long one call may take, certification conflicts and their reruns included.
const CALL_WITHIN: Duration = Duration::from_secs(30);

/// A test's fresh database on the process's cluster, the clock of its runtimes, and its
/// share of the cluster for as long as it holds one.
struct Case {
    cluster: &'static Galera,
    database: String,
    clock: ManualClock,
    shared: Option<ClusterShared>,
}

impl Case {
    /// A fresh database on the process's cluster; `None`, and the test skips, on a machine
    /// without MariaDB or Galera outside CI.
    async fn start() -> Option<Self> {
        let cluster = Galera::shared()?;
        let shared = PAUSING.clone().read_owned().await;
        Some(Self {
            cluster,
            database: cluster.database().await,
            clock: ManualClock::starting_now(),
            shared: Some(shared),
        })
    }

    /// Gives up the test's share of the cluster and waits until it has the cluster to itself,
    /// for as long as it holds the guard.
    async fn alone(&mut self) -> tokio::sync::RwLockWriteGuard<'static, ()> {
        self.shared.take();
        PAUSING.write().await
    }

    /// The URL of the database on node `node`.
    fn url(&self, node: usize) -> String {
        self.cluster.url(node, &self.database)
    }

    /// A builder on node `node` with the test's clock, allowing every call, waiting
    /// [`CALL_WITHIN`] for a call.
    fn builder(&self, node: usize) -> solid_objects::Builder {
        Runtime::builder()
            .mysql(self.url(node), 8)
            .clock(self.clock.clone())
            .policy(AllowAll)
            .sync_timeout(CALL_WITHIN)
    }

    /// The runtime `builder` (one of [`Case::builder`]) starts on node `node`.
    async fn start_on(node: usize, builder: solid_objects::Builder) -> Runtime {
        builder
            .start()
            .await
            .unwrap_or_else(|error| panic!("the runtime starts on node {node}: {error}"))
    }

    /// A runtime on node `node`.
    async fn runtime(&self, node: usize) -> Runtime {
        Self::start_on(node, self.builder(node)).await
    }

    /// A runtime on each node, in the nodes' order, each from the node's builder as
    /// `configure` finishes it.
    async fn runtimes_with(
        &self,
        configure: impl Fn(solid_objects::Builder) -> solid_objects::Builder,
    ) -> Vec<Runtime> {
        let mut runtimes = Vec::new();
        for node in 0..NODES {
            runtimes.push(Self::start_on(node, configure(self.builder(node))).await);
        }
        runtimes
    }

    /// A runtime on each node, in the nodes' order.
    async fn runtimes(&self) -> Vec<Runtime> {
        self.runtimes_with(|builder| builder).await
    }

    /// One number, read through node `node` after it caught up with the cluster.
    async fn scalar(&self, node: usize, sql: &str) -> i64 {
        scalar(self.cluster, node, &self.database, sql).await
    }
}

/// A test's share of the cluster: while any test holds one, no test pauses a node.
type ClusterShared = tokio::sync::OwnedRwLockReadGuard<()>;

/// Taken for writing by a test that pauses a node's applier (which stalls every commit
/// through that node), so that it runs alone on the cluster.
static PAUSING: std::sync::LazyLock<std::sync::Arc<tokio::sync::RwLock<()>>> =
    std::sync::LazyLock::new(std::sync::Arc::default);

/// Messages that did not complete at their first attempt, or whose attempt failed.
const NOT_FIRST_TIME: &str = "SELECT COUNT(*) FROM solid_messages
     WHERE status <> 'completed' OR attempts <> 1 OR last_error IS NOT NULL";

/// `calls` calls of `tally.add()` at once, and beside them `other`, begun after the calls
/// had a scheduler turn; the calls' answers, in order, and what `other` came to.
async fn calls_beside<T>(
    tally: &TallyRef,
    calls: usize,
    other: impl std::future::Future<Output = T>,
) -> (Vec<Result<i64, Error>>, T) {
    let calls = (0..calls).map(|_| {
        let tally = tally.clone();
        async move { tally.add().await }
    });
    let other = async {
        tokio::task::yield_now().await;
        other.await
    };
    tokio::join!(futures_util::future::join_all(calls), other)
}

/// Panics, naming `round`, on an answer in `answers` that is neither a count nor an error
/// that `expected` accepts.
fn each_answered_or(
    round: usize,
    answers: Vec<Result<i64, Error>>,
    expected: impl Fn(&Error) -> bool,
) {
    for answer in answers {
        match answer {
            Ok(_) => {}
            Err(error) if expected(&error) => {}
            Err(error) => panic!("round {round}: a call: {error}"),
        }
    }
}

/// One number, read through node `node` after it caught up with the cluster.
async fn scalar(cluster: &Galera, node: usize, database: &str, sql: &str) -> i64 {
    let pool = sqlx::MySqlPool::connect(&cluster.url(node, database))
        .await
        .unwrap();
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&pool)
        .await
        .unwrap();
    let value = sqlx::query_scalar(sql)
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    pool.close().await;
    value
}

/// Runtimes on all three nodes start at once on an empty database, several times: each
/// start succeeds, the schema's one migration is recorded once, and every runtime then
/// works. `GET_LOCK` is node-local on Galera, so the migration lock is a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_starting_at_once_on_different_nodes_apply_each_migration_once() {
    for _ in 0..3 {
        let Some(case) = Case::start().await else {
            return;
        };
        let urls: Vec<String> = (0..NODES).map(|node| case.url(node)).collect();
        let started = start_at_once(&urls, 2, &case.clock, CALL_WITHIN).await;
        for (node, runtime) in started.into_iter().enumerate() {
            let runtime = runtime
                .unwrap_or_else(|_| panic!("node {node}'s runtime started in time"))
                .unwrap_or_else(|error| panic!("node {node}'s runtime started: {error}"));
            let tally = runtime.reference::<Tally>(format!("n{node}"));
            assert_eq!(tally.add().await.unwrap(), 1);
            runtime.close().await;
        }
        // Each of this build's migrations (1, 11, 13, 14, 15, 16: the files in migrations/mysql)
        // once.
        let count = "SELECT COUNT(*) FROM solid_schema_migrations";
        let migrations = crate::support::Backend::MariaDb.migrations().len();
        assert_eq!(
            case.scalar(0, count).await,
            i64::try_from(migrations).unwrap()
        );
    }
}

/// Forty calls on one actor at once, half through each of two nodes: each commits once
/// (the counts they return are 1 to 40, the state ends at 40), and every message completed
/// at its first attempt: a certification failure reruns the turn and is never counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_actor_through_two_nodes_each_commit_once_and_count_no_failure() {
    const CALLS_PER_NODE: usize = 20;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = [case.runtime(0).await, case.runtime(1).await];
    let calls = runtimes.iter().flat_map(|runtime| {
        let tally = runtime.reference::<Tally>("hot");
        (0..CALLS_PER_NODE).map(move |_| {
            let tally = tally.clone();
            async move { tally.add().await }
        })
    });
    let answers = futures_util::future::join_all(calls).await;
    let counts: BTreeSet<i64> = answers
        .into_iter()
        .map(|answer| answer.expect("every call commits"))
        .collect();
    let total = i64::try_from(2 * CALLS_PER_NODE).unwrap();
    assert_eq!(counts, (1..=total).collect::<BTreeSet<_>>());
    assert_eq!(case.scalar(0, NOT_FIRST_TIME).await, 0);
    let messages = "SELECT COUNT(*) FROM solid_messages";
    assert_eq!(case.scalar(1, messages).await, total);
    close_all(runtimes).await;
}

/// A hot actor's turns through node 0 lose certification to another node's writes to their
/// message rows, pass after pass, until a whole pass gave up on one: every message then
/// completes at its first attempt, the passes that gave up counted stalls and never an
/// attempt, and `Stats::conflicts` counts each lost certification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_actors_turns_that_lose_certification_for_whole_passes_complete_with_no_failed_attempt(
) {
    const PASSES: usize = 400;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtime = case.runtime(0).await;
    let hot = runtime.reference::<Tally>("hot");
    let before = runtime.stats();
    let ready = "SELECT COUNT(*) FROM solid_messages WHERE status = 'ready'";
    let stalled = "SELECT COUNT(*) FROM solid_messages WHERE stalls > 0";
    // Node 1 writes the ready messages' rows as fast as it can, so a turn on node 0 that
    // took the head finds at COMMIT that another node certified a write to it first.
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = tokio::spawn({
        let (writing, url) = (writing.clone(), case.url(1));
        async move {
            let mut node_1 = sqlx::MySqlConnection::connect(&url).await.unwrap();
            let mut writes = 0_u64;
            while writing.load(Ordering::SeqCst) {
                let written = sqlx::query(
                    "UPDATE solid_messages
                     SET last_error = IF(last_error IS NULL, 'written on node 1', NULL)
                     WHERE status = 'ready'",
                )
                .execute(&mut node_1)
                .await;
                // Node 0's turn certified first this time: node 1's write lost instead.
                match written {
                    Ok(_) => writes += 1,
                    Err(sqlx::Error::Database(_)) => {}
                    Err(error) => panic!("node 1 writes: {error}"),
                }
            }
            writes
        }
    });
    let mut enqueued = 0;
    let mut passes = 0;
    while case.scalar(0, stalled).await == 0 {
        passes += 1;
        assert!(
            passes <= PASSES,
            "no pass gave up on a message in {PASSES} passes ({} conflicts)",
            runtime.stats().conflicts - before.conflicts
        );
        if case.scalar(0, ready).await == 0 {
            hot.enqueue()
                .add()
                .await
                .expect("the enqueue is acknowledged");
            enqueued += 1;
        }
        runtime.testing().drain().await.expect("a pass");
    }
    writing.store(false, Ordering::SeqCst);
    let writes = writer.await.unwrap();
    while case.scalar(0, ready).await > 0 {
        runtime.testing().drain().await.expect("a pass");
    }

    let conflicts = runtime.stats().conflicts - before.conflicts;
    println!("{passes} passes, {writes} writes on node 1, {conflicts} conflicts");
    assert_eq!(hot.snapshot().await.unwrap().count, enqueued);
    let not_first_time = "SELECT COUNT(*) FROM solid_messages
         WHERE status <> 'completed' OR attempts <> 1";
    assert_eq!(
        case.scalar(0, not_first_time).await,
        0,
        "no failed attempt counted"
    );
    // A pass gives up on a message after 8 conflicts in a row.
    assert!(conflicts >= 8, "{conflicts} conflicts counted");
    runtime.close().await;
}

/// Reminders on thirty actors come due, and runtimes on all three nodes fire and run them
/// at once: each fires once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_reminder_fires_once_when_every_node_looks() {
    const ACTORS: usize = 30;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case.runtimes().await;
    for actor in 0..ACTORS {
        let runtime = &runtimes[actor % NODES];
        let tally = runtime.reference::<Tally>(format!("r{actor}"));
        tally.remind(format!("due-{actor}")).await.unwrap();
    }
    case.clock.advance(Duration::from_secs(120));
    let firing = runtimes.iter().map(|runtime| async move {
        let testing = runtime.testing();
        for _ in 0..3 {
            testing.run_due_reminders().await.expect("firing reminders");
        }
    });
    futures_util::future::join_all(firing).await;
    for runtime in &runtimes {
        runtime.testing().drain().await.expect("draining");
    }
    for actor in 0..ACTORS {
        let state = state_of::<Tally>(&runtimes[0], &format!("r{actor}")).await;
        assert_eq!(state.fired, [format!("due-{actor}")], "actor r{actor}");
    }
    let fired = "SELECT COUNT(*) FROM solid_messages WHERE operation = 'fire'";
    assert_eq!(case.scalar(2, fired).await, i64::try_from(ACTORS).unwrap());
    let left = "SELECT COUNT(*) FROM solid_reminders";
    assert_eq!(case.scalar(1, left).await, 0);
    close_all(runtimes).await;
}

/// Thirty effects, and runtimes on all three nodes run due effects at once: each effect's
/// lease is taken by one node, and each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_is_run_once_when_every_node_claims() {
    const EFFECTS: usize = 30;
    let Some(case) = Case::start().await else {
        return;
    };
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..EFFECTS).map(|_| AtomicU32::new(0)).collect());
    let runtimes = case
        .runtimes_with(|builder| {
            let runs = Arc::clone(&runs);
            builder.effect(move |noted: Noted, _: EffectContext| {
                let runs = Arc::clone(&runs);
                async move {
                    let index: usize = noted.name.parse().expect("an effect's number");
                    runs[index].fetch_add(1, Ordering::SeqCst);
                    Ok::<(), Failure>(())
                }
            })
        })
        .await;
    for effect in 0..EFFECTS {
        let tally = runtimes[effect % NODES].reference::<Tally>(format!("e{effect}"));
        tally.note(effect.to_string()).await.unwrap();
    }
    let claiming = runtimes.iter().map(|runtime| async move {
        let testing = runtime.testing();
        let mut ran = 0;
        for _ in 0..3 {
            ran += testing.run_effects().await.expect("running effects");
        }
        ran
    });
    let ran: usize = futures_util::future::join_all(claiming).await.iter().sum();
    let counts: Vec<u32> = runs
        .iter()
        .map(|runs| runs.load(Ordering::SeqCst))
        .collect();
    assert_eq!(counts, vec![1; EFFECTS], "runs per effect");
    assert_eq!(ran, EFFECTS);
    let done = "SELECT COUNT(*) FROM solid_effects WHERE status = 'done' AND attempts = 1";
    assert_eq!(case.scalar(2, done).await, i64::try_from(EFFECTS).unwrap());
    close_all(runtimes).await;
}

/// A snapshot through another node right after a call returned sees the call when that node
/// waits for causality (`wsrep_sync_wait = 1`, set here on the reading node for new
/// sessions): two hundred rounds, none stale. The same rounds through a node that does not
/// wait are counted and printed, not asserted: such a read may lag the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_another_node_sees_the_latest_commit_when_that_node_waits_for_causality() {
    const ROUNDS: i64 = 200;
    let Some(case) = Case::start().await else {
        return;
    };
    let admin = sqlx::MySqlPool::connect(&case.cluster.url(2, ""))
        .await
        .unwrap();
    sqlx::query("SET GLOBAL wsrep_sync_wait = 1")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let writer = case.runtime(0).await;
    let waiting = case.runtime(2).await;
    let not_waiting = case.runtime(1).await;
    let tally = writer.reference::<Tally>("read");
    let mut stale_without_waiting = 0;
    for round in 1..=ROUNDS {
        assert_eq!(tally.add().await.unwrap(), round);
        let seen = state_of::<Tally>(&waiting, "read").await.count;
        assert_eq!(seen, round, "a read through the waiting node");
        let seen = state_of::<Tally>(&not_waiting, "read").await.count;
        if seen != round {
            stale_without_waiting += 1;
        }
    }
    writeln!(
        std::io::stderr().lock(),
        "galera reads right after a call on another node: {ROUNDS} rounds, 0 stale with \
         wsrep_sync_wait = 1, {stale_without_waiting} stale with wsrep_sync_wait = 0"
    )
    .unwrap();
    for runtime in [writer, waiting, not_waiting] {
        runtime.close().await;
    }
}

/// Keeps every number it is given, in the order its turns ran.
#[actor]
#[derive(Default)]
struct Ledger {
    entries: Vec<u32>,
}

#[actor]
impl Ledger {
    /// Appends `entry`.
    #[command]
    fn append(&mut self, entry: u32) {
        self.entries.push(entry);
    }
}

/// Fails every time, and is dead after its first attempt.
#[actor(max_attempts = 1)]
#[derive(Default)]
struct Broken {
    runs: u32,
}

#[actor]
impl Broken {
    #[command]
    fn run(&mut self) -> Result<u32, Failure> {
        Err(Failure::retryable("always broken"))
    }
}

/// One caller enqueues on one actor, each enqueue acknowledged before the next, turn about
/// through node 0 and node 1 (as an application behind a proxy that spreads its connections
/// over the nodes does): the turns run in the order the enqueues were acknowledged. The
/// mailbox is ordered by message id, and each node hands out AUTO_INCREMENT ids of its own
/// offset from a counter that moves past another node's ids only once it applied them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_enqueues_through_two_nodes_in_turn_run_in_the_order_they_were_acknowledged() {
    const ENQUEUES: u32 = 60;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = [case.runtime(0).await, case.runtime(1).await];
    // Other actors' enqueues through node 0 keep node 1's applier busy meanwhile.
    let busy = std::sync::atomic::AtomicBool::new(true);
    let load = (0..8).map(|lane| {
        let (busy, runtime) = (&busy, &runtimes[0]);
        async move {
            let other = runtime.reference::<Ledger>(format!("other-{lane}"));
            let mut entry = 0;
            while busy.load(Ordering::SeqCst) {
                other
                    .enqueue()
                    .append(entry)
                    .await
                    .expect("another actor's enqueue");
                entry += 1;
            }
        }
    });
    let load = futures_util::future::join_all(load);
    let mut ids = Vec::new();
    let caller = async {
        for entry in 0..ENQUEUES {
            let runtime = &runtimes[usize::try_from(entry).unwrap() % 2];
            let queued = runtime
                .reference::<Ledger>("ordered")
                .enqueue()
                .append(entry)
                .await
                .expect("the enqueue is acknowledged");
            ids.push(queued.id());
        }
        busy.store(false, Ordering::SeqCst);
    };
    tokio::join!(load, caller);
    runtimes[0].testing().drain().await.expect("draining");
    let state = state_of::<Ledger>(&runtimes[0], "ordered").await;
    assert_eq!(
        state.entries,
        (0..ENQUEUES).collect::<Vec<_>>(),
        "turns in acknowledgement order (message ids in that order: {ids:?})"
    );
    close_all(runtimes).await;
}

/// Ten idempotency keys, each used for the same enqueue through all three nodes at once:
/// each key stores one message, and the three answers for a key name that message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_used_through_every_node_at_once_stores_one_message() {
    const KEYS: u32 = 10;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case.runtimes().await;
    for key in 0..KEYS {
        let enqueues = runtimes.iter().map(|runtime| async move {
            runtime
                .reference::<Ledger>("keyed")
                .enqueue()
                .idempotency_key(format!("key-{key}"))
                .append(key)
                .await
                .map(|queued| queued.id())
        });
        let answers = futures_util::future::join_all(enqueues).await;
        let ids: BTreeSet<i64> = answers
            .into_iter()
            .enumerate()
            .map(|(node, answer)| {
                answer.unwrap_or_else(|error| panic!("key-{key} through node {node}: {error}"))
            })
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "key-{key}: one message named by every answer: {ids:?}"
        );
    }
    let stored = "SELECT COUNT(*) FROM solid_messages";
    assert_eq!(case.scalar(2, stored).await, i64::from(KEYS));
    close_all(runtimes).await;
}

/// Calls on one actor through node 1 while the actor is destroyed through node 0, five
/// times: each destroy succeeds (a turn elsewhere finishes first, as on one server), and
/// each call is answered with its count or as destroyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_an_actor_through_one_node_while_calls_run_through_another_succeeds() {
    const ROUNDS: usize = 5;
    const CALLS: usize = 10;
    let Some(case) = Case::start().await else {
        return;
    };
    let destroyer = case.runtime(0).await;
    let caller = case.runtime(1).await;
    for round in 0..ROUNDS {
        let tally = caller.reference::<Tally>("doomed");
        tally.add().await.expect("a call before the destroy");
        let doomed = destroyer.reference::<Tally>("doomed");
        let (answers, destroyed) = calls_beside(&tally, CALLS, doomed.destroy()).await;
        destroyed.unwrap_or_else(|error| panic!("round {round}: the destroy: {error}"));
        each_answered_or(round, answers, |error| {
            matches!(error, Error::Destroyed { .. })
        });
    }
    destroyer.close().await;
    caller.close().await;
}

/// An actor paused and resumed through node 0 while calls on it run through node 1, ten
/// times: each pause and each resume is answered as done (a turn elsewhere finishes first,
/// as on one server), never with the certification failure of its transaction, and each
/// call is answered with its count or as paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_and_resuming_an_actor_through_one_node_while_calls_run_through_another_succeeds() {
    const ROUNDS: usize = 10;
    const CALLS: usize = 10;
    let Some(case) = Case::start().await else {
        return;
    };
    let operator = case.runtime(0).await;
    let caller = case.runtime(1).await;
    let tally = caller.reference::<Tally>("hot");
    tally.add().await.expect("a call before the first pause");
    let admin = operator.admin();
    for round in 0..ROUNDS {
        let pause_then_resume = async {
            let paused = admin.pause("Tally", "hot").await;
            let resumed = admin.resume("Tally", "hot").await;
            (paused, resumed)
        };
        let (answers, (paused, resumed)) = calls_beside(&tally, CALLS, pause_then_resume).await;
        let paused = paused.unwrap_or_else(|error| panic!("round {round}: the pause: {error}"));
        let resumed = resumed.unwrap_or_else(|error| panic!("round {round}: the resume: {error}"));
        assert!(paused && resumed, "round {round}: each changed the actor");
        each_answered_or(round, answers, |error| {
            matches!(error, Error::Paused { .. })
        });
    }
    operator.close().await;
    caller.close().await;
}

/// Ten dead letters, each retried through all three nodes at once: each is enqueued again
/// once, and every answer names that one new message (as two operators retrying at once on
/// one server are answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_retried_through_every_node_at_once_is_enqueued_once_and_each_hears_it() {
    const DEAD: usize = 10;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case.runtimes().await;
    for actor in 0..DEAD {
        let broken = runtimes[0].reference::<Broken>(format!("b{actor}"));
        assert!(broken.run().await.is_err(), "b{actor} fails");
    }
    let dead = runtimes[0]
        .admin()
        .dead_letters(&DeadLetterFilter::new())
        .await
        .unwrap();
    assert_eq!(dead.len(), DEAD);
    for letter in dead {
        let retries = runtimes.iter().map(|runtime| async move {
            runtime
                .admin()
                .retry_dead_letter(letter.message_id)
                .await
                .map(|retry| retry.id())
        });
        let answers = futures_util::future::join_all(retries).await;
        let ids: BTreeSet<i64> = answers
            .into_iter()
            .enumerate()
            .map(|(node, answer)| {
                answer.unwrap_or_else(|error| {
                    panic!(
                        "dead letter {} through node {node}: {error}",
                        letter.message_id
                    )
                })
            })
            .collect();
        assert_eq!(ids.len(), 1, "one retry named by every answer: {ids:?}");
    }
    let stored = "SELECT COUNT(*) FROM solid_messages";
    assert_eq!(
        case.scalar(1, stored).await,
        i64::try_from(2 * DEAD).unwrap()
    );
    close_all(runtimes).await;
}

/// Ten dead effects, each retried through all three nodes at once: each is made ready again
/// once, so exactly one answer says it was retried and the others that it was not dead any
/// more (as two operators retrying at once on one server are answered), never a
/// certification failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_effect_retried_through_every_node_at_once_is_revived_once() {
    const DEAD: usize = 10;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case
        .runtimes_with(|builder| {
            builder.effect(|_: Noted, _: EffectContext| async {
                Err::<(), Failure>(Failure::permanent("the printer is gone"))
            })
        })
        .await;
    for effect in 0..DEAD {
        let tally = runtimes[0].reference::<Tally>(format!("p{effect}"));
        tally.note(effect.to_string()).await.unwrap();
    }
    assert_eq!(runtimes[0].testing().run_effects().await.unwrap(), DEAD);
    let dead = runtimes[0]
        .admin()
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead))
        .await
        .unwrap();
    assert_eq!(dead.len(), DEAD);
    for effect in dead {
        let retries = runtimes
            .iter()
            .map(|runtime| async move { runtime.admin().retry_effect(effect.id).await });
        let answers = futures_util::future::join_all(retries).await;
        let revived = answers
            .into_iter()
            .enumerate()
            .filter(|(node, answer)| match answer {
                Ok(revived) => *revived,
                Err(error) => panic!("dead effect {} through node {node}: {error}", effect.id),
            })
            .count();
        assert_eq!(revived, 1, "effect {}: one retry revives it", effect.id);
    }
    let ready = "SELECT COUNT(*) FROM solid_effects WHERE status = 'ready' AND attempts = 0";
    assert_eq!(case.scalar(2, ready).await, i64::try_from(DEAD).unwrap());
    close_all(runtimes).await;
}

/// Sixty messages enqueued on three actors, then every node's runtime drains at once: each
/// message runs once, at its first attempt (a certification failure is never counted), and
/// each actor's turns run in its enqueue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_messages_drained_by_every_node_at_once_run_once_in_order_and_count_no_failure() {
    const ACTORS: u32 = 3;
    const PER_ACTOR: u32 = 20;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case.runtimes().await;
    for entry in 0..PER_ACTOR {
        for actor in 0..ACTORS {
            runtimes[0]
                .reference::<Ledger>(format!("q{actor}"))
                .enqueue()
                .append(entry)
                .await
                .unwrap();
        }
    }
    let draining = runtimes
        .iter()
        .map(|runtime| async move { runtime.testing().drain().await });
    for (node, drained) in futures_util::future::join_all(draining)
        .await
        .into_iter()
        .enumerate()
    {
        drained.unwrap_or_else(|error| panic!("node {node} drains: {error}"));
    }
    for actor in 0..ACTORS {
        let state = state_of::<Ledger>(&runtimes[0], &format!("q{actor}")).await;
        assert_eq!(
            state.entries,
            (0..PER_ACTOR).collect::<Vec<_>>(),
            "actor q{actor}"
        );
    }
    assert_eq!(case.scalar(0, NOT_FIRST_TIME).await, 0);
    close_all(runtimes).await;
}

/// Sixty messages enqueued on one actor while every node's runtime drains it twice at once,
/// and sync calls on it go through every node: each message runs once, at its first
/// attempt (however many times a node's turn loses certification to another's), in its
/// enqueue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_actor_drained_and_called_through_every_node_at_once_counts_no_failure() {
    const QUEUED: u32 = 60;
    const CALLS_PER_NODE: u32 = 5;
    let Some(case) = Case::start().await else {
        return;
    };
    let runtimes = case.runtimes().await;
    for entry in 0..QUEUED {
        runtimes[0]
            .reference::<Ledger>("hot")
            .enqueue()
            .append(entry)
            .await
            .unwrap();
    }
    let draining = runtimes
        .iter()
        .chain(runtimes.iter())
        .map(|runtime| async move { runtime.testing().drain().await.map(|_| ()) });
    let calls = runtimes.iter().enumerate().flat_map(|(node, runtime)| {
        let ledger = runtime.reference::<Ledger>("hot");
        (0..CALLS_PER_NODE).map(move |call| {
            let ledger = ledger.clone();
            let entry = 1000 * (u32::try_from(node).unwrap() + 1) + call;
            async move { ledger.append(entry).await }
        })
    });
    let (drained, called) = tokio::join!(
        futures_util::future::join_all(draining),
        futures_util::future::join_all(calls)
    );
    for (drainer, drained) in drained.into_iter().enumerate() {
        drained.unwrap_or_else(|error| panic!("drainer {drainer}: {error}"));
    }
    for called in called {
        called.expect("every call commits");
    }
    let state = state_of::<Ledger>(&runtimes[0], "hot").await;
    let queued: Vec<u32> = state
        .entries
        .iter()
        .copied()
        .filter(|entry| *entry < 1000)
        .collect();
    assert_eq!(queued, (0..QUEUED).collect::<Vec<_>>());
    assert_eq!(
        state.entries.len(),
        usize::try_from(QUEUED + 3 * CALLS_PER_NODE).unwrap()
    );
    assert_eq!(case.scalar(0, NOT_FIRST_TIME).await, 0);
    close_all(runtimes).await;
}

/// Eight callers call on actors of their own through node 2 until it is killed
/// (`kill -9` of its `mariadbd`) under them: every count a caller was answered is in the
/// cluster (read through node 0), and at most the one call that was in flight when the node
/// died committed beyond it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_answered_through_a_node_killed_under_them_are_all_in_the_cluster() {
    const CALLERS: usize = 8;
    const KILLED: usize = 2;
    let Some(cluster) = Galera::start_aside().await else {
        return;
    };
    let database = cluster.database().await;
    let clock = ManualClock::starting_now();
    let through_killed = Runtime::builder()
        .mysql(cluster.url(KILLED, &database), 8)
        .clock(clock.clone())
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let answered = Arc::new(AtomicU32::new(0));
    let enough_answered = Arc::new(tokio::sync::Notify::new());
    let callers = (0..CALLERS).map(|caller| {
        let tally = through_killed.reference::<Tally>(format!("k{caller}"));
        let answered = Arc::clone(&answered);
        let enough_answered = Arc::clone(&enough_answered);
        async move {
            let mut last_ok = 0;
            loop {
                match tally.add().await {
                    Ok(count) => {
                        assert_eq!(count, last_ok + 1, "caller {caller}'s counts in order");
                        last_ok = count;
                        if answered.fetch_add(1, Ordering::SeqCst) + 1 == 200 {
                            enough_answered.notify_one();
                        }
                    }
                    Err(_) => return last_ok,
                }
            }
        }
    });
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    let killer = {
        let cluster = Arc::clone(&cluster);
        let enough_answered = Arc::clone(&enough_answered);
        async move {
            // Killed once 200 calls were answered (or after a minute, if they never are).
            let _ = tokio::time::timeout(Duration::from_secs(60), enough_answered.notified()).await;
            tokio::task::spawn_blocking(move || cluster.lock().unwrap().kill_node(KILLED))
                .await
                .unwrap();
        }
    };
    let (last_oks, ()) = tokio::join!(futures_util::future::join_all(callers), killer);
    let cluster = Arc::into_inner(cluster)
        .expect("the killer is done with the cluster")
        .into_inner()
        .unwrap();
    for (caller, last_ok) in last_oks.into_iter().enumerate() {
        let sql = format!(
            "SELECT CAST(COALESCE(JSON_VALUE(state, '$.count'), 0) AS SIGNED) FROM solid_instances
             WHERE actor_id = 'k{caller}'"
        );
        let stored = scalar(&cluster, 0, &database, &sql).await;
        assert!(
            stored == last_ok || stored == last_ok + 1,
            "caller {caller}: answered up to {last_ok}, the cluster holds {stored}"
        );
    }
    through_killed.close().await;
}

/// A turn's `BEGIN` on a node that cannot catch up with the cluster in time (its applier
/// paused: here by another session's `FLUSH TABLES WITH READ LOCK`, as a backup tool takes
/// it; the causal wait of `START TRANSACTION` then runs out with 1205) leaves the session as it
/// found it: the application's pool then has its connection with the application's own
/// `wsrep_sync_wait`, `autocommit` and lock wait, not the turn's. Under ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_that_waits_out_its_causal_wait_leaves_the_session_as_it_found_it() {
    let Some(mut case) = Case::start().await else {
        return;
    };
    let _alone = case.alone().await;
    let url = case.url(0);
    let admin = sqlx::MySqlPool::connect(&case.cluster.url(0, ""))
        .await
        .unwrap();
    sqlx::query("SET GLOBAL wsrep_provider_options = 'repl.causal_read_timeout=PT1S'")
        .execute(&admin)
        .await
        .unwrap();
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let session = "SELECT CAST(@@session.wsrep_sync_wait AS SIGNED), \
                   CAST(@@session.autocommit AS SIGNED), \
                   CAST(@@session.innodb_lock_wait_timeout AS SIGNED)";
    let before: (i64, i64, i64) = sqlx::query_as(session).fetch_one(&pool).await.unwrap();
    let runtime = Runtime::builder()
        .mysql_pool(pool.clone())
        .clock(case.clock.clone())
        .policy(AllowAll)
        .sync_timeout(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    let tally = runtime.reference::<Tally>("paused-node");
    tally.add().await.unwrap();

    // Node 0's applier stops; node 1 commits a write node 0 cannot apply meanwhile.
    let mut lock = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("FLUSH TABLES WITH READ LOCK")
        .execute(&mut lock)
        .await
        .unwrap();
    let other = sqlx::MySqlPool::connect(&case.url(1)).await.unwrap();
    sqlx::query("CREATE TABLE moved_on (n INT PRIMARY KEY)")
        .execute(&other)
        .await
        .unwrap();
    let called = tally.add().await;
    sqlx::query("UNLOCK TABLES")
        .execute(&mut lock)
        .await
        .unwrap();
    drop(lock);
    other.close().await;

    let after: (i64, i64, i64) = sqlx::query_as(session).fetch_one(&pool).await.unwrap();
    runtime.close().await;
    pool.close().await;
    sqlx::query("SET GLOBAL wsrep_provider_options = 'repl.causal_read_timeout=PT30S'")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    eprintln!("the call on the paused node heard {called:?}");
    assert_eq!(
        after, before,
        "the application's session (wsrep_sync_wait, autocommit, innodb_lock_wait_timeout) \
         after a turn's BEGIN waited out its causal wait (the call heard {called:?})"
    );
}
