//! The operators' dashboard (feature `dashboard`): server-rendered pages over the
//! [administration API](crate::admin), as an axum [`Router`] an application mounts behind
//! its own authentication.
//!
//! - `/`: charts of the last hour (`?window=15m`, `1h` or `24h`): the messages that completed,
//!   were rejected or became dead letters and the attempts that failed, per minute; what was
//!   waiting (ready messages, due reminders, pending effects); how late reminders ran (p50,
//!   p99); then messages and effects by status, reminders and how late they are, paused
//!   actors, actor types, the busiest mailboxes, the last hour's finished messages, the
//!   newest dead letters;
//! - `/actors/{type}/{id}`: one actor's state, its turns and failures over the same windows,
//!   mailbox head, reminders, effects and recent messages, with pause and resume;
//! - `/messages/{id}`: one message (refreshing itself while it waits to run);
//! - `/dead-letters`: dead letters filtered by type, operation and error text, each with a
//!   retry button, and a redrive of every match.
//!
//! Every page and button is one to three [`Admin`] calls, so each is put to
//! [`Policy::authorize_administration`](crate::Policy::authorize_administration) (denied
//! unless the application's policy allows it) and written to the audit table. Who is asking
//! is the [`Operator`] the application's authentication middleware puts in the request's
//! extensions.
//!
//! The charts are SVG drawn on the server, in the page: no script runs and nothing loads. Each
//! point's `<title>` states the numbers behind it (`12:05 completed 9`), for screen readers
//! and scripts; a window in which nothing happened says so instead of drawing flat lines. A
//! window other than those three is refused with 400 before anything is read.
//!
//! Buttons post plain HTML forms (no JavaScript), and a post changes something only with
//! proof that one of the dashboard's own pages sent it: the browser's
//! `Sec-Fetch-Site: same-origin`, or (from a browser that does not send that header) an
//! `Origin` whose host is the request's `Host`. Any other post is refused with 403 before it
//! reaches the administration API: one from another site, one that names only a `Referer`,
//! and one with no provenance at all (a script, `curl`). Scripts use the
//! [administration API](crate::admin) or the `solid-objects` command-line tool instead.
//! Behind a reverse proxy, pass the browser's `Host` through (nginx:
//! `proxy_set_header Host $host;`) so that the `Origin` matches it.
//!
//! Every response of the router (pages, redirects, errors) carries headers that keep it out
//! of frames and run nothing: `Content-Security-Policy` (no script, no frame ancestors,
//! forms post only to the dashboard's origin), `X-Frame-Options: DENY`,
//! `X-Content-Type-Options: nosniff` and `Referrer-Policy: same-origin`. So another site can
//! neither press the Pause, Retry and Redrive buttons through an operator's browser nor show
//! them in a frame to be clicked. (A path that is none of its pages is the application's
//! router's to answer, with its fallback.)
//!
//! ```no_run
//! # async fn example(runtime: solid_objects::Runtime) -> std::io::Result<()> {
//! use axum::{extract::Request, middleware::Next, response::Response, Router};
//! use solid_objects::dashboard::{self, Operator};
//! use solid_objects::prelude::json;
//!
//! /// The application's own authentication; here every request is "ana".
//! async fn authenticate(mut request: Request, next: Next) -> Response {
//!     request.extensions_mut().insert(Operator(json!({ "operator": "ana" })));
//!     next.run(request).await
//! }
//!
//! let app = dashboard::mount(
//!     Router::new(),
//!     "/ops",
//!     dashboard::router(runtime).layer(axum::middleware::from_fn(authenticate)),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await
//! # }
//! ```

mod charts;
mod pages;
mod svg;

use std::convert::Infallible;

use axum::extract::{FromRequestParts, OriginalUri, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::Value;

use crate::admin::{Admin, DeadLetterFilter, UnknownWindow, Window};
use crate::client::shared::Runtime;
use crate::error::Error;

/// Who is using the dashboard, as the application's authentication knows them: put it in
/// the request's extensions (`request.extensions_mut().insert(Operator(..))`) and the
/// dashboard hands it to the policy and the audit table as the
/// [admin context](crate::admin::Admin::context). Without it, calls carry no context.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator(pub Value);

/// The dashboard's pages and buttons over `runtime`, to mount with [`mount`] (or
/// [`Router::nest`]; links follow the path it is mounted at) behind the application's
/// authentication.
pub fn router(runtime: Runtime) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/actors/{actor_type}/{actor_id}", get(actor))
        .route(
            "/actors/{actor_type}/{actor_id}/pause",
            post(set_paused::<true>),
        )
        .route(
            "/actors/{actor_type}/{actor_id}/resume",
            post(set_paused::<false>),
        )
        .route("/messages/{message_id}", get(message))
        .route("/dead-letters", get(dead_letters))
        .route("/dead-letters/redrive", post(redrive))
        .route("/dead-letters/{message_id}/retry", post(retry))
        .layer(axum::middleware::from_fn(refuse_posts_from_elsewhere))
        .layer(axum::middleware::from_fn(secure))
        .with_state(runtime)
}

