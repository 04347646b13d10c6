//! Several hosts for one PostgreSQL database: the runtime starts on the host of its URL's
//! list that accepts writes, moves to the next one when that host goes away, and a call made
//! while no host accepts writes fails with `Error::DatabaseUnavailable` within its deadline.
//!
//! Each case starts servers of its own (it stops them): two independent servers stand for a
//! primary and the standby that replaces it, the second one migrated beforehand. The
//! failover with real replication (a synchronous standby promoted) is the process test
//! tests/processes/failover.rs.

use std::time::Duration;

use solid_objects::prelude::*;
use sqlx::Connection;

use crate::support::counter::Counter;
use crate::support::eventually;
use crate::support::postgres::{free_port, PgServer};
use crate::support::workers::{run_workers, within};

/// A database of one name on each of `servers` (a database of the first's name is created
/// on the others), migrated on each; the URL of each, in order.
async fn one_database_on_each(servers: &[&PgServer]) -> Vec<String> {
    let first = servers[0].database().await;
    let name = first
        .rsplit('/')
        .next()
        .expect("a database name")
        .to_owned();
    let mut urls = vec![first];
    for server in &servers[1..] {
        urls.push(server.database_named(&name).await);
    }
    for url in &urls {
        let runtime = runtime_on(url, Duration::from_secs(10)).await;
        runtime.close().await;
    }
    urls
}

/// `host:port` of a URL `postgres://user@host:port/db`.
fn host_of(url: &str) -> &str {
    let (_, rest) = url.split_once('@').expect("a URL with a user");
    rest.split('/').next().expect("a host")
}

/// The libpq multi-host URL of `urls`' hosts (each `postgres://solid@host:port/db`, one
/// database name), in their order.
fn multi_host(urls: &[String]) -> String {
    let hosts: Vec<&str> = urls.iter().map(|url| host_of(url)).collect();
    let database = urls[0].rsplit('/').next().expect("a database name");
    format!(
        "postgres://solid@{}/{database}?target_session_attrs=read-write",
        hosts.join(",")
    )
}

/// A primary and the server that replaces it, one database of one name on each, and a
/// runtime on the URL that lists both hosts, the primary's first.
struct TwoHosts {
    primary: PgServer,
    /// Keeps the replacement running while the test runs.
    _replacement: PgServer,
    /// The database's URL on the primary, then on the replacement.
    urls: Vec<String>,
    runtime: Runtime,
}

impl TwoHosts {
    /// `None` (the test skips) on a machine without PostgreSQL, outside CI.
    async fn start() -> Option<Self> {
        let (Some(primary), Some(replacement)) = (PgServer::start(), PgServer::start()) else {
            return None;
        };
        let urls = one_database_on_each(&[&primary, &replacement]).await;
        let runtime = runtime_on(&multi_host(&urls), Duration::from_secs(20)).await;
        Some(Self {
            primary,
            _replacement: replacement,
            urls,
            runtime,
        })
    }
}

/// A runtime on `url` (one host or several) of Counters, waiting `timeout` for a call.
async fn runtime_on(url: &str, timeout: Duration) -> Runtime {
    Runtime::builder()
        .postgres(url, 4)
        .connect_timeout(Duration::from_secs(5))
        .sync_timeout(timeout)
        .actor::<Counter>()
        .policy(AllowAll)
        .start()
        .await
        .expect("the runtime starts")
}

