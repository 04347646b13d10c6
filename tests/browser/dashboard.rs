//! The operators' dashboard (feature `dashboard`): denied unless the policy allows the
//! operator, every page and button audited under the operator the application's middleware
//! names, links that follow the mount point, values escaped, every response closed to frames
//! and scripts, posts without proof that the dashboard sent them refused, bad ids, retries
//! of completed or unknown messages and pauses of unknown types answered as client errors;
//! and, in headless
//! Chromium under a nested mount, a dead letter retried with its button and seen completed,
//! and every navigation link and button clicked on every page.

use std::time::Duration;

use crate::support::actors::Ledger;
use crate::support::browser::Browser;
use crate::support::charts::{noon, Station};
use crate::support::eventually;
use crate::support::fixtures::on_a_file_in;
use crate::support::policies::Administered;
use crate::support::workers::run_workers;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use fantoccini::Locator;
use solid_objects::admin::DeadLetterFilter;
use solid_objects::dashboard::{self, Operator};
use solid_objects::policy::{AdminAction, Denied};
use solid_objects::prelude::*;
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
const OPERATORS: Administered =
    Administered(
        |request| match request.context.and_then(|context| context.get("operator")) {
            Some(_) => Ok(()),
            None => Err(Denied::new("operators only")),
        },
    );

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
    dashboard::mount(Router::new(), "/ops", dashboard)
}

/// A runtime of tills on a SQLite file in `dir`, under the operators' policy.
async fn runtime(dir: &tempfile::TempDir) -> Runtime {
    runtime_of::<Till>(dir).await
}

