//! The behaviour cases of tests/cases/ on PostgreSQL, then what only PostgreSQL has
//! (tests/postgres/): one throwaway server for this test process (tests/support/postgres.rs),
//! a fresh database for each case. Without the server binaries outside CI, every case skips.

mod cases;
#[path = "postgres/mod.rs"]
mod only;
mod support;

/// The backend every case of this binary runs on.
const BACKEND: support::Backend = support::Backend::Postgres;
