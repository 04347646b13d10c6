//! What needs no backend matrix: which runtime a reference reaches without naming one, the
//! misuse the compiler or the runtime refuses, and what the prelude's derives produce. Each
//! module is one behaviour; any database a test needs is a SQLite file of its own.

#[path = "api/default_runtime.rs"]
mod default_runtime;
#[path = "api/readme.rs"]
mod readme;
#[path = "api/rejection_details.rs"]
mod rejection_details;
mod support;
#[path = "api/unreachable_servers.rs"]
mod unreachable_servers;

/// The backend of `support::Harness::new()` in this binary: a test that needs a database uses a SQLite file of its own.
const BACKEND: support::Backend = support::Backend::Sqlite;