/// A runtime of `A`s on a SQLite file in `dir`, under the operators' policy.
async fn runtime_of<A: solid_objects::Actor>(dir: &tempfile::TempDir) -> Runtime {
    on_a_file_in::<A>(dir, OPERATORS).await
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
    let body = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    (
        status,
        location,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Sends `request` to `app`; returns the status and the response's headers.
async fn send_for_headers(app: Router, request: Request<Body>) -> (StatusCode, HeaderMap) {
    let response = app.oneshot(request).await.unwrap();
    (response.status(), response.headers().clone())
}

/// Asserts that `headers` keep the response out of every frame, run no script, are not
/// sniffed into another type, and send a referrer only to the dashboard's own origin.
fn assert_secured(what: &str, headers: &HeaderMap) {
    let value = |name: &str| {
        headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{what}: no {name} in {headers:?}"))
    };
    let policy = value("content-security-policy");
    let directives: Vec<(&str, &str)> = policy
        .split(';')
        .filter_map(|directive| directive.trim().split_once(' '))
        .collect();
    let directive = |name: &str| {
        directives
            .iter()
            .find(|(directive, _)| *directive == name)
            .map(|(_, value)| value.trim())
    };
    assert_eq!(
        directive("frame-ancestors"),
        Some("'none'"),
        "{what}: {policy}"
    );
    let scripts = directive("script-src").or(directive("default-src"));
    assert_eq!(scripts, Some("'none'"), "{what}: {policy}");
    assert_eq!(value("x-frame-options"), "DENY", "{what}");
    assert_eq!(value("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(value("referrer-policy"), "same-origin", "{what}");
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

/// A policy written before the charts: operators read the overview, actors and dead
/// letters, but no activity (and this one no dead letters either).
const BEFORE_THE_CHARTS: Administered = Administered(|request| match request.action {
    AdminAction::Overview | AdminAction::Inspect => Ok(()),
    _ => Err(Denied::new("not in this policy")),
});

#[tokio::test]
async fn a_policy_that_allows_the_overview_but_not_the_charts_sees_the_rest_and_what_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = on_a_file_in::<Till>(&dir, BEFORE_THE_CHARTS).await;
    runtime.reference::<Till>("t1").sell().await.unwrap();
    let app = app(&runtime, false);

    let (status, _, page) = send(app.clone(), get("/ops")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("Actor types"),
        "the overview's own parts show"
    );
    assert!(page.contains(">Till<"), "{page}");
    for action in ["activity", "list_dead_letters"] {
        assert!(
            page.contains(&format!(
                "the administration policy does not allow <code>{action}</code>"
            )),
            "{action} is said to be withheld: {page}"
        );
    }
    assert!(!page.contains("<svg"), "no chart is drawn: {page}");

    let (status, _, page) = send(app, get("/ops/actors/Till/t1")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("revision"), "{page}");
    assert!(
        page.contains("the administration policy does not allow <code>activity</code>"),
        "{page}"
    );
    runtime.close().await;
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
    // Its chart is named for it, escaped too, and its window links stay on its page.
    let chart = &actor[actor.find("<svg").expect("its turns' chart")..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert!(
        chart.contains("<title id=\"chart-turns\">Till &lt;script&gt;alert(1)&lt;/script&gt;"),
        "{chart}"
    );
    assert!(!chart.contains("<script"), "{chart}");
    assert!(actor.contains(&format!("{link}?window=24h")), "{actor}");

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
    assert_eq!(location.as_deref(), Some("/ops/actors/Till/t-1"));
    let (_, _, page) = send(app(&runtime, false), get("/ops/actors/Till/t-1")).await;
    assert!(page.contains("Resume"), "{page}");
    let events = admin.audit_log(6).await.unwrap();
    let by_ana: Vec<&str> = events
        .iter()
        .filter(|event| event.caller == Some(json!({ "operator": "ana" })))
        .map(|event| event.action.as_str())
        .collect();
    // The actor's page is two calls: the actor, and its turns for the chart.
    assert_eq!(
        by_ana,
        ["activity", "inspect", "pause", "retry_dead_letter"]
    );
    runtime.close().await;
}

#[tokio::test]
async fn every_response_pages_redirects_and_errors_is_closed_to_frames_and_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-1").await;
    let cases = [
        ("the overview", false, get("/ops"), StatusCode::OK),
        (
            "dead letters",
            false,
            get("/ops/dead-letters"),
            StatusCode::OK,
        ),
        (
            "an actor",
            false,
            get("/ops/actors/Till/t-1"),
            StatusCode::OK,
        ),
        (
            "a missing message",
            false,
            get("/ops/messages/999999"),
            StatusCode::OK,
        ),
        (
            "a pause's redirect",
            false,
            post("/ops/actors/Till/t-1/pause", "same-origin"),
            StatusCode::SEE_OTHER,
        ),
        (
            "a cross-site retry",
            false,
            post(&format!("/ops/dead-letters/{letter}/retry"), "cross-site"),
            StatusCode::FORBIDDEN,
        ),
        ("a denied page", true, get("/ops"), StatusCode::FORBIDDEN),
        (
            "a bad id",
            false,
            get("/ops/messages/x"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a button's address opened",
            false,
            get("/ops/actors/Till/t-1/pause"),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "the overview's charts over a day",
            false,
            get("/ops?window=24h"),
            StatusCode::OK,
        ),
        (
            "an actor's chart over 15 minutes",
            false,
            get("/ops/actors/Till/t-1?window=15m"),
            StatusCode::OK,
        ),
        (
            "a window the charts do not have",
            false,
            get("/ops?window=2h"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a malformed query",
            false,
            get("/ops?window=1h&window=24h"),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (what, anonymous, request, expected) in cases {
        let (status, headers) = send_for_headers(app(&runtime, anonymous), request).await;
        assert_eq!(status, expected, "{what}");
        assert_secured(what, &headers);
    }
    runtime.close().await;
}

/// A form posted to `uri` with exactly these `headers` (and the form's content type).
fn post_with(uri: &str, headers: &[(&str, &str)], body: &'static str) -> Request<Body> {
    let mut request =
        Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body)).unwrap()
}

#[tokio::test]
async fn a_post_without_proof_that_the_dashboard_sent_it_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-1").await;
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    runtime
        .reference::<Till>("t-2")
        .unplug(false)
        .await
        .unwrap();
    admin.pause("Till", "t-2").await.unwrap();
    let unproven: [&[(&str, &str)]; 5] = [
        &[],
        &[(header::REFERER.as_str(), "https://evil.example/page")],
        &[
            (header::REFERER.as_str(), "http://127.0.0.1:8080/ops"),
            (header::HOST.as_str(), "127.0.0.1:8080"),
        ],
        &[("sec-fetch-site", "none")],
        &[
            ("sec-fetch-site", "cross-site"),
            (header::ORIGIN.as_str(), "http://127.0.0.1:8080"),
            (header::HOST.as_str(), "127.0.0.1:8080"),
        ],
    ];
    let retry = format!("/ops/dead-letters/{letter}/retry");
    for headers in unproven {
        for (uri, body) in [
            ("/ops/actors/Till/t-1/pause", ""),
            ("/ops/actors/Till/t-2/resume", ""),
            (retry.as_str(), ""),
            ("/ops/dead-letters/redrive", "actor_type=Till"),
        ] {
            let request = post_with(uri, headers, body);
            let (status, _, page) = send(app(&runtime, false), request).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{uri} {headers:?}: {page}");
            assert!(page.contains("open the dashboard"), "{page}");
        }
    }
    let t1 = admin.inspect("Till", "t-1").await.unwrap().unwrap();
    assert_eq!(t1.summary.paused_at, None, "t-1 was paused");
    let t2 = admin.inspect("Till", "t-2").await.unwrap().unwrap();
    assert!(t2.summary.paused_at.is_some(), "t-2 was resumed");
    let message = admin.message(letter).await.unwrap().unwrap();
    assert_eq!(message.retried_as, None, "the dead letter was retried");

    // An `Origin` that is the host is proof enough, as is `Sec-Fetch-Site: same-origin`.
    let same_origin = [
        (header::ORIGIN.as_str(), "http://127.0.0.1:8080"),
        (header::HOST.as_str(), "127.0.0.1:8080"),
    ];
    let pause = post_with("/ops/actors/Till/t-1/pause", &same_origin, "");
    let (status, location, _) = send(app(&runtime, false), pause).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/ops/actors/Till/t-1"));
    let t1 = admin.inspect("Till", "t-1").await.unwrap().unwrap();
    assert!(t1.summary.paused_at.is_some(), "t-1 is paused");
    runtime.close().await;
}

/// The `href`s of a page, in order.
fn links(page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .collect()
}

#[tokio::test]
async fn wherever_it_is_mounted_every_link_of_every_page_leads_to_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let letter = dead_letter(&runtime, "t-1").await;
    let dashboard = || dashboard::router(runtime.clone()).layer(axum::middleware::from_fn(as_ana));
    let mounts = [
        ("/ops", Router::new().nest("/ops", dashboard())),
        (
            "/admin/ops",
            Router::new().nest("/admin", Router::new().nest("/ops", dashboard())),
        ),
        ("", Router::new().merge(dashboard())),
    ];
    for (base, app) in mounts {
        let overview = if base.is_empty() { "/" } else { base };
        let redrive = Request::post(format!("{base}/dead-letters/redrive"))
            .header("sec-fetch-site", "same-origin")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from("actor_type=Nobody"))
            .unwrap();
        let mut pages = vec![("the redrive's result".to_owned(), redrive)];
        for page in [
            overview.to_owned(),
            format!("{base}/dead-letters"),
            format!("{base}/actors/Till/t-1"),
            format!("{base}/actors/Till/nobody"),
            format!("{base}/messages/{letter}"),
        ] {
            pages.push((page.clone(), get(&page)));
        }
        for (page, request) in pages {
            let (status, _, body) = send(app.clone(), request).await;
            assert_eq!(status, StatusCode::OK, "{page}: {body}");
            let links = links(&body);
            assert!(links.len() >= 2, "{page}: {links:?}");
            for link in links {
                // The overview, a page under it, or the overview over another window.
                let under_the_mount = link == overview
                    || link.starts_with(&format!("{base}/"))
                    || link.starts_with(&format!("{overview}?window="));
                assert!(under_the_mount, "{page}: {link}");
                let (status, _, target) = send(app.clone(), get(&link)).await;
                assert_eq!(status, StatusCode::OK, "{page} links to {link}: {target}");
                assert!(
                    target.contains("· solid-objects</title>"),
                    "{link}: {target}"
                );
            }
        }
    }
    runtime.close().await;
}

/// The overview answers at the mount with or without its trailing slash (`/ops` and
/// `/ops/`, which redirects to `/ops` with its query), as an operator types it.
#[tokio::test]
async fn the_overview_answers_at_the_mount_with_or_without_a_trailing_slash() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    dead_letter(&runtime, "t-1").await;
    for (base, app) in [
        ("/ops", app(&runtime, false)),
        (
            "/admin/ops",
            Router::new().nest("/admin", app(&runtime, false)),
        ),
    ] {
        let (status, _, body) = send(app.clone(), get(base)).await;
        assert_eq!(status, StatusCode::OK, "{base}: {body}");
        assert!(body.contains("· solid-objects</title>"), "{base}: {body}");
        for (slashed, expected) in [
            (format!("{base}/"), base.to_owned()),
            (format!("{base}/?window=24h"), format!("{base}?window=24h")),
        ] {
            let (status, headers) = send_for_headers(app.clone(), get(&slashed)).await;
            assert_eq!(status, StatusCode::PERMANENT_REDIRECT, "{slashed}");
            assert_secured(&slashed, &headers);
            let location = headers[header::LOCATION].to_str().unwrap();
            assert_eq!(location, expected, "{slashed}");
            let (status, _, body) = send(app.clone(), get(location)).await;
            assert_eq!(status, StatusCode::OK, "{location}: {body}");
        }
    }
    runtime.close().await;
}

/// Mounted at a path written with its trailing slash (`/ops/`), which [`dashboard::mount`]
/// trims and does not list among the paths it refuses, the dashboard answers as at `/ops`:
/// the overview at `/ops`, and `/ops/` redirected to it.
#[tokio::test]
async fn mounted_at_a_path_with_a_trailing_slash_the_dashboard_answers_as_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let mounted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let dashboard = dashboard::router(runtime.clone()).layer(axum::middleware::from_fn(as_ana));
        dashboard::mount(Router::new(), "/ops/", dashboard)
    }));
    let app = match mounted {
        Ok(app) => app,
        Err(panic) => panic!(
            "mounting at /ops/ panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("?")
        ),
    };

    let (status, _, body) = send(app.clone(), get("/ops")).await;
    assert_eq!(status, StatusCode::OK, "/ops: {body}");
    let (status, location, _) = send(app, get("/ops/")).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(location.as_deref(), Some("/ops"));
    runtime.close().await;
}

