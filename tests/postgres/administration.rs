//! The administration API on PostgreSQL: a pause during a turn returns after that turn
//! committed, a NUL byte (which PostgreSQL stores in no text) in an actor type or a listing
//! filter is a typed error, and concurrent redrives, retries and prunes retry each dead
//! letter once.

use std::sync::Arc;
use std::time::Duration;

use solid_objects::admin::DeadLetterFilter;
use solid_objects::prelude::*;
use solid_objects::Workers;

use crate::support::desk::Desk;
use crate::support::eventually;
use crate::support::gates::gate;
use crate::support::postgres::PgServer;
use crate::support::runtimes::scalar;
use crate::support::workers::run_workers;

/// Holds its turn at a gate named after its id until the test opens it.
#[actor]
#[derive(Default)]
pub(crate) struct Door {
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

/// The context of the operator every administration call here is made by.
pub(crate) fn ana() -> Value {
    json!({ "operator": "ana" })
}

pub(crate) struct Postgres {
    _server: PgServer,
    url: String,
    clock: ManualClock,
}

impl Postgres {
    pub(crate) async fn start() -> Option<Self> {
        let server = PgServer::start()?;
        let url = server.database().await;
        Some(Self {
            _server: server,
            url,
            clock: ManualClock::starting_now(),
        })
    }

    /// A fresh server and a runtime of desks and doors on it with `connections`; `None` (the
    /// test skips) on a machine without PostgreSQL, outside CI.
    pub(crate) async fn with_runtime(connections: u32) -> Option<(Self, Runtime)> {
        let db = Self::start().await?;
        let runtime = db.builder(connections).start().await.unwrap();
        Some((db, runtime))
    }

    pub(crate) fn builder(&self, connections: u32) -> solid_objects::Builder {
        Runtime::builder()
            .postgres(&self.url, connections)
            .clock(self.clock.clone())
            .policy(AllowAll)
            .actor::<Desk>()
            .actor::<Door>()
            .sync_timeout(Duration::from_secs(30))
    }

    pub(crate) async fn scalar(&self, sql: &str) -> i64 {
        scalar(&self.url, sql).await
    }

    /// A runtime whose one worker runs, listens, and polls only every 10 minutes: it finds
    /// work through notices alone.
    pub(crate) async fn idle_listening_workers(
        &self,
    ) -> (Runtime, tokio::task::JoinHandle<Result<(), Error>>) {
        let workers = self
            .builder(4)
            .workers(Workers::new(1).idle_poll(Duration::from_secs(600)))
            .start()
            .await
            .unwrap();
        let running = run_workers(&workers);
        self.assert_one_listens("the workers listen").await;
        (workers, running)
    }

    /// Asserts that one connection comes to listen for work within ten seconds; `message`
    /// says whose otherwise.
    pub(crate) async fn assert_one_listens(&self, message: &str) {
        assert!(
            eventually(Duration::from_secs(10), || async {
                self.listening().await == 1
            })
            .await,
            "{message}"
        );
    }

    pub(crate) async fn listening(&self) -> i64 {
        self.scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %solid_objects_work%'",
        )
        .await
    }
}

/// Promise: "once pause returns, no turn of it runs (a turn in flight finished first)". On
/// PostgreSQL a turn in flight holds the actor's row; the pause must wait for its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_during_a_turn_returns_after_that_turn_committed_on_postgres() {
    let Some((db, runtime)) = Postgres::with_runtime(4).await else {
        return;
    };
    let door = runtime.reference::<Door>("pg-door");
    let holding = tokio::spawn({
        let door = door.clone();
        async move { door.hold().await }
    });
    gate("pg-door").reached(1).await;
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
    let Some((_db, runtime)) = Postgres::with_runtime(2).await else {
        return;
    };
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
    let Some((_db, runtime)) = Postgres::with_runtime(2).await else {
        return;
    };
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
    let Some((db, runtime)) = Postgres::with_runtime(8).await else {
        return;
    };
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
    let outputs = crate::support::together(4, |task| {
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
