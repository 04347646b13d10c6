//! The operators' dashboard (feature `dashboard`): denied unless the policy allows the
//! operator, every page and button audited under the operator the application's middleware
//! names, links that follow the mount point, values escaped, posts from other sites refused;
//! and, in headless Chromium, a dead letter listed, retried with its button and seen
//! completed.

mod support;

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use fantoccini::Locator;
use solid_objects::admin::DeadLetterFilter;
use solid_objects::dashboard::{self, Operator};
use solid_objects::policy::{AdminRequest, Denied, Policy, Request as CallRequest};
use solid_objects::prelude::*;
use support::browser::Browser;
use support::eventually;
use tower::ServiceExt;

/// A till whose sales fail for good while its card reader is unplugged.
#[actor]
#[derive(Default)]
struct Till {
    sales: u32,
    unplugged: bool,
}

#[actor]
impl Till {
    #[command]
    fn unplug(&mut self, unplugged: bool) {
        self.unplugged = unplugged;
    }

    #[command]
    fn sell(&mut self) -> Result<u32, Failure> {
        if self.unplugged {
            return Err(Failure::permanent("the card reader is unplugged"));
        }
        self.sales += 1;
        Ok(self.sales)
    }
}

/// Calls for everyone; administration for a context that names an operator.
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

/// The application's authentication, reduced to naming every request's operator "ana".
async fn as_ana(mut request: Request, next: Next) -> Response {
    request
        .extensions_mut()
        .insert(Operator(json!({ "operator": "ana" })));
    next.run(request).await
}

/// The dashboard mounted at `/ops`, behind `as_ana` unless `anonymous`.
fn app(runtime: &Runtime, anonymous: bool) -> Router {
    let dashboard = dashboard::router(runtime.clone());
    let dashboard = if anonymous {
        dashboard
    } else {
        dashboard.layer(axum::middleware::from_fn(as_ana))
    };
    Router::new().nest("/ops", dashboard)
}

async fn runtime(dir: &tempfile::TempDir) -> Runtime {
    Runtime::builder()
        .sqlite(dir.path().join("actors.db"))
        .policy(Operators)
        .actor::<Till>()
        .start()
        .await
        .unwrap()
}

/// A dead letter of till `id` (a sale while it was unplugged; it is plugged in again, so a
/// retry succeeds); returns its message id.
async fn dead_letter(runtime: &Runtime, id: &str) -> i64 {
    let till = runtime.reference::<Till>(id);
    till.unplug(true).await.unwrap();
    till.sell().await.unwrap_err();
    till.unplug(false).await.unwrap();
    let letters = runtime
        .admin()
        .context(json!({ "operator": "setup" }))
        .dead_letters(&DeadLetterFilter::new().actor_type("Till"))
        .await
        .unwrap();
    letters
        .iter()
        .find(|letter| letter.actor_id == id)
        .expect("the dead letter")
        .message_id
}

/// Sends `request` to `app`; returns the status, the `Location` header and the body.
async fn send(app: Router, request: Request<Body>) -> (StatusCode, Option<String>, String) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let location = response
        .headers()
        .get(header::LOCATION)
        .map(|location| location.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, location, String::from_utf8(body.to_vec()).unwrap())
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn post(uri: &str, site: &str) -> Request<Body> {
    Request::post(uri)
        .header("sec-fetch-site", site)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn without_an_operator_the_policy_denies_every_page_and_the_audit_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-1").await;
    for request in [
        get("/ops"),
        get("/ops/dead-letters"),
        post(&format!("/ops/dead-letters/{letter}/retry"), "same-origin"),
    ] {
        let (status, _, body) = send(app(&runtime, true), request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("operators only"), "{body}");
    }
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    let events = admin.audit_log(4).await.unwrap();
    let denied: Vec<&str> = events[1..]
        .iter()
        .map(|event| event.outcome.as_str())
        .collect();
    assert_eq!(denied, ["denied", "denied", "denied"]);
    let message = admin.message(letter).await.unwrap().unwrap();
    assert_eq!(message.retried_as, None, "a denied retry retried nothing");
    runtime.close().await;
}