#[tokio::test]
async fn a_window_the_charts_do_not_have_is_refused_before_anything_is_read_or_audited() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    dead_letter(&runtime, "t-1").await;
    let auditor = runtime.admin().context(json!({ "operator": "auditor" }));
    let before = auditor.audit_log(1).await.unwrap()[0].id;
    for uri in [
        "/ops?window=2h",
        "/ops?window=",
        "/ops?window=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "/ops/actors/Till/t-1?window=1d",
    ] {
        let (status, _, page) = send(app(&runtime, false), get(uri)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {page}");
        assert!(page.contains("15m, 1h or 24h"), "{uri}: {page}");
        assert!(!page.contains("<script>"), "{uri}: {page}");
    }
    let (_, _, page) = send(
        app(&runtime, false),
        get("/ops?window=%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
    )
    .await;
    assert!(page.contains("&lt;script&gt;alert(1)"), "{page}");
    // The read of the audit log above, and this one: nothing between them.
    let after = auditor.audit_log(1).await.unwrap()[0].id;
    assert_eq!(
        after,
        before + 1,
        "a refused window reads nothing, so audits nothing"
    );
    for window in ["15m", "1h", "24h"] {
        let (status, _, page) =
            send(app(&runtime, false), get(&format!("/ops?window={window}"))).await;
        assert_eq!(status, StatusCode::OK, "{window}: {page}");
        assert!(page.contains("aria-current=\"page\""), "{window}: {page}");
    }
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
    let workers = run_workers(&runtime);
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
    browser.click(Locator::Css(&retry)).await;
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

/// The status line and headers of `GET path` from the server at `address`, as a plain
/// HTTP/1.1 client (no browser) reads them.
async fn response_head(address: std::net::SocketAddr, path: &str) -> (String, HeaderMap) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    let (head, _) = response.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_owned();
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':').expect("a header line");
            (
                header::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
                header::HeaderValue::from_str(value.trim()).unwrap(),
            )
        })
        .collect();
    (status, headers)
}

