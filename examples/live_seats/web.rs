//! The live-seats web app: the page, the seat map as server-sent events, and the hold and
//! confirm buttons' handlers (`main.rs` serves it; `tests/browser/live_seats.rs` drives it in a
//! browser).

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::{get, post};
use axum::Router;
use solid_objects::policy::{Denied, Request};
use solid_objects::prelude::*;

use crate::show::Show;

/// The show the page opens with, and its number of seats.
pub const SHOW: &str = "opening-night";
pub const SEATS: u32 = 40;

/// Visitors may call the shows and watch them; nobody may destroy one.
pub struct Visitors;

impl Policy for Visitors {
    fn authorize_message(&self, _: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_query(&self, _: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_subscription(&self, _: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

/// The app's routes over `runtime`.
pub fn app(runtime: Runtime) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/shows/{show}/seats", get(seats))
        .route("/shows/{show}/seats/{seat}/hold", post(hold))
        .route("/shows/{show}/holds/{hold_id}/confirm", post(confirm))
        .with_state(runtime)
}

/// The page: the seat map, live.
async fn page() -> Html<String> {
    Html(include_str!("page.html").replace("{{SHOW}}", SHOW))
}

/// The seat map of a show as server-sent events: the map now, then each change.
async fn seats(
    State(runtime): State<Runtime>,
    Path(show): Path<String>,
) -> Result<impl IntoResponse, Error> {
    runtime
        .reference::<Show>(show)
        .watch_with(Show::view)
        .into_sse()
        .await
}

async fn hold(
    State(runtime): State<Runtime>,
    Path((show, seat)): Path<(String, u32)>,
) -> Result<impl IntoResponse, Error> {
    let hold = runtime.reference::<Show>(show).hold(seat).await?;
    Ok(json(&hold))
}

async fn confirm(
    State(runtime): State<Runtime>,
    Path((show, hold_id)): Path<(String, String)>,
) -> Result<impl IntoResponse, Error> {
    let seat = runtime.reference::<Show>(show).confirm(hold_id).await?;
    Ok(json(&json!({ "seat": seat })))
}

/// A JSON response.
fn json(value: &impl serde::Serialize) -> impl IntoResponse {
    let body = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    ([(header::CONTENT_TYPE, "application/json")], body)
}
