//! The W3C trace context that a message, a reminder and an effect carry across the durable
//! boundary: the `traceparent` of the span that caused the row, stored with it, and made the
//! parent of the span that takes the row up later, maybe in another process.
//!
//! With the `opentelemetry` feature, [`TraceContext::current`] reads the current `tracing`
//! span's OpenTelemetry context (through `tracing-opentelemetry`), the store writes it as a
//! `traceparent` (`00-{trace id}-{span id}-{flags}`, 55 bytes) in the row's column of that
//! name, and [`TraceContext::continue_in`] sets it as the remote parent of a turn's or an
//! effect run's span. What a row holds is read back only if it is a valid `traceparent` of
//! exactly 55 bytes (lower-case hex, no all-zero id, no version `ff`): anything else is no
//! context at all, and never fails a turn; the store reads at most 56 characters of the
//! column, so a longer value is never read whole. `tracestate` is not carried.
//!
//! A parent, not a link: the span that takes the row up gets the stored context as its
//! parent, so it shares the trace id of the request that caused it, and a trace follows one
//! request through a synchronous call, a message a worker runs later, an effect and its
//! reply. (A link would start a trace of its own for each turn, and the request's trace
//! would end at the commit.) A reminder's turn continues the trace of the turn that scheduled
//! it, every occurrence of a recurring one included.
//!
//! Without the feature, [`TraceContext`] holds nothing, its methods do nothing, and the store
//! neither reads nor writes the column: the statements are those of a build without it.

/// The trace context of the span that caused a stored row; empty when there was none (no
/// span, no OpenTelemetry layer, or a build without the `opentelemetry` feature).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TraceContext {
    #[cfg(feature = "opentelemetry")]
    parent: Option<SpanIds>,
}

/// The ids of one span and its trace flags, as a `traceparent` carries them.
#[cfg(feature = "opentelemetry")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpanIds {
    trace_id: u128,
    span_id: u64,
    flags: u8,
}

/// The length of a version-00 `traceparent`, and the most bytes of one the store reads back.
#[cfg(feature = "opentelemetry")]
pub(crate) const TRACEPARENT_BYTES: usize = 55;

impl TraceContext {
    /// No context: a row that names no span.
    pub(crate) const NONE: Self = Self {
        #[cfg(feature = "opentelemetry")]
        parent: None,
    };

    /// The context of the current `tracing` span, the one a caller's or a turn's work runs in.
    pub(crate) fn current() -> Self {
        #[cfg(feature = "opentelemetry")]
        return Self::of(&tracing::Span::current());
        #[cfg(not(feature = "opentelemetry"))]
        Self::NONE
    }

    /// The context of `span`: its trace and its own id, if an OpenTelemetry layer records it.
    pub(crate) fn of(span: &tracing::Span) -> Self {
        #[cfg(feature = "opentelemetry")]
        {
            use opentelemetry::trace::TraceContextExt;
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let context = span.context();
            let span_context = context.span().span_context().clone();
            if !span_context.is_valid() {
                return Self::NONE;
            }
            Self {
                parent: Some(SpanIds {
                    trace_id: u128::from_be_bytes(span_context.trace_id().to_bytes()),
                    span_id: u64::from_be_bytes(span_context.span_id().to_bytes()),
                    flags: span_context.trace_flags().to_u8(),
                }),
            }
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            let _ = span;
            Self::NONE
        }
    }

    /// Makes `span` continue this context's trace, as a child of the span it names; a span
    /// already started, or an empty context, is left as it is.
    pub(crate) fn continue_in(self, span: &tracing::Span) {
        #[cfg(feature = "opentelemetry")]
        if let Some(ids) = self.parent {
            use opentelemetry::trace::{
                SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
            };
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let remote = SpanContext::new(
                TraceId::from_bytes(ids.trace_id.to_be_bytes()),
                SpanId::from_bytes(ids.span_id.to_be_bytes()),
                TraceFlags::new(ids.flags),
                true,
                TraceState::default(),
            );
            // A span no layer records (or one already started) keeps the parent it has.
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
        }
        #[cfg(not(feature = "opentelemetry"))]
        let _ = span;
    }
}

#[cfg(feature = "opentelemetry")]
impl TraceContext {
    /// The `traceparent` to store, `None` for an empty context.
    pub(crate) fn traceparent(self) -> Option<String> {
        self.parent.map(|ids| {
            format!(
                "00-{:032x}-{:016x}-{:02x}",
                ids.trace_id, ids.span_id, ids.flags
            )
        })
    }

    /// The context a stored `traceparent` names; empty unless `stored` is a valid one of
    /// [`TRACEPARENT_BYTES`] bytes.
    pub(crate) fn from_traceparent(stored: &str) -> Self {
        let fields: Vec<&str> = match stored.len() {
            TRACEPARENT_BYTES => stored.split('-').collect(),
            _ => Vec::new(),
        };
        let parent = match fields[..] {
            [version, trace_id, span_id, flags] if version != "ff" => hex(version, 2)
                .and(hex(trace_id, 32))
                .zip(hex(span_id, 16))
                .zip(hex(flags, 2))
                .map(|((trace_id, span_id), flags)| SpanIds {
                    trace_id,
                    span_id: u64::try_from(span_id).unwrap_or_default(),
                    flags: u8::try_from(flags).unwrap_or_default(),
                })
                .filter(|ids| ids.trace_id != 0 && ids.span_id != 0),
            _ => None,
        };
        Self { parent }
    }
}

/// `field` read as exactly `digits` lower-case hexadecimal digits (at most 32).
#[cfg(feature = "opentelemetry")]
fn hex(field: &str, digits: usize) -> Option<u128> {
    let lower_hex = |byte: u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
    if field.len() != digits || !field.bytes().all(lower_hex) {
        return None;
    }
    u128::from_str_radix(field, 16).ok()
}

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    use super::*;

    const VALID: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_valid_traceparent_reads_back_as_it_was_written() {
        let context = TraceContext::from_traceparent(VALID);
        assert_ne!(context, TraceContext::NONE);
        assert_eq!(context.traceparent().as_deref(), Some(VALID));
        assert_eq!(TraceContext::NONE.traceparent(), None);
    }

    #[test]
    fn anything_but_a_valid_traceparent_of_55_bytes_is_no_context() {
        let long = format!("{VALID}-{}", "a".repeat(10_000));
        let hostile = [
            "",
            "00",
            &long,
            // A later version's longer form is cut by the cap.
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333--01",
            "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033é-01",
        ];
        for stored in hostile {
            assert_eq!(
                TraceContext::from_traceparent(stored),
                TraceContext::NONE,
                "{stored:?}"
            );
        }
    }

    #[test]
    fn without_a_layer_the_current_span_has_no_context() {
        let span = tracing::info_span!("outside any subscriber");
        assert_eq!(TraceContext::of(&span), TraceContext::NONE);
        assert_eq!(TraceContext::current(), TraceContext::NONE);
    }
}