/// Clicks the element `locator` finds and waits until the page it leads to has loaded a
/// dashboard page (its title ends with the dashboard's name); returns that page's title, or
/// panics with where the click led.
///
/// The page before the click is marked first, and the wait is for a page without the mark:
/// a click that leads from one page to another of the same title (a filtered list, a list
/// after a retry) would otherwise read the old page's title before the browser left it.
async fn click_through(client: &fantoccini::Client, locator: Locator<'_>, what: &str) -> String {
    client
        .execute("window.solidObjectsLeft = true;", Vec::new())
        .await
        .unwrap();
    client.find(locator).await.unwrap().click().await.unwrap();
    let left = eventually(Duration::from_secs(10), || async {
        client
            .execute("return window.solidObjectsLeft === undefined;", Vec::new())
            .await
            .is_ok_and(|left| left == serde_json::Value::Bool(true))
    })
    .await;
    assert!(left, "{what} did not lead to another page");
    title_of_dashboard_page(client, what).await
}

/// The title of the page the browser shows once it is a dashboard page; panics with the URL
/// and the page when it does not become one.
async fn title_of_dashboard_page(client: &fantoccini::Client, what: &str) -> String {
    let loaded = eventually(Duration::from_secs(10), || async {
        client
            .title()
            .await
            .is_ok_and(|title| title.ends_with("· solid-objects"))
    })
    .await;
    let url = client.current_url().await.unwrap();
    let source = client.source().await.unwrap_or_default();
    assert!(
        loaded,
        "{what} led to {url}, not a dashboard page: {source}"
    );
    assert!(
        url.path().starts_with("/admin/ops"),
        "{what} left the mount: {url}"
    );
    client.title().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_under_a_nested_mount_every_link_and_button_works_and_no_frame_shows_it() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    let from_overview = dead_letter(&runtime, "t-1").await;
    let from_message = dead_letter(&runtime, "t-2").await;
    let from_list = dead_letter(&runtime, "t-3").await;
    dead_letter(&runtime, "t-4").await;
    let workers = run_workers(&runtime);
    // The dashboard two routers down (at /admin/ops), next to a page of the application's
    // own that tries to show it in a frame.
    let framing = "<!DOCTYPE html><title>framing</title><iframe src=\"/admin/ops\"></iframe>";
    let app = Router::new().nest("/admin", app(&runtime, false)).route(
        "/framed",
        axum::routing::get(move || async move { axum::response::Html(framing) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = &browser.client;
    let base = format!("http://{address}/admin/ops");

    // What any HTTP client reads: the headers on a page and on an error.
    for (path, status) in [("/admin/ops", "200"), ("/admin/ops/messages/x", "400")] {
        let (line, headers) = response_head(address, path).await;
        assert!(line.contains(status), "{path}: {line}");
        assert_secured(path, &headers);
    }

    // No frame shows a dashboard page, not even one of the same origin.
    client
        .goto(&format!("http://{address}/framed"))
        .await
        .unwrap();
    let framed = "const frame = document.querySelector('iframe'); \
                  try { return frame.contentDocument ? frame.contentDocument.title : 'blocked'; } \
                  catch (error) { return 'blocked'; }";
    let shown = || async {
        let title = client.execute(framed, vec![]).await.unwrap();
        title.as_str().unwrap_or_default().to_owned()
    };
    let settled = eventually(Duration::from_secs(10), || async {
        !shown().await.is_empty()
    })
    .await;
    assert!(settled, "the frame never loaded");
    assert_eq!(shown().await, "blocked", "a frame showed the dashboard");

    // Every link of every page leads to a dashboard page under the mount.
    for page in [
        base.clone(),
        format!("{base}/dead-letters"),
        format!("{base}/actors/Till/t-1"),
        format!("{base}/actors/Till/nobody"),
        format!("{base}/messages/{from_overview}"),
    ] {
        client.goto(&page).await.unwrap();
        let count = client.find_all(Locator::Css("a")).await.unwrap().len();
        assert!(count >= 2, "{page} has {count} links");
        for index in 0..count {
            client.goto(&page).await.unwrap();
            let link = client
                .find_all(Locator::Css("a"))
                .await
                .unwrap()
                .remove(index);
            let text = link.text().await.unwrap();
            link.click().await.unwrap();
            let what = format!("the link {text:?} of {page}");
            let title = title_of_dashboard_page(client, &what).await;
            if text == "Overview" || text == "Dead letters" {
                assert_eq!(title, format!("{text} · solid-objects"), "{what}");
            }
        }
    }
    browser.screenshot("dashboard-nested-overview").await;

    // Pause, then Resume, on the actor's page.
    client
        .goto(&format!("{base}/actors/Till/t-1"))
        .await
        .unwrap();
    let title = click_through(
        client,
        Locator::Css("form[action$='/pause'] button"),
        "Pause",
    )
    .await;
    assert_eq!(title, "Till t-1 · solid-objects");
    let title = click_through(
        client,
        Locator::Css("form[action$='/resume'] button"),
        "Resume",
    )
    .await;
    assert_eq!(title, "Till t-1 · solid-objects");
    client
        .find(Locator::Css("form[action$='/pause'] button"))
        .await
        .expect("resumed: the Pause button is back");

    // Retry from the overview, from the message's page and from the dead letters' page.
    let retry =
        |letter: i64| format!("form[action='/admin/ops/dead-letters/{letter}/retry'] button");
    client.goto(&base).await.unwrap();
    let title = click_through(client, Locator::Css(&retry(from_overview)), "Retry").await;
    assert!(title.starts_with("Message #"), "{title}");
    client
        .goto(&format!("{base}/messages/{from_message}"))
        .await
        .unwrap();
    let title = click_through(client, Locator::Css(&retry(from_message)), "Retry").await;
    assert!(title.starts_with("Message #"), "{title}");
    client.goto(&format!("{base}/dead-letters")).await.unwrap();
    client
        .find(Locator::Css("input[name='error']"))
        .await
        .unwrap()
        .send_keys("reader")
        .await
        .unwrap();
    let title = click_through(client, Locator::Css("form[method='get'] button"), "Filter").await;
    assert_eq!(title, "Dead letters · solid-objects");
    let url = client.current_url().await.unwrap();
    assert_eq!(
        url.query(),
        Some("actor_type=&operation=&error=reader"),
        "{url}"
    );
    let title = click_through(client, Locator::Css(&retry(from_list)), "Retry").await;
    assert!(title.starts_with("Message #"), "{title}");

    // Redrive what is left (t-4), then follow the link to what it enqueued.
    client
        .goto(&format!("{base}/dead-letters?error=reader"))
        .await
        .unwrap();
    let redrive = Locator::Css("form[action$='/dead-letters/redrive'] button");
    let title = click_through(client, redrive, "Redrive").await;
    assert_eq!(title, "Redrive · solid-objects");
    let title = click_through(client, Locator::Css("li a"), "a redriven message").await;
    assert!(title.starts_with("Message #"), "{title}");
    let completed = eventually(Duration::from_secs(20), || async {
        runtime
            .admin()
            .context(json!({ "operator": "auditor" }))
            .dead_letters(&DeadLetterFilter::new().actor_type("Till"))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    assert!(completed, "every retried and redriven sale ran");

    browser.close().await;
    server.abort();
    runtime.shutdown();
    workers.await.unwrap().unwrap();
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_link_to_an_actor_whose_id_is_a_dot_segment_leads_to_that_actor() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir).await;
    // Valid actor ids (non-empty, no NUL) that a URL parser takes for path segments.
    for id in ["..", ".", "%2e%2e"] {
        dead_letter(&runtime, id).await;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = app(&runtime, false);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = &browser.client;
    for id in ["..", ".", "%2e%2e"] {
        client
            .goto(&format!("http://{address}/ops/dead-letters"))
            .await
            .unwrap();
        let links = client.find_all(Locator::Css("td a")).await.unwrap();
        let mut target = None;
        for link in links {
            if link.text().await.unwrap().trim() == format!("Till {id}").as_str() {
                target = Some(link);
            }
        }
        let target = target.unwrap_or_else(|| panic!("no link to actor {id}"));
        let href = target.attr("href").await.unwrap();
        target.click().await.unwrap();
        let loaded = eventually(Duration::from_secs(10), || async {
            client
                .title()
                .await
                .is_ok_and(|title| title.ends_with("· solid-objects"))
        })
        .await;
        let url = client.current_url().await.unwrap();
        let title = client.title().await.unwrap_or_default();
        assert!(
            loaded && title.contains(id) && url.path().starts_with("/ops/actors/Till/"),
            "the link to actor {id:?} ({href:?}) led to {url} (title {title:?})"
        );
    }
    browser.close().await;
    server.abort();
    runtime.close().await;
}

/// The dashboard nested at `/ops` behind `as_ana` (without `dashboard::mount`).
fn ledger_app(runtime: &Runtime) -> Router {
    Router::new().nest(
        "/ops",
        dashboard::router(runtime.clone()).layer(axum::middleware::from_fn(as_ana)),
    )
}

/// Sends `request` to `app`; returns the status and the body.
async fn status_and_body(app: Router, request: Request<Body>) -> (StatusCode, String) {
    let (status, _, body) = send(app, request).await;
    (status, body)
}

/// A page's text from its heading on, 300 characters at most, for a failure's message.
fn heading_on(page: &str) -> String {
    let from_heading = page.split("<h1>").nth(1).unwrap_or(page);
    from_heading.chars().take(300).collect()
}

#[tokio::test]
async fn cross_site_posts_are_refused_in_every_origin_variant() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_of::<Ledger>(&dir).await;
    runtime.reference::<Ledger>("c").record("x").await.unwrap();
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
        let mut request = Request::post("/ops/actors/Ledger/c/pause");
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        let (status, body) =
            status_and_body(ledger_app(&runtime), request.body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}: {body}");
    }
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    let details = admin.inspect("Ledger", "c").await.unwrap().unwrap();
    assert_eq!(details.summary.paused_at, None);
    runtime.close().await;
}

#[tokio::test]
async fn bad_ids_are_client_errors_and_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_of::<Ledger>(&dir).await;
    let ledger = runtime.reference::<Ledger>("c");
    ledger.record("x").await.unwrap();
    let long = "y".repeat(20_000);
    for uri in [
        "/ops/actors/Ledger/a%00b".to_owned(),
        format!("/ops/actors/Ledger/{long}"),
        "/ops/actors/%3Cscript%3Ealert(1)%3C%2Fscript%3E/x".to_owned(),
        "/ops/actors/Ledger/..%2F..%2Fetc".to_owned(),
    ] {
        let (status, body) = status_and_body(ledger_app(&runtime), get(&uri)).await;
        assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR,
            "{uri}: {status} {body}"
        );
        assert!(!body.contains("<script>"), "{uri}: unescaped: {body}");
    }
    // A pause of a too-long id or a NUL id.
    for id in ["a%00b".to_owned(), long.clone()] {
        let request = Request::post(format!("/ops/actors/Ledger/{id}/pause"))
            .header("sec-fetch-site", "same-origin")
            .body(Body::empty())
            .unwrap();
        let (status, body) = status_and_body(ledger_app(&runtime), request).await;
        assert!(
            status.is_client_error(),
            "pause {}: {status} {body}",
            id.len()
        );
    }
    // A failure text with markup, on the dead letters page and the message page.
    ledger
        .fragile("<script>alert(1)</script>")
        .await
        .unwrap_err();
    let (status, body) = status_and_body(ledger_app(&runtime), get("/ops/dead-letters")).await;
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

/// Posts to `uri` of the ledgers' dashboard as its own buttons do; returns the status and
/// the page's text from its heading on.
async fn posted_from_the_dashboard(runtime: &Runtime, uri: &str) -> (StatusCode, String) {
    let (status, body) = status_and_body(ledger_app(runtime), same_origin_post(uri)).await;
    (status, heading_on(&body))
}

/// The retry button posted for a message that is not a dead letter (a completed one: an old
/// page, a crafted form) is the operator's mistake, a 4xx page saying why; the dashboard
/// answers 500 "internal error" and logs it as a server failure.
#[tokio::test]
async fn a_retry_of_a_completed_message_is_a_client_error_not_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_of::<Ledger>(&dir).await;
    runtime.reference::<Ledger>("c").record("x").await.unwrap();
    let admin = runtime.admin().context(json!({ "operator": "auditor" }));
    let details = admin.inspect("Ledger", "c").await.unwrap().unwrap();
    let completed = details.recent_messages.first().expect("the add").message_id;
    let (status, shown) =
        posted_from_the_dashboard(&runtime, &format!("/ops/dead-letters/{completed}/retry")).await;
    assert!(
        status.is_client_error(),
        "retry of completed #{completed}: {status}: {shown}"
    );
    runtime.close().await;
}

/// The same for a message id that does not exist: 404, not 500.
#[tokio::test]
async fn a_retry_of_an_unknown_message_is_not_found_not_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_of::<Ledger>(&dir).await;
    let (status, shown) =
        posted_from_the_dashboard(&runtime, "/ops/dead-letters/999999/retry").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{shown}");
    runtime.close().await;
}