/// Nests `dashboard` in `app` at `path` (`"/ops"`, or `"/ops/"`: the same), as
/// [`Router::nest`] does, and answers `/ops/` too, which `nest` leaves to the application:
/// with a redirect to `/ops` (its query kept), so an operator who types the slash reaches
/// the overview.
///
/// # Panics
///
/// As [`Router::nest`]: if `path` is empty, `/`, or does not start with `/`.
pub fn mount(app: Router, path: &str, dashboard: Router) -> Router {
    // `/ops/` and `/ops` mount it at the same place.
    let path = match path.trim_end_matches('/') {
        "" => path,
        trimmed => trimmed,
    };
    app.nest(path, dashboard).route(
        &format!("{path}/"),
        get(to_the_overview).layer(axum::middleware::from_fn(secure)),
    )
}

/// Redirects `…/ops/` (as the application's router saw it, nested or not) to `…/ops`.
async fn to_the_overview(OriginalUri(original): OriginalUri) -> Redirect {
    let path = original.path().trim_end_matches('/');
    let path = if path.is_empty() { "/" } else { path };
    match original.query() {
        Some(query) => Redirect::permanent(&format!("{path}?{query}")),
        None => Redirect::permanent(path),
    }
}

/// The `Content-Security-Policy` of every response: nothing loads and no script runs (the
/// pages' one inline style sheet aside: maud escapes every value, so no markup reaches it),
/// forms post only to the dashboard's origin, and no page may be framed.
const SECURITY_POLICY: &str = "default-src 'none'; script-src 'none'; \
     style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the headers that keep every response out of frames and run nothing in it, whatever
/// produced it (a page, a redirect, an error, a refusal).
async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What every handler needs: the administration API as the operator, and the path the
/// dashboard is mounted at (for links).
struct Console {
    admin: Admin,
    base: String,
}

impl FromRequestParts<Runtime> for Console {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, runtime: &Runtime) -> Result<Self, Infallible> {
        let admin = match parts.extensions.get::<Operator>() {
            Some(Operator(context)) => runtime.admin().context(context.clone()),
            None => runtime.admin(),
        };
        Ok(Self {
            admin,
            base: mount_point(parts),
        })
    }
}

/// The path the router is mounted at, without a trailing slash (`""` at the root).
fn mount_point(parts: &Parts) -> String {
    let inner = parts.uri.path();
    let outer = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(inner, |OriginalUri(original)| original.path());
    let base = match outer.strip_suffix(inner) {
        Some(base) => base,
        None if inner == "/" => outer,
        None => "",
    };
    base.trim_end_matches('/').to_owned()
}

/// A request that failed, as an HTML page with the status its error means.
enum Failed {
    /// An administration call failed.
    Call(Error),
    /// The page was asked for a window the charts do not have.
    Window(UnknownWindow),
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Self::Call(error)
    }
}

impl From<UnknownWindow> for Failed {
    fn from(error: UnknownWindow) -> Self {
        Self::Window(error)
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::Call(error) => {
                let (status, body) = crate::web::axum_response::status_and_body(&error);
                if status == StatusCode::INTERNAL_SERVER_ERROR {
                    tracing::error!(%error, "a dashboard request failed");
                }
                let message = body["message"].as_str().unwrap_or("internal error");
                (status, message.to_owned())
            }
            Self::Window(error) => (StatusCode::BAD_REQUEST, error.to_string()),
        };
        (status, Html(pages::failure(status, &message).into_string())).into_response()
    }
}

/// The window a page's charts show, from its query string (`?window=15m`, `1h` or `24h`;
/// the hour when there is none).
#[derive(Debug, Default, Deserialize)]
struct Shown {
    window: Option<String>,
}

impl Shown {
    fn window(&self) -> Result<Window, UnknownWindow> {
        self.window
            .as_deref()
            .map_or(Ok(Window::default()), str::parse)
    }
}

type Page = Result<Html<String>, Failed>;

async fn overview(console: Console, Query(shown): Query<Shown>) -> Page {
    let window = shown.window()?;
    let overview = console.admin.overview(10).await?;
    let activity = pages::part(console.admin.activity(window).await)?;
    let dead = pages::part(
        console
            .admin
            .dead_letters(&DeadLetterFilter::new().limit(20))
            .await,
    )?;
    Ok(Html(
        pages::overview(&console.base, &overview, &activity, &dead).into_string(),
    ))
}

async fn actor(
    console: Console,
    Path((actor_type, actor_id)): Path<(String, String)>,
    Query(shown): Query<Shown>,
) -> Page {
    let window = shown.window()?;
    let actor_id = pages::id_from_segment(actor_id);
    let details = console.admin.inspect(&actor_type, &actor_id).await?;
    let page = match details {
        Some(details) => {
            let turns = pages::part(
                console
                    .admin
                    .actor_activity(&actor_type, &actor_id, window)
                    .await,
            )?;
            pages::actor(&console.base, &details, &turns)
        }
        None => pages::missing(&console.base, &format!("{actor_type} {actor_id}")),
    };
    Ok(Html(page.into_string()))
}

