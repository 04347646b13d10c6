//! Behaviour written once and run on every backend: each file pins one behaviour, and each
//! case is an ordinary `#[tokio::test]` on a [`Harness`](crate::support::Harness), which
//! holds the database of the binary's backend (tests/sqlite.rs, tests/postgres.rs,
//! tests/mysql.rs compile this module each). A case that needs what only one backend has
//! lives under that backend's folder (tests/sqlite/, tests/postgres/), or, while it shares
//! its file's actors, returns early on the others through `support::only_on`, saying why.

mod activity;
mod admin;
mod calls;
mod delivery;
mod effect_replies;
mod effects;
pub(crate) mod expiring_reservations;
mod failures;
mod grouped_calls;
mod hostile_rows;
mod large_states;
mod lifecycle;
mod metrics;
mod misuse;
mod misuse_from_handlers;
mod ordered_jobs;
mod race_conditions;
mod reminder_batches;
mod reminders;
mod sends;
mod shutdown;
mod state_versions;
mod trace_context;
pub(crate) mod watch;
pub(crate) mod wedges;
