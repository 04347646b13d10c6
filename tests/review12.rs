//! Review of issue 12 (watching, SSE, the dashboard): tests that try to break it.

mod support;

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt;
use solid_objects::dashboard::{self, Operator};
use solid_objects::policy::{AdminRequest, Denied, Policy, Request as CallRequest};
use solid_objects::prelude::*;
use solid_objects::Watch;
use sqlx::Connection;
use support::postgres::PgServer;
use support::{eventually, Harness};
use tower::ServiceExt;

const SOON: Duration = Duration::from_secs(10);

#[actor]
#[derive(Default, Debug, PartialEq)]
struct Counter {
    value: u64,
}

#[actor]
impl Counter {
    #[command]
    fn add(&mut self, n: u64) -> u64 {
        self.value += n;
        self.value
    }

    #[command]
    fn close(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }

    #[command]
    fn fail(&mut self) -> Result<u64, Failure> {
        Err(Failure::permanent("<script>alert(1)</script>"))
    }
}

async fn next<T: std::fmt::Debug>(watch: &mut Watch<T>) -> Option<Result<Watched<T>, Error>> {
    tokio::time::timeout(SOON, watch.next())
        .await
        .expect("the watch answers in time")
}

// ---------------------------------------------------------------- watching, SQLite

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_watching_an_invalid_id_is_an_error_item_then_ends() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    for id in ["", "a\0b", &"x".repeat(100_000)] {
        let mut watch = runtime.reference::<Counter>(id).watch();
        let first = next(&mut watch).await;
        assert!(
            matches!(first, Some(Err(_))),
            "id of {} bytes: {first:?}",
            id.len()
        );
        assert!(next(&mut watch).await.is_none());
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_a_watch_begun_before_the_actor_exists_sees_its_first_commit() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("new");
    let mut watch = counter.watch();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::State {
            value: Counter { value: 0 },
            incarnation: 1,
            revision: 0
        }
    );
    counter.add(3).await.unwrap();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::State {
            value: Counter { value: 3 },
            incarnation: 1,
            revision: 1
        }
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_destroy_then_recreate_before_the_watcher_reads_is_destroyed_once_then_the_end() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("phoenix");
    counter.add(1).await.unwrap();
    let mut watch = counter.watch();
    assert!(matches!(
        next(&mut watch).await,
        Some(Ok(Watched::State { revision: 1, .. }))
    ));
    counter.close().await.unwrap();
    counter.add(5).await.unwrap();
    counter.close().await.unwrap();
    counter.add(7).await.unwrap();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::Destroyed { incarnation: 1 }
    );
    assert!(next(&mut watch).await.is_none());
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_the_follower_task_ends_when_the_last_watch_is_dropped() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("c");
    counter.add(1).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for round in 0..20 {
        let mut watch = counter.watch();
        assert!(
            matches!(next(&mut watch).await, Some(Ok(_))),
            "round {round}"
        );
        drop(watch);
    }
    let settled = eventually(SOON, || async { metrics.num_alive_tasks() <= before }).await;
    assert!(
        settled,
        "tasks before {before}, after {}",
        metrics.num_alive_tasks()
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_close_does_not_hang_while_a_server_sent_events_stream_is_open() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let counter = runtime.reference::<Counter>("c");
    counter.add(1).await.unwrap();
    let sse = counter.watch().into_sse().await.unwrap();
    // The stream is being read: its first event (the current state) has arrived.
    let mut body = sse.into_response().into_body().into_data_stream();
    let first = tokio::time::timeout(SOON, body.next())
        .await
        .expect("the first event");
    assert!(first.is_some_and(|chunk| chunk.is_ok()));
    let reading = tokio::spawn(async move {
        let mut read = 0;
        while let Some(chunk) = body.next().await {
            read += chunk.map_err(|error| error.to_string())?.len();
        }
        Ok::<_, String>(read)
    });
    tokio::time::timeout(SOON, runtime.close())
        .await
        .expect("close does not hang");
    let body = tokio::time::timeout(SOON, reading)
        .await
        .expect("the SSE body ends");
    assert!(body.unwrap().is_ok());
}

// ---------------------------------------------------------------- watching, PostgreSQL

async fn pg_runtime(url: &str) -> Runtime {
    Runtime::builder()
        .postgres(url, 8)
        .watch_poll(Duration::from_secs(3600))
        .policy(AllowAll)
        .start()
        .await
        .unwrap()
}