/// Pausing an actor of a type the runtime does not know (a typo in a hand-edited URL).
#[tokio::test]
async fn a_pause_of_an_unknown_actor_type_is_a_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_of::<Ledger>(&dir).await;
    let (status, shown) = posted_from_the_dashboard(&runtime, "/ops/actors/Nope/x/pause").await;
    assert!(
        status.is_client_error() || status.is_redirection(),
        "{status}: {shown}"
    );
    runtime.close().await;
}

/// The hour of known work the charts are checked against, minute by minute from noon: each
/// minute `m` has `8 + (m % 3 == 0)` completed turns (500 in the hour: four reminders
/// planned in minute 0 and rung in minute 20 among them), and ten stations that stumble in
/// minutes 40 to 49 fail once a minute, three times each (30 failed attempts), and end as
/// dead letters (10) two minutes after they were enqueued. The rings were due at 12:19:30, 12:20:00,
/// 12:20:04 and 12:20:09 and ring at 12:20:10: 40, 10, 6 and 1 s late.
struct KnownHour;

impl KnownHour {
    const JAMMED: std::ops::RangeInclusive<i64> = 40..=49;

    fn rings() -> [DateTime<Utc>; 4] {
        [noon(19, 30), noon(20, 0), noon(20, 4), noon(20, 9)]
    }