/// What `actor`'s counter holds on the server of `url`, read directly.
async fn stored_count(url: &str, actor: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url)
        .await
        .expect("the server answers");
    let count = sqlx::query_scalar(
        "SELECT count(*) FROM solid_messages WHERE actor_id = $1 AND status = 'completed'",
    )
    .bind(actor)
    .fetch_one(&pool)
    .await
    .expect("the messages read");
    pool.close().await;
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_given_several_hosts_works_on_the_first_that_answers_and_accepts_writes() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let nobody = format!("127.0.0.1:{}", free_port());
    let database = url.rsplit('/').next().expect("a database name");
    let listed = format!(
        "postgres://solid@{nobody},{}/{database}?target_session_attrs=read-write",
        host_of(&url)
    );
    let runtime = within(30, "start-up", runtime_on(&listed, Duration::from_secs(10))).await;
    let counter = runtime.reference::<Counter>("listed");
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 1);
    runtime.close().await;
    assert_eq!(
        stored_count(&url, "listed").await,
        1,
        "the call ran on the live host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_its_host_goes_away_the_runtime_moves_to_the_next_that_accepts_writes() {
    let Some(hosts) = TwoHosts::start().await else {
        return;
    };
    let (urls, runtime) = (&hosts.urls, &hosts.runtime);
    let counter = runtime.reference::<Counter>("moving");
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 1);
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 2);

    drop(hosts.primary);
    // The replacement holds none of the first host's rows (no replication here): the call
    // answering 1 is the proof that it ran there.
    let moved = within(60, "a call after the host went away", counter.bump()).await;
    assert!(
        matches!(moved, Ok(1)),
        "the call after the primary went away ran on the next host: {moved:?}"
    );
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 2);
    runtime.close().await;
    assert_eq!(stored_count(&urls[1], "moving").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_while_no_host_accepts_writes_fails_as_unavailable_within_its_deadline() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let runtime = runtime_on(&url, Duration::from_millis(500)).await;
    let counter = runtime.reference::<Counter>("stranded");
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 1);

    drop(server);
    for attempt in 0..3 {
        let refused = within(30, "a call with no server", counter.bump()).await;
        match refused {
            Err(Error::DatabaseUnavailable {
                ref hosts,
                ref request_id,
                ..
            }) => {
                assert_eq!(hosts, host_of(&url), "attempt {attempt}");
                assert!(
                    request_id.is_none(),
                    "attempt {attempt}: nothing was written, so no message is named: {refused:?}"
                );
            }
            other => panic!("attempt {attempt}: a call with no server got {other:?}"),
        }
    }
    within(30, "closing", runtime.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_pause_while_their_host_is_gone_and_resume_on_the_next_by_themselves() {
    let Some(hosts) = TwoHosts::start().await else {
        return;
    };
    let (urls, runtime) = (&hosts.urls, &hosts.runtime);
    let running = run_workers(runtime);
    let counter = runtime.reference::<Counter>("worked");
    within(30, "an enqueue", counter.enqueue().bump())
        .await
        .unwrap();
    let ran_here = eventually(Duration::from_secs(30), || async {
        stored_count(&urls[0], "worked").await == 1
    })
    .await;
    assert!(ran_here, "a worker ran the first message on the primary");

    drop(hosts.primary);
    // Queued on the replacement once the runtime moved there: only a worker that resumed by
    // itself runs it.
    within(
        60,
        "an enqueue after the host went away",
        counter.enqueue().bump(),
    )
    .await
    .unwrap();
    let resumed = eventually(Duration::from_secs(30), || async {
        stored_count(&urls[1], "worked").await == 1
    })
    .await;
    assert!(resumed, "a worker ran the message queued on the next host");
    runtime.shutdown();
    within(30, "the workers' end", running)
        .await
        .unwrap()
        .unwrap();
    runtime.close().await;
}

/// Turns the server of `url` read-only for every session, as a primary demoted to a standby
/// answers writes (`25006`), without closing any connection.
async fn turn_read_only(url: &str) {
    let admin = sqlx::PgPool::connect(url)
        .await
        .expect("the server answers");
    sqlx::query("ALTER SYSTEM SET default_transaction_read_only = on")
        .execute(&admin)
        .await
        .expect("ALTER SYSTEM");
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await
        .expect("pg_reload_conf");
    admin.close().await;
    // The reload is signalled, not awaited: once a new session is read-only, the postmaster
    // has reloaded and signalled every session, which reloads before its next statement.
    let reloaded = eventually(Duration::from_secs(30), || async {
        let Ok(mut fresh) = sqlx::PgConnection::connect(url).await else {
            return false;
        };
        let read_only: Option<String> = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&mut fresh)
            .await
            .ok();
        read_only.as_deref() == Some("on")
    })
    .await;
    assert!(reloaded, "the server turned read-only");
}

