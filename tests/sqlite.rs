//! The behaviour cases of tests/cases/ on SQLite files, then what only SQLite has
//! (tests/sqlite/): group commit, the file itself, its PRAGMAs.

mod cases;
#[path = "sqlite/mod.rs"]
mod only;
mod support;

/// The backend every case of this binary runs on.
const BACKEND: support::Backend = support::Backend::Sqlite;