    fn completed(minute: i64) -> i64 {
        8 + i64::from(minute % 3 == 0)
    }

    fn failed_attempts(minute: i64) -> i64 {
        Self::JAMMED
            .filter(|jammed| (*jammed..=jammed + 2).contains(&minute))
            .count() as i64
    }

    fn dead(minute: i64) -> i64 {
        i64::from(Self::JAMMED.contains(&(minute - 2)))
    }

    /// Stations waiting for their next attempt at the end of the minute.
    fn ready(minute: i64) -> i64 {
        Self::JAMMED
            .filter(|jammed| (*jammed..jammed + 2).contains(&minute))
            .count() as i64
    }

    /// Runs the hour on `runtime`, moving `clock` minute by minute; leaves it at 12:59:10.
    async fn run(runtime: &Runtime, clock: &ManualClock) {
        let testing = runtime.testing();
        for minute in 0..60 {
            clock.set(noon(minute, 10));
            let mut turns = Self::completed(minute);
            if minute == 0 {
                for ring in Self::rings() {
                    let station = runtime.reference::<Station>("planner");
                    station.plan(ring.timestamp()).await.unwrap();
                    turns -= 1;
                }
            }
            if minute == 20 {
                turns -= 4;
            }
            for turn in 0..turns {
                let station = runtime.reference::<Station>(&format!("job-{}", turn % 4));
                station.work().await.unwrap();
            }
            if Self::JAMMED.contains(&minute) {
                let station = runtime.reference::<Station>(&format!("jammed-{minute}"));
                station.enqueue().stumble().await.unwrap();
            }
            testing.run_due_reminders().await.unwrap();
        }
    }
}

