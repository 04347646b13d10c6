//! The tests on PostgreSQL: the cases written once for both server backends (tests/servers/),
//! run through this binary's `backend`, and what only PostgreSQL has (tests/postgres/).

#[path = "postgres/administration.rs"]
mod administration;
#[path = "postgres/backend.rs"]
mod backend;
#[path = "postgres/compression.rs"]
mod compression;
#[path = "postgres/lifecycle.rs"]
mod lifecycle;
#[path = "postgres/listen_notify.rs"]
mod listen_notify;
#[path = "servers/nothing_wedges.rs"]
mod nothing_wedges;
#[path = "postgres/reminder_lookup.rs"]
mod reminder_lookup;
#[path = "servers/several_runtimes.rs"]
mod several_runtimes;
mod support;