#[tokio::test]
async fn pages_link_under_the_mount_point_and_escape_what_they_show() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let hostile = "<script>alert(1)</script>/&\"'";
    dead_letter(&runtime, hostile).await;

    let (status, _, overview) = send(app(&runtime, false), get("/ops")).await;
    assert_eq!(status, StatusCode::OK, "{overview}");
    assert!(
        overview.contains(r#"href="/ops/dead-letters""#),
        "{overview}"
    );
    assert!(overview.contains("the card reader is unplugged"));
    assert!(!overview.contains("<script>alert"), "{overview}");
    assert!(overview.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));

    // The actor's link encodes its id into one path segment, and leads to its page.
    let link = "/ops/actors/Till/%3Cscript%3Ealert%281%29%3C%2Fscript%3E%2F%26%22%27";
    assert!(overview.contains(link), "{overview}");
    let (status, _, actor) = send(app(&runtime, false), get(link)).await;
    assert_eq!(status, StatusCode::OK, "{actor}");
    assert!(
        actor.contains("Recent messages") && actor.contains("dead"),
        "{actor}"
    );

    let (status, _, missing) = send(app(&runtime, false), get("/ops/messages/999999")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(missing.contains("There is no message 999999"), "{missing}");
    let (status, _, _) = send(app(&runtime, false), get("/ops/messages/x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    runtime.close().await;
}

#[tokio::test]
async fn a_post_from_another_site_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-1").await;
    let retry = format!("/ops/dead-letters/{letter}/retry");
    for site in ["cross-site", "same-site"] {
        let (status, _, body) = send(app(&runtime, false), post(&retry, site)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{site}: {body}");
    }
    let foreign = Request::post("/ops/actors/Till/t-1/pause")
        .header(header::ORIGIN, "https://evil.example")
        .header(header::HOST, "127.0.0.1:8080")
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = send(app(&runtime, false), foreign).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    assert_eq!(
        admin.message(letter).await.unwrap().unwrap().retried_as,
        None
    );
    let till = admin.inspect("Till", "t-1").await.unwrap().unwrap();
    assert_eq!(till.summary.paused_at, None, "not paused");

    // From the dashboard itself, the same buttons work, as ana.
    let (status, location, _) = send(app(&runtime, false), post(&retry, "same-origin")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let retried = admin
        .message(letter)
        .await
        .unwrap()
        .unwrap()
        .retried_as
        .unwrap();
    assert_eq!(
        location.as_deref(),
        Some(&*format!("/ops/messages/{retried}"))
    );
    let pause = post("/ops/actors/Till/t-1/pause", "same-origin");
    let (status, location, _) = send(app(&runtime, false), pause).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/ops/actors/Till/t%2D1"));
    let (_, _, page) = send(app(&runtime, false), get("/ops/actors/Till/t-1")).await;
    assert!(page.contains("Resume"), "{page}");
    let events = admin.audit_log(6).await.unwrap();
    let by_ana: Vec<&str> = events
        .iter()
        .filter(|event| event.caller == Some(json!({ "operator": "ana" })))
        .map(|event| event.action.as_str())
        .collect();
    assert_eq!(by_ana, ["inspect", "pause", "retry_dead_letter"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_redrive_from_the_filtered_page_retries_only_what_matches() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    dead_letter(&runtime, "t-1").await;
    dead_letter(&runtime, "t-2").await;
    let (_, _, page) = send(
        app(&runtime, false),
        get("/ops/dead-letters?actor_type=Till&operation=sell&error=reader"),
    )
    .await;
    assert!(page.contains("2 shown"), "{page}");
    let (_, _, none) = send(
        app(&runtime, false),
        get("/ops/dead-letters?actor_type=Till&error=printer"),
    )
    .await;
    assert!(none.contains("No dead letters."), "{none}");
    let redrive = Request::post("/ops/dead-letters/redrive")
        .header("sec-fetch-site", "same-origin")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("actor_type=Till&operation=sell&error=reader"))
        .unwrap();
    let (status, _, done) = send(app(&runtime, false), redrive).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(done.contains("2 dead letters enqueued again"), "{done}");
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_dead_letter_is_retried_with_its_button_and_seen_completed() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-7").await;
    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = app(&runtime, false);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = &browser.client;

    client.goto(&format!("http://{address}/ops")).await.unwrap();
    let overview = client.source().await.unwrap();
    assert!(
        overview.contains("the card reader is unplugged"),
        "{overview}"
    );
    browser.screenshot("dashboard-overview").await;

    client
        .goto(&format!("http://{address}/ops/dead-letters"))
        .await
        .unwrap();
    let retry = format!("form[action='/ops/dead-letters/{letter}/retry'] button");
    client
        .find(Locator::Css(&retry))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The button leads to the retried message's page, which refreshes itself until it ran.
    let completed = eventually(Duration::from_secs(20), || async {
        match client.find(Locator::Id("status")).await {
            Ok(status) => status.text().await.is_ok_and(|text| text == "completed"),
            Err(_) => false,
        }
    })
    .await;
    let url = client.current_url().await.unwrap();
    assert!(
        completed,
        "the retried message did not show completed at {url}"
    );
    assert!(url.path().starts_with("/ops/messages/"), "{url}");
    browser.screenshot("dashboard-message").await;
    assert_eq!(
        runtime.reference::<Till>("t-7").sell().await.unwrap(),
        2,
        "the retried sale ran once: this is the second"
    );

    browser.close().await;
    server.abort();
    runtime.shutdown();
    workers.await.unwrap().unwrap();
    runtime.close().await;
}
