//! The tests on MySQL (MariaDB): the cases written once for both server backends
//! (tests/servers/), run through this binary's `backend`, and what only MySQL has
//! (tests/mysql/).

#[path = "mysql/backend.rs"]
mod backend;
#[path = "mysql/dialect.rs"]
mod dialect;
#[path = "servers/nothing_wedges.rs"]
mod nothing_wedges;
#[path = "servers/several_runtimes.rs"]
mod several_runtimes;
mod support;
