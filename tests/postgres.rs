//! The behaviour cases of tests/cases/ on PostgreSQL, then what only PostgreSQL has
//! (tests/postgres/) and the cases written once for both server backends (tests/servers/):
//! one throwaway server for this test process (tests/support/postgres.rs), a fresh database
//! for each case. Without the server binaries outside CI, every case skips.

#[path = "postgres/administration.rs"]
mod administration;
#[path = "postgres/backend.rs"]
mod backend;
mod cases;
#[path = "postgres/chart_folds.rs"]
mod chart_folds;
#[path = "servers/chart_plans.rs"]
mod chart_plans;
#[path = "postgres/compression.rs"]
mod compression;
#[path = "servers/conflicts.rs"]
mod conflicts;
#[path = "postgres/lifecycle.rs"]
mod lifecycle;
#[path = "postgres/listen_notify.rs"]
mod listen_notify;
#[path = "servers/lost_commit_answers.rs"]
mod lost_commit_answers;
#[path = "servers/migrations.rs"]
mod migrations;
#[path = "servers/nothing_wedges.rs"]
mod nothing_wedges;
#[path = "postgres/mod.rs"]
mod only;
#[path = "postgres/reminder_lookup.rs"]
mod reminder_lookup;
#[path = "servers/several_runtimes.rs"]
mod several_runtimes;
mod support;
#[path = "postgres/turn_reads.rs"]
mod turn_reads;

/// The backend every case of this binary runs on.
const BACKEND: support::Backend = support::Backend::Postgres;