async fn bump(connection: &mut sqlx::PgConnection, id: &str) {
    sqlx::query(
        "UPDATE solid_instances SET state = '{\"value\":99}', revision = revision + 1
         WHERE actor_type = 'Counter' AND actor_id = $1",
    )
    .bind(id)
    .execute(connection)
    .await
    .unwrap();
}

/// The watch documents: "on PostgreSQL so do those [commits] of every process (NOTIFY)". A
/// commit by another process right after the watch's first item must reach it by notice,
/// not at the next poll (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_on_postgres_a_commit_right_after_the_first_item_reaches_the_watch() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let runtime = pg_runtime(&url).await;
    // The follower is already running for another actor.
    let mut keep = runtime.reference::<Counter>("anchor").watch();
    next(&mut keep).await.unwrap().unwrap();
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut missed = Vec::new();
    for round in 0..10 {
        let id = format!("a{round}");
        let counter = runtime.reference::<Counter>(&id);
        counter.add(1).await.unwrap();
        let mut watch = counter.watch();
        assert!(matches!(
            next(&mut watch).await,
            Some(Ok(Watched::State { revision: 1, .. }))
        ));
        bump(&mut other, &id).await;
        match tokio::time::timeout(Duration::from_secs(3), watch.next()).await {
            Ok(Some(Ok(Watched::State { revision: 2, .. }))) => {}
            Ok(other) => panic!("round {round}: {other:?}"),
            Err(_) => missed.push(id),
        }
    }
    assert!(
        missed.is_empty(),
        "commits by another process not seen within 3 s: {missed:?}"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review12_on_postgres_one_runtime_dropping_its_watch_leaves_the_others_notices() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database().await;
    let a = pg_runtime(&url).await;
    let b = pg_runtime(&url).await;
    a.reference::<Counter>("shared").add(1).await.unwrap();
    let mut watch_a = a.reference::<Counter>("shared").watch();
    let mut watch_b = b.reference::<Counter>("shared").watch();
    next(&mut watch_a).await.unwrap().unwrap();
    next(&mut watch_b).await.unwrap().unwrap();
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let count = || async {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM solid_watched")
            .fetch_one(&mut c)
            .await
            .unwrap();
        n
    };
    assert!(eventually(SOON, || async { count().await == 2 }).await);
    drop(watch_b);
    assert!(eventually(SOON, || async { count().await == 1 }).await);
    bump(&mut other, "shared").await;
    assert!(matches!(
        next(&mut watch_a).await,
        Some(Ok(Watched::State { revision: 2, .. }))
    ));
    a.close().await;
    b.close().await;
}

// ---------------------------------------------------------------- the dashboard

struct Operators;

