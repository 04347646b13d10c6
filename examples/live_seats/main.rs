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
mod web;

use std::net::{Ipv4Addr, SocketAddr};

use solid_objects::prelude::*;

use show::Show;
use web::{Visitors, SEATS, SHOW};

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

    let app = web::app(runtime.clone());
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
