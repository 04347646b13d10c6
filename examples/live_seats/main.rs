//! Live seats: a show's seat map in the browser, with the seats left updated live over
//! server-sent events while anyone holds or buys a seat.
//!
//! `cargo run --example live_seats`, then open <http://127.0.0.1:3000> (in two windows, to
//! see one window's holds appear in the other). It listens on 127.0.0.1 only;
//! `LIVE_SEATS_PORT` picks another port. The actors live in a SQLite file in a temporary
//! directory, removed when the program ends (Ctrl-C).
//!
//! - `GET /`: the page.
//! - `GET /shows/{show}/seats`: the seat map as server-sent events (`Watch::into_sse`): the
//!   current map, then the map after every commit that changes it.
//! - `POST /shows/{show}/seats/{seat}/hold`: holds a seat for two minutes; answers
//!   `{"hold_id", "expires_at"}`.
//! - `POST /shows/{show}/holds/{hold_id}/confirm`: buys the seat a hold keeps; answers
//!   `{"seat"}`.
//!
//! Errors are HTTP statuses (solid-objects' `Error` is an axum response): a seat already
//! taken or a hold that expired is 409 with the rejection's code and message, an id the
//! runtime refuses is 400, a call that waited too long 504.

mod show;

use std::net::{Ipv4Addr, SocketAddr};

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::{get, post};
use axum::Router;
use solid_objects::policy::{Denied, Request};
use solid_objects::prelude::*;

use show::Show;

/// The show the page opens with, and its number of seats.
const SHOW: &str = "opening-night";
const SEATS: u32 = 40;

/// Visitors may call the shows and watch them; nobody may destroy one.
struct Visitors;

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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("shows.db"))
        .policy(Visitors)
        .actor::<Show>()
        .start()
        .await?;
    runtime.reference::<Show>(SHOW).open(SEATS).await?;
    // The workers free the seats of holds that run out.
    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let app = Router::new()
        .route("/", get(page))
        .route("/shows/{show}/seats", get(seats))
        .route("/shows/{show}/seats/{seat}/hold", post(hold))
        .route("/shows/{show}/holds/{hold_id}/confirm", post(confirm))
        .with_state(runtime.clone());
    let port = match std::env::var("LIVE_SEATS_PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 3000,
    };
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("live seats: open http://{address} (Ctrl-C to stop)");
    axum::serve(listener, app)
        .with_graceful_shutdown({
            let runtime = runtime.clone();
            async move {
                let _ = tokio::signal::ctrl_c().await;
                // Ends the watches, so the open event streams close and the server can stop.
                runtime.shutdown();
            }
        })
        .await?;
    workers.await??;
    runtime.close().await;
    Ok(())
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