impl Policy for Operators {
    fn authorize_message(&self, _request: &CallRequest<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_query(&self, _request: &CallRequest<'_>) -> Result<(), Denied> {
        Ok(())
    }
    fn authorize_administration(&self, request: &AdminRequest<'_>) -> Result<(), Denied> {
        match request.context.and_then(|context| context.get("operator")) {
            Some(_) => Ok(()),
            None => Err(Denied::new("operators only")),
        }
    }
}

async fn as_ana(mut request: Request, next: Next) -> Response {
    request
        .extensions_mut()
        .insert(Operator(json!({ "operator": "ana" })));
    next.run(request).await
}

fn app(runtime: &Runtime) -> Router {
    Router::new().nest(
        "/ops",
        dashboard::router(runtime.clone()).layer(axum::middleware::from_fn(as_ana)),
    )
}

async fn dash_runtime(dir: &tempfile::TempDir) -> Runtime {
    Runtime::builder()
        .sqlite(dir.path().join("actors.db"))
        .policy(Operators)
        .actor::<Counter>()
        .start()
        .await
        .unwrap()
}

async fn send(app: Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn review12_dashboard_refuses_cross_site_posts_in_every_origin_variant() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dash_runtime(&dir).await;
    runtime.reference::<Counter>("c").add(1).await.unwrap();
    let variants: Vec<Vec<(&str, &str)>> = vec![
        vec![("origin", "null")],
        vec![
            ("origin", "http://127.0.0.1:9999"),
            ("host", "127.0.0.1:8080"),
        ],
        vec![("origin", "https://evil.example")],
        vec![
            ("origin", "http://127.0.0.1:8080.evil.example"),
            ("host", "127.0.0.1:8080"),
        ],
        vec![
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ],
        vec![("sec-fetch-site", "CROSS-SITE")],
    ];
    for headers in variants {
        let mut request = Request::post("/ops/actors/Counter/c/pause");
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        let (status, body) = send(app(&runtime), request.body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}: {body}");
    }
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    let details = admin.inspect("Counter", "c").await.unwrap().unwrap();
    assert_eq!(details.summary.paused_at, None);
    runtime.close().await;
}

#[tokio::test]
async fn review12_dashboard_bad_ids_are_client_errors_and_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dash_runtime(&dir).await;
    let counter = runtime.reference::<Counter>("c");
    counter.add(1).await.unwrap();
    let long = "y".repeat(20_000);
    for uri in [
        "/ops/actors/Counter/a%00b".to_owned(),
        format!("/ops/actors/Counter/{long}"),
        "/ops/actors/%3Cscript%3Ealert(1)%3C%2Fscript%3E/x".to_owned(),
        "/ops/actors/Counter/..%2F..%2Fetc".to_owned(),
    ] {
        let (status, body) = send(app(&runtime), get(&uri)).await;
        assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR,
            "{uri}: {status} {body}"
        );
        assert!(!body.contains("<script>"), "{uri}: unescaped: {body}");
    }
    // A pause of a too-long id or a NUL id.
    for id in ["a%00b".to_owned(), long.clone()] {
        let request = Request::post(format!("/ops/actors/Counter/{id}/pause"))
            .header("sec-fetch-site", "same-origin")
            .body(Body::empty())
            .unwrap();
        let (status, body) = send(app(&runtime), request).await;
        assert!(
            status.is_client_error(),
            "pause {}: {status} {body}",
            id.len()
        );
    }
    // A failure text with markup, on the dead letters page and the message page.
    counter.fail().await.unwrap_err();
    let (status, body) = send(app(&runtime), get("/ops/dead-letters")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("<script>"), "{body}");
    runtime.close().await;
}

fn same_origin_post(uri: &str) -> Request<Body> {
    Request::post(uri)
        .header("sec-fetch-site", "same-origin")
        .body(Body::empty())
        .unwrap()
}

/// The retry button posted for a message that is not a dead letter (a completed one: an old
/// page, a crafted form) is the operator's mistake, a 4xx page saying why; the dashboard
/// answers 500 "internal error" and logs it as a server failure.
#[tokio::test]
async fn review12_dashboard_retry_of_a_completed_message_is_a_client_error_not_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dash_runtime(&dir).await;
    runtime.reference::<Counter>("c").add(1).await.unwrap();
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    let details = admin.inspect("Counter", "c").await.unwrap().unwrap();
    let completed = details.recent_messages.first().expect("the add").message_id;
    let (status, body) = send(
        app(&runtime),
        same_origin_post(&format!("/ops/dead-letters/{completed}/retry")),
    )
    .await;
    let shown = body
        .split("<h1>")
        .nth(1)
        .unwrap_or(&body)
        .chars()
        .take(300)
        .collect::<String>();
    assert!(
        status.is_client_error(),
        "retry of completed #{completed}: {status}: {shown}"
    );
    runtime.close().await;
}

/// The same for a message id that does not exist: 404, not 500.
#[tokio::test]
async fn review12_dashboard_retry_of_an_unknown_message_is_not_found_not_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dash_runtime(&dir).await;
    let (status, body) = send(
        app(&runtime),
        same_origin_post("/ops/dead-letters/999999/retry"),
    )
    .await;
    let shown = body
        .split("<h1>")
        .nth(1)
        .unwrap_or(&body)
        .chars()
        .take(300)
        .collect::<String>();
    assert_eq!(status, StatusCode::NOT_FOUND, "{shown}");
    runtime.close().await;
}

/// Pausing an actor of a type the runtime does not know (a typo in a hand-edited URL).
#[tokio::test]
async fn review12_dashboard_pause_of_an_unknown_actor_type_is_a_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dash_runtime(&dir).await;
    let (status, body) = send(app(&runtime), same_origin_post("/ops/actors/Nope/x/pause")).await;
    let shown = body
        .split("<h1>")
        .nth(1)
        .unwrap_or(&body)
        .chars()
        .take(300)
        .collect::<String>();
    assert!(
        status.is_client_error() || status.is_redirection(),
        "{status}: {shown}"
    );
    runtime.close().await;
}
