//! What an operator or a visitor sees: the dashboard's pages, buttons and headers, and the
//! live-seats example, in headless Chromium through chromedriver where a browser is needed.

#[path = "browser/dashboard.rs"]
mod dashboard;
#[path = "browser/live_seats.rs"]
mod live_seats;
/// The live-seats example's actor, which its web module names as `crate::show`.
#[path = "../examples/live_seats/show.rs"]
mod show;
mod support;
/// The live-seats example's pages and server-sent events.
#[path = "../examples/live_seats/web.rs"]
mod web;

/// The backend of `support::Harness::new()` in this binary: the pages are served from SQLite files.
const BACKEND: support::Backend = support::Backend::Sqlite;