/// Pauses the actor (`PAUSED`) or resumes it, then shows its page.
async fn set_paused<const PAUSED: bool>(
    console: Console,
    Path((actor_type, actor_id)): Path<(String, String)>,
) -> Result<Redirect, Failed> {
    let actor_id = pages::id_from_segment(actor_id);
    match PAUSED {
        true => console.admin.pause(&actor_type, &actor_id).await?,
        false => console.admin.resume(&actor_type, &actor_id).await?,
    };
    Ok(Redirect::to(&pages::actor_link(
        &console.base,
        &actor_type,
        &actor_id,
    )))
}

async fn message(console: Console, Path(message_id): Path<i64>) -> Page {
    let page = match console.admin.message(message_id).await? {
        Some(message) => pages::message(&console.base, &message),
        None => pages::missing(&console.base, &format!("message {message_id}")),
    };
    Ok(Html(page.into_string()))
}

/// The dead letters' filter, from the query string or the redrive form; empty fields are
/// no filter.
#[derive(Debug, Default, Deserialize)]
struct Filter {
    #[serde(default)]
    actor_type: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    error: String,
}

impl Filter {
    fn dead_letters(&self) -> DeadLetterFilter {
        let mut filter = DeadLetterFilter::new().include_retried();
        if !self.actor_type.is_empty() {
            filter = filter.actor_type(&self.actor_type);
        }
        if !self.operation.is_empty() {
            filter = filter.operation(&self.operation);
        }
        if !self.error.is_empty() {
            filter = filter.error_contains(&self.error);
        }
        filter
    }
}

async fn dead_letters(console: Console, Query(filter): Query<Filter>) -> Page {
    let letters = console.admin.dead_letters(&filter.dead_letters()).await?;
    let page = pages::dead_letters(
        &console.base,
        [&filter.actor_type, &filter.operation, &filter.error],
        &letters,
    );
    Ok(Html(page.into_string()))
}

async fn retry(console: Console, Path(message_id): Path<i64>) -> Result<Redirect, Failed> {
    let retried_as = console.admin.retry_dead_letter(message_id).await?;
    Ok(Redirect::to(&format!(
        "{}/messages/{}",
        console.base,
        retried_as.id()
    )))
}

async fn redrive(console: Console, Form(filter): Form<Filter>) -> Page {
    let redriven = console.admin.redrive(&filter.dead_letters()).await?;
    Ok(Html(
        pages::redriven(&console.base, &redriven).into_string(),
    ))
}

/// Refuses a post that does not prove it was sent by one of the dashboard's own pages,
/// before any handler runs.
async fn refuse_posts_from_elsewhere(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && !sent_by_the_dashboard(request.headers(), request.uri()) {
        let message = "This form did not come from the dashboard's own pages (the browser sent \
                       neither Sec-Fetch-Site: same-origin nor an Origin of this host); open the \
                       dashboard and use it there. Scripts use the administration API or the \
                       solid-objects command-line tool.";
        let page = pages::failure(StatusCode::FORBIDDEN, message);
        return (StatusCode::FORBIDDEN, Html(page.into_string())).into_response();
    }
    next.run(request).await
}

/// Whether the browser vouches that a page of the request's own origin sent it:
/// `Sec-Fetch-Site: same-origin` (current browsers send it, and no page can forge it), or,
/// without that header, an `Origin` whose host is the request's `Host` (its authority under
/// HTTP/2). Nothing else is proof: not a `Referer`, nor a request that carries neither
/// header.
fn sent_by_the_dashboard(headers: &HeaderMap, uri: &Uri) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let origin_host = headers
        .get(header::ORIGIN)
        .and_then(|origin| origin.to_str().ok())
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, host)| host);
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .or_else(|| uri.authority().map(|authority| authority.as_str()));
    match (origin_host, host) {
        (Some(origin_host), Some(host)) => origin_host.eq_ignore_ascii_case(host),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    header::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn only_a_post_from_the_dashboards_own_origin_is_proven() {
        let proven = |pairs: &[(&'static str, &'static str)]| {
            sent_by_the_dashboard(&headers(pairs), &Uri::from_static("/"))
        };
        assert!(!proven(&[]), "curl");
        assert!(proven(&[("sec-fetch-site", "same-origin")]));
        assert!(!proven(&[("sec-fetch-site", "none")]));
        assert!(!proven(&[("sec-fetch-site", "cross-site")]));
        assert!(!proven(&[("sec-fetch-site", "same-site")]));
        assert!(proven(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ]));
        assert!(!proven(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080"),
        ]));
        assert!(!proven(&[("origin", "null"), ("host", "127.0.0.1:8080")]));
        assert!(!proven(&[("origin", "http://127.0.0.1:8080")]), "no host");
        assert!(!proven(&[
            ("referer", "http://127.0.0.1:8080/ops"),
            ("host", "127.0.0.1:8080"),
        ]));
        let http2 = Uri::from_static("https://ops.example/dead-letters/redrive");
        let origin = headers(&[("origin", "https://ops.example")]);
        assert!(sent_by_the_dashboard(&origin, &http2));
    }
}
