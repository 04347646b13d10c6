//! One HTTP request's trace across the durable boundary, exported to stdout: the request's
//! handler places an order with a synchronous call and enqueues its shipping; a worker runs
//! that message later, its turn emits a courier effect, and the effect's reply comes back to
//! the order as a message. With the `opentelemetry` feature each of them stores the W3C
//! `traceparent` of the span that caused it, and the span that takes it up continues that
//! trace, in this process or any other on the same database.
//!
//! Run it with `cargo run --example tracing`. It serves one axum route, sends it a request
//! with a `traceparent` header, prints every span as `opentelemetry-stdout` exports it, and
//! checks that the five spans (the request, the call's turn, the shipping turn, the courier
//! effect and its reply's turn) are one trace, the request's; a failed check ends the program
//! with a non-zero exit code.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Effect, EffectContext};
use tokio::net::TcpListener;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[path = "support/plain_http.rs"]
mod plain_http;

/// The trace of the client that sends the request.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// An order: placed by a synchronous call, shipped by a message a worker runs later.
#[actor]
#[derive(Default)]
pub struct Order {
    items: Vec<String>,
    tracking: Option<String>,
}

#[actor]
impl Order {
    /// Adds an item; returns how many the order holds.
    #[command]
    pub fn place(&mut self, item: String) -> usize {
        self.items.push(item);
        self.items.len()
    }

    /// Hands the order to the courier, whose tracking number comes back as a reply.
    #[command]
    pub fn ship(&mut self, turn: &mut Turn<Self>) {
        let order = turn.actor_id().to_owned();
        turn.emit(Courier { order }).on_success().shipped();
    }

    /// The courier's tracking number.
    #[reply]
    pub fn shipped(&mut self, tracking: String) {
        self.tracking = Some(tracking);
    }
}

/// The courier's pick-up of an order.
#[derive(Serialize, Deserialize)]
pub struct Courier {
    order: String,
}

impl Effect for Courier {
    const NAME: &'static str = "courier";
    type Output = String;
}

/// The request's headers, as OpenTelemetry's propagators read them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

/// `POST /orders/{id}`: in a span whose parent is the caller the `traceparent` header names,
/// places the order and enqueues its shipping.
async fn place_and_ship(
    State(runtime): State<Runtime>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<String, Error> {
    let span = tracing::info_span!("POST /orders/{id}");
    let _ = span.set_parent(TraceContextPropagator::new().extract(&Headers(&headers)));
    async move {
        let order = runtime.reference::<Order>(id);
        let items = order.place("a lamp").await?;
        order.enqueue().ship().await?;
        Ok(format!("{items} item(s), shipping"))
    }
    .instrument(span)
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every span goes to stdout as it ends, and to memory for the checks at the end; the
    // level filter keeps the database driver's DEBUG events about each statement out.
    let kept = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .with_simple_exporter(kept.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("tracing-example"));
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(layer);
    tracing::subscriber::set_global_default(subscriber)?;

    let dir = tempfile::tempdir()?;
    let runtime = Runtime::builder()
        .sqlite(dir.path().join("orders.db"))
        .policy(AllowAll)
        .actor::<Order>()
        .effect(|courier: Courier, _: EffectContext| async move {
            Ok(format!("track-{}", courier.order))
        })
        .start()
        .await?;
    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let app = Router::new()
        .route("/orders/{id}", post(place_and_ship))
        .with_state(runtime.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let traceparent = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let headers = format!("traceparent: {traceparent}\r\nContent-Length: 0\r\n");
    let answer = plain_http::request(address, "POST", "/orders/o-1", &headers).await?;
    println!("POST http://{address}/orders/o-1 (traceparent {traceparent}): {answer}");

    let order = runtime.reference::<Order>("o-1");
    let started = Instant::now();
    while order.snapshot().await?.tracking.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the order ships"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
    runtime.close().await;
    workers.await??;
    provider.force_flush()?;

    let spans = kept.get_finished_spans()?;
    let names: Vec<String> = spans.iter().map(|span| span.name.to_string()).collect();
    assert_eq!(
        names.iter().filter(|name| *name == "turn").count(),
        3,
        "place, ship and the reply each ran a turn: {names:?}"
    );
    assert_eq!(names.iter().filter(|name| *name == "effect").count(), 1);
    assert_eq!(
        spans.len(),
        5,
        "the request's span and four more: {names:?}"
    );
    for span in &spans {
        let trace_id = span.span_context.trace_id().to_string();
        assert_eq!(
            trace_id, TRACE_ID,
            "{} is in the request's trace",
            span.name
        );
    }
    println!("ok: the request, its call, the message a worker ran, the effect and its reply are one trace, {TRACE_ID}");
    provider.shutdown()?;
    Ok(())
}