/// A host that stays up but turns read-only (a primary demoted in place, as a standby
/// answers writes) is left like a host that went away: the call meeting `25006` runs on the
/// next host that accepts writes, and so do the workers' turns, without the connections to
/// the read-only host being used again. About 2 s; 60 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_its_host_turns_read_only_the_runtime_moves_to_the_next_that_accepts_writes() {
    let Some(hosts) = TwoHosts::start().await else {
        return;
    };
    let (urls, runtime) = (&hosts.urls, &hosts.runtime);
    let counter = runtime.reference::<Counter>("demoted");
    assert_eq!(within(30, "a call", counter.bump()).await.unwrap(), 1);

    turn_read_only(&urls[0]).await;
    let moved = within(60, "a call after the host turned read-only", counter.bump()).await;
    let enqueued = within(30, "an enqueue", counter.enqueue().bump()).await;
    let drained = within(30, "a drain", runtime.testing().drain()).await;
    within(30, "closing", runtime.close()).await;
    let on_replacement = stored_count(&urls[1], "demoted").await;
    assert!(
        matches!(moved, Ok(1)) && enqueued.is_ok() && drained.is_ok() && on_replacement == 2,
        "after the primary turned read-only: the call heard {moved:?}, the enqueue {enqueued:?}, \
         the drain {drained:?}; the replacement holds {on_replacement} completed messages (want \
         Ok(1), Ok, Ok, 2)"
    );
}

/// A URL whose password holds the characters a host list splits on (`@`, `,`, percent-
/// encoded `/` and `?`) names its hosts, never the password, when no host answers: in the
/// error start-up returns, in its `Debug` form too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_never_appears_in_the_error_when_no_listed_host_answers() {
    let secret = "s3cr%2Ft%3Fx,y@z";
    let (a, b) = (free_port(), free_port());
    let url = format!(
        "postgres://solid:{secret}@127.0.0.1:{a},[::1]:{b}/db?target_session_attrs=read-write"
    );
    let started = Runtime::builder()
        .postgres(&url, 2)
        .connect_timeout(Duration::from_millis(300))
        .policy(AllowAll)
        .start()
        .await;
    let Err(error) = started else {
        panic!("a runtime started with no host answering");
    };
    let shown = format!("{error} / {error:?}");
    for part in ["s3cr", "x,y", "y@z"] {
        assert!(
            !shown.contains(part),
            "the error names the password ({part}): {shown}"
        );
    }
    assert!(
        shown.contains(&format!("127.0.0.1:{a}")),
        "the error names the hosts: {shown}"
    );
}

/// libpq's other multi-host form lists the hosts and ports as query parameters
/// (`postgres:///db?host=h1,h2&port=p1,p2`): the runtime works on the listed host that
/// answers and accepts writes, as with the hosts in the URL's authority. Under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_listed_as_query_parameters_are_tried_in_order() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let database = url.rsplit('/').next().expect("a database name");
    let (host, port) = host_of(&url).split_once(':').expect("host:port");
    let listed = format!(
        "postgres:///{database}?host={host},{host}&port={},{port}&user=solid\
         &target_session_attrs=read-write",
        free_port()
    );
    let started = within(
        30,
        "start-up",
        Runtime::builder()
            .postgres(&listed, 2)
            .connect_timeout(Duration::from_secs(5))
            .actor::<Counter>()
            .policy(AllowAll)
            .start(),
    )
    .await;
    let called = match &started {
        Ok(runtime) => Some(within(30, "a call", runtime.reference::<Counter>("q").bump()).await),
        Err(_) => None,
    };
    if let Ok(runtime) = started.as_ref() {
        runtime.close().await;
    }
    assert!(
        matches!(called, Some(Ok(1))),
        "a URL listing its hosts as query parameters: start-up {:?}, a call {called:?}",
        started.as_ref().err()
    );
}
