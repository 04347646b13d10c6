//! Metrics on a Prometheus endpoint: the runtime records through the `metrics` facade, the
//! application picks the exporter (here `metrics-exporter-prometheus`, as a recorder only)
//! and serves its text with axum on `GET /metrics`.
//!
//! Run it with `cargo run --example metrics_prometheus`. It makes a few calls, fetches its
//! own endpoint once, prints what it got and checks that every metric is there; a failed
//! check ends the program with a non-zero exit code.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use solid_objects::metrics::{
    CALL_DURATION, MAILBOX_DEPTH, MESSAGES_COMPLETED, MESSAGES_ENQUEUED, MESSAGES_REJECTED,
    TURN_DURATION,
};
use solid_objects::prelude::*;
use tokio::net::TcpListener;

#[path = "support/plain_http.rs"]
mod plain_http;

/// A page's visits, which a visit of zero pages rejects.
#[actor]
#[derive(Default)]
pub struct Visits {
    count: u64,
}

#[actor]
impl Visits {
    /// Counts `pages` more visits.
    #[command]
    pub fn visit(&mut self, pages: u64) -> Result<u64, Rejection> {
        if pages == 0 {
            return Err(reject!(no_pages, "Visit at least one page"));
        }
        self.count += pages;
        Ok(self.count)
    }

    /// The visits so far.
    #[query]
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first, so the runtime's metrics (and their descriptions) reach it.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    // Without the exporter's own listener, the application runs its upkeep (it bounds the
    // memory of the histograms).
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });

    let dir = tempfile::tempdir()?;
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("visits.db"))
        .policy(AllowAll)
        .actor::<Visits>()
        .start()
        .await?;
    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let home = runtime.reference::<Visits>("home");
    home.visit(1).await?;
    home.visit(2).await?;
    assert!(
        home.visit(0).await.is_err(),
        "a visit of no pages is rejected"
    );
    let queued = home.enqueue().visit(3).await?;
    assert_eq!(queued.wait(Duration::from_secs(10)).await?, 6);
    assert_eq!(home.count().await?, 6);

    let app = Router::new().route(
        "/metrics",
        get(move || {
            let prometheus = prometheus.clone();
            async move { prometheus.render() }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let body = plain_http::request(address, "GET", "/metrics", "").await?;
    println!("GET http://{address}/metrics\n{body}");
    for name in [
        MESSAGES_ENQUEUED,
        MESSAGES_COMPLETED,
        MESSAGES_REJECTED,
        TURN_DURATION,
        CALL_DURATION,
        MAILBOX_DEPTH,
    ] {
        assert!(body.contains(name), "{name} is served");
    }
    let completed = format!(r#"{MESSAGES_COMPLETED}{{actor_type="Visits",operation="visit"}} 3"#);
    assert!(body.contains(&completed), "three visits completed");
    println!("ok: the runtime's metrics are served for Prometheus at /metrics");

    server.abort();
    runtime.close().await;
    workers.await??;
    Ok(())
}
