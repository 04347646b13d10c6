//! Spans as an OpenTelemetry exporter receives them: a tracer provider that keeps every
//! finished span in memory (the SDK's `InMemorySpanExporter`), behind a `tracing` subscriber
//! with the `tracing-opentelemetry` layer, made the current thread's subscriber by a case.
//!
//! A case runs on a current-thread runtime, so the runtime's turns and effect tasks run on
//! the thread whose subscriber it set, and no other case's spans reach its exporter.
//!
//! `tracing` caches, per callsite, whether any subscriber wants it, when the callsite is first
//! reached. While a single subscriber is registered in the process it asks only the subscriber
//! of the thread that got there first: another case's thread, without one, reaching `turn`
//! before this case would hide every turn of this case. A second subscriber that lives as
//! long as the process ([`keep_every_subscriber_asked`]) makes it ask every live one.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// A tracer provider whose finished spans stay in memory, and the subscriber that feeds it.
pub struct Telemetry {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    dispatch: tracing::Dispatch,
}

/// One finished span, as a case compares them: its name, what it ran, its trace and its
/// parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// `turn`, `effect`, or a span of the case's own.
    pub name: String,
    /// A turn's `messaging.operation.name`, an effect's kind, `-` for any other span.
    pub operation: String,
    pub trace_id: String,
    pub span_id: String,
    /// The parent's span id, `0000000000000000` for a root.
    pub parent_id: String,
}

impl Finished {
    fn of(span: &SpanData) -> Self {
        let attribute = |key: &str| {
            span.attributes
                .iter()
                .find(|attribute| attribute.key.as_str() == key)
                .map(|attribute| attribute.value.as_str().into_owned())
        };
        Self {
            name: span.name.to_string(),
            operation: attribute("messaging.operation.name")
                .or_else(|| attribute("effect"))
                .unwrap_or_else(|| "-".to_owned()),
            trace_id: span.span_context.trace_id().to_string(),
            span_id: span.span_context.span_id().to_string(),
            parent_id: span.parent_span_id.to_string(),
        }
    }

    /// The span as one line of text, for a child process to hand its spans to its parent.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.name, self.operation, self.trace_id, self.span_id, self.parent_id
        )
    }

    /// A span from its [`line`](Self::line).
    pub fn parse(line: &str) -> Self {
        let fields: Vec<&str> = line.split(' ').collect();
        let [name, operation, trace_id, span_id, parent_id] = fields[..] else {
            panic!("a span's line has five fields: {line:?}");
        };
        Self {
            name: name.to_owned(),
            operation: operation.to_owned(),
            trace_id: trace_id.to_owned(),
            span_id: span_id.to_owned(),
            parent_id: parent_id.to_owned(),
        }
    }

    /// Whether the span has no parent.
    pub fn is_root(&self) -> bool {
        self.parent_id == SpanId::INVALID.to_string()
    }
}

impl Telemetry {
    /// A provider that exports each span as it ends into memory.
    pub fn new() -> Self {
        keep_every_subscriber_asked();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("tests"));
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        Self {
            exporter,
            provider,
            dispatch,
        }
    }

    /// Makes this the current thread's subscriber until the guard drops.
    pub fn enter(&self) -> tracing::dispatcher::DefaultGuard {
        tracing::dispatcher::set_default(&self.dispatch)
    }

    /// The spans that ended so far, in the order they ended.
    pub fn finished(&self) -> Vec<Finished> {
        self.provider.force_flush().expect("the spans are flushed");
        let spans = self.exporter.get_finished_spans().expect("the spans read");
        spans.iter().map(Finished::of).collect()
    }

    /// The spans that ended, once a span named `name` is among them, or as they are after 10
    /// seconds: a span ends when its last handle is dropped, and the SQLite driver's worker
    /// thread holds the span that was current when a statement was sent until a moment after
    /// it answered (a request's span can end after the request's response).
    pub async fn finished_with(&self, name: &str) -> Vec<Finished> {
        self.finished_once(|spans| spans.iter().any(|span| span.name == name))
            .await
    }

    /// The spans that ended, once `done` says they are all there, or as they are after 10
    /// seconds (see [`finished_with`](Self::finished_with)).
    pub async fn finished_once(&self, done: impl Fn(&[Finished]) -> bool) -> Vec<Finished> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let spans = self.finished();
            if done(&spans) || std::time::Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// Registers, once per process, a subscriber that never goes away and wants nothing, so that
/// `tracing` decides whether a callsite is wanted by asking every live subscriber, never only
/// the current thread's (which it does while one subscriber alone is registered).
fn keep_every_subscriber_asked() {
    static FOR_EVER: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    FOR_EVER.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}

/// A span named `name` whose parent is the caller that `traceparent` (a W3C header's value)
/// names, as an HTTP server's request span would be: a root of a new trace when the header
/// is not a valid one.
pub fn request_span(name: &'static str, traceparent: &str) -> tracing::Span {
    let span = tracing::info_span!("request", http.route = name);
    let caller = TraceContextPropagator::new().extract(&Traceparent(traceparent));
    let _ = span.set_parent(caller);
    span
}

/// A carrier that holds only a `traceparent` header.
struct Traceparent<'a>(&'a str);

impl Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}
