//! The operators' dashboard (feature `dashboard`): server-rendered pages over the
//! [administration API](crate::admin), as an axum [`Router`] an application mounts behind
//! its own authentication.
//!
//! - `/`: messages and effects by status, reminders and how late they are, paused actors,
//!   actor types, the busiest mailboxes, the last hour's finished messages, the newest dead
//!   letters;
//! - `/actors/{type}/{id}`: one actor's state, mailbox head, reminders, effects and recent
//!   messages, with pause and resume;
//! - `/messages/{id}`: one message (refreshing itself while it waits to run);
//! - `/dead-letters`: dead letters filtered by type, operation and error text, each with a
//!   retry button, and a redrive of every match.
//!
//! Every page and button is one or two [`Admin`] calls, so each is put to
//! [`Policy::authorize_administration`](crate::Policy::authorize_administration) (denied
//! unless the application's policy allows it) and written to the audit table. Who is asking
//! is the [`Operator`] the application's authentication middleware puts in the request's
//! extensions. Buttons post plain HTML forms (no JavaScript); a post that a browser marks as
//! coming from another site (`Sec-Fetch-Site`, or an `Origin` other than the `Host`) is
//! refused, so another site cannot make an operator's browser press them.
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
//! let app = Router::new().nest(
//!     "/ops",
//!     dashboard::router(runtime).layer(axum::middleware::from_fn(authenticate)),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await
//! # }
//! ```

mod pages;

use std::convert::Infallible;

use axum::extract::{FromRequestParts, OriginalUri, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::Value;

use crate::admin::{Admin, DeadLetterFilter};
use crate::error::Error;
use crate::runtime::Runtime;

/// Who is using the dashboard, as the application's authentication knows them: put it in
/// the request's extensions (`request.extensions_mut().insert(Operator(..))`) and the
/// dashboard hands it to the policy and the audit table as the
/// [admin context](crate::admin::Admin::context). Without it, calls carry no context.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator(pub Value);

/// The dashboard's pages and buttons over `runtime`, to mount with [`Router::nest`] (links
/// follow the path it is mounted at) behind the application's authentication.
pub fn router(runtime: Runtime) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/actors/{actor_type}/{actor_id}", get(actor))
        .route("/actors/{actor_type}/{actor_id}/pause", post(pause))
        .route("/actors/{actor_type}/{actor_id}/resume", post(resume))
        .route("/messages/{message_id}", get(message))
        .route("/dead-letters", get(dead_letters))
        .route("/dead-letters/redrive", post(redrive))
        .route("/dead-letters/{message_id}/retry", post(retry))
        .layer(axum::middleware::from_fn(refuse_cross_site_posts))
        .with_state(runtime)
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

/// A failed administration call, as an HTML page with the status the error means.
struct Failed(Error);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Self(error)
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        let (status, body) = crate::axum_response::status_and_body(&self.0);
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self.0, "a dashboard request failed");
        }
        let message = body["message"].as_str().unwrap_or("internal error");
        (status, Html(pages::failure(status, message).into_string())).into_response()
    }
}

type Page = Result<Html<String>, Failed>;

async fn overview(console: Console) -> Page {
    let overview = console.admin.overview(10).await?;
    let dead = console
        .admin
        .dead_letters(&DeadLetterFilter::new().limit(20))
        .await?;
    Ok(Html(
        pages::overview(&console.base, &overview, &dead).into_string(),
    ))
}

async fn actor(console: Console, Path((actor_type, actor_id)): Path<(String, String)>) -> Page {
    let details = console.admin.inspect(&actor_type, &actor_id).await?;
    let page = match details {
        Some(details) => pages::actor(&console.base, &details),
        None => pages::missing(&console.base, &format!("{actor_type} {actor_id}")),
    };
    Ok(Html(page.into_string()))
}

async fn pause(
    console: Console,
    Path((actor_type, actor_id)): Path<(String, String)>,
) -> Result<Redirect, Failed> {
    console.admin.pause(&actor_type, &actor_id).await?;
    Ok(Redirect::to(&pages::actor_link(
        &console.base,
        &actor_type,
        &actor_id,
    )))
}

async fn resume(
    console: Console,
    Path((actor_type, actor_id)): Path<(String, String)>,
) -> Result<Redirect, Failed> {
    console.admin.resume(&actor_type, &actor_id).await?;
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
        "{}/messages/{retried_as}",
        console.base
    )))
}

async fn redrive(console: Console, Form(filter): Form<Filter>) -> Page {
    let redriven = console.admin.redrive(&filter.dead_letters()).await?;
    Ok(Html(
        pages::redriven(&console.base, &redriven).into_string(),
    ))
}

/// Refuses a post that a browser says comes from another site, before any handler runs.
async fn refuse_cross_site_posts(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && is_cross_site(request.headers()) {
        let message =
            "This form was posted from another site; open the dashboard and use it there.";
        let page = pages::failure(StatusCode::FORBIDDEN, message);
        return (StatusCode::FORBIDDEN, Html(page.into_string())).into_response();
    }
    next.run(request).await
}

/// Whether the browser marks the request as sent by another site: `Sec-Fetch-Site` (sent by
/// current browsers) other than `same-origin` or `none`, else an `Origin` whose host is not
/// the request's `Host`. Clients that send neither (scripts, `curl`) are not browsers
/// acting for a page.
fn is_cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, host)| host);
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok());
    origin_host.is_none() || origin_host != host
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

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
    fn posts_from_another_site_are_told_apart() {
        assert!(!is_cross_site(&headers(&[])), "curl");
        assert!(!is_cross_site(&headers(&[(
            "sec-fetch-site",
            "same-origin"
        )])));
        assert!(is_cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(is_cross_site(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(!is_cross_site(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ])));
        assert!(is_cross_site(&headers(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080"),
        ])));
        assert!(is_cross_site(&headers(&[("origin", "null")])));
    }
}
