//! What the web sees: `Error` as an axum response, a watch as server-sent events, and the
//! operators' dashboard.
//!
//! The top layer: it uses the client and the operator API, and nothing below imports it.

#[cfg(feature = "axum")]
pub(crate) mod axum_response;
#[cfg(feature = "axum")]
pub(crate) mod axum_sse;
#[cfg(feature = "dashboard")]
pub mod dashboard;