/// The numbers behind each point of the chart `chart` of a page: its points' `<title>`s
/// (`12:05 completed 9`, `12:20 p99 40000 ms`), by series and time.
fn chart_points(page: &str, chart: &str) -> std::collections::BTreeMap<(String, String), i64> {
    let start = page
        .find(&format!("data-chart=\"{chart}\""))
        .unwrap_or_else(|| panic!("no chart {chart} in {page}"));
    let svg = &page[start..start + page[start..].find("</svg>").unwrap()];
    svg.split("<title>")
        .skip(1)
        .filter_map(|rest| rest.split("</title>").next())
        .filter(|title| title.as_bytes().get(2) == Some(&b':'))
        .map(|title| {
            let (at, rest) = title.split_once(' ').unwrap();
            let rest = rest.strip_suffix(" ms").unwrap_or(rest);
            let (series, value) = rest.rsplit_once(' ').unwrap();
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("a number in {title:?}"));
            ((series.to_owned(), at.to_owned()), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_overview_charts_an_hour_of_known_work_point_by_point() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(noon(0, 10));
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("actors.db"))
        .policy(OPERATORS)
        .clock(clock.clone())
        .retry(
            solid_objects::RetryPolicy::new()
                .base_delay(Duration::from_secs(1))
                .max_attempts(3),
        )
        .actor::<Station>()
        .start()
        .await
        .unwrap();
    KnownHour::run(&runtime, &clock).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = app(&runtime, false);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = &browser.client;

    client.goto(&format!("http://{address}/ops")).await.unwrap();
    let page = client.source().await.unwrap();
    let finished = chart_points(&page, "finished");
    let waiting = chart_points(&page, "backlog");
    let late = chart_points(&page, "lateness");
    let at = |minute: i64| format!("12:{minute:02}");
    for minute in 0..60 {
        let point = |points: &std::collections::BTreeMap<(String, String), i64>, series: &str| {
            points.get(&(series.to_owned(), at(minute))).copied()
        };
        let expected = [
            ("completed", KnownHour::completed(minute)),
            ("rejected", 0),
            ("failed attempts", KnownHour::failed_attempts(minute)),
            ("dead", KnownHour::dead(minute)),
        ];
        for (series, count) in expected {
            assert_eq!(
                point(&finished, series),
                Some(count),
                "{series} at {}",
                at(minute)
            );
        }
        let expected = [
            ("ready messages", KnownHour::ready(minute)),
            ("due reminders", i64::from(minute == 19)),
            ("pending effects", 0),
        ];
        for (series, count) in expected {
            assert_eq!(
                point(&waiting, series),
                Some(count),
                "{series} at {}",
                at(minute)
            );
        }
        let lateness = (minute == 20).then_some((6_000, 40_000));
        let shown = point(&late, "p50").zip(point(&late, "p99"));
        assert_eq!(shown, lateness, "lateness at {}", at(minute));
    }
    let total = |series: &str| -> i64 {
        finished
            .iter()
            .filter(|((name, _), _)| name == series)
            .map(|(_, count)| count)
            .sum()
    };
    assert_eq!(
        [total("completed"), total("failed attempts"), total("dead")],
        [500, 30, 10]
    );
    assert_eq!(finished.len(), 4 * 60, "a point per series and minute");
    browser.screenshot("dashboard-charts").await;

    // The day, a point per half hour, through its link.
    browser.click(Locator::LinkText("24 hours")).await;
    title_of_overview(client).await;
    assert!(client
        .current_url()
        .await
        .unwrap()
        .as_str()
        .ends_with("/ops?window=24h"));
    let day = chart_points(&client.source().await.unwrap(), "finished");
    let half_hour = |series: &str, at: &str| day.get(&(series.to_owned(), at.to_owned())).copied();
    assert_eq!(half_hour("completed", "12:00"), Some(250));
    assert_eq!(half_hour("completed", "12:30"), Some(250));
    assert_eq!(half_hour("failed attempts", "12:30"), Some(30));
    assert_eq!(half_hour("dead", "12:30"), Some(10));
    assert_eq!(day.len(), 4 * 48);

    // A jammed station's own page: its three failed attempts, and its death.
    client
        .goto(&format!("http://{address}/ops/actors/Station/jammed-45"))
        .await
        .unwrap();
    let turns = chart_points(&client.source().await.unwrap(), "turns");
    let failed: Vec<i64> = (44..=48)
        .map(|minute| turns[&("failed attempts".to_owned(), at(minute))])
        .collect();
    assert_eq!(failed, [0, 1, 1, 1, 0]);
    assert_eq!(turns[&("dead".to_owned(), at(47))], 1);

    browser.close().await;
    server.abort();
    runtime.close().await;
}

/// Waits until the browser shows the overview (its title), and returns.
async fn title_of_overview(client: &fantoccini::Client) {
    let loaded = eventually(Duration::from_secs(10), || async {
        client
            .title()
            .await
            .is_ok_and(|title| title == "Overview · solid-objects")
    })
    .await;
    assert!(loaded, "{:?}", client.current_url().await);
}
