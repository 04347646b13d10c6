//! The behaviour cases of tests/cases/ on the MySQL store against MariaDB, then what only
//! MySQL has (tests/mysql/) and the cases written once for both server backends
//! (tests/servers/): one throwaway server for this test process (tests/support/mariadb.rs),
//! a fresh database for each case. Without `mariadbd` outside CI, every case skips.

#[path = "mysql/backend.rs"]
mod backend;
mod cases;
#[path = "servers/chart_plans.rs"]
mod chart_plans;
#[path = "servers/conflicts.rs"]
mod conflicts;
#[path = "mysql/dialect.rs"]
mod dialect;
#[path = "mysql/galera.rs"]
mod galera;
#[path = "servers/lost_commit_answers.rs"]
mod lost_commit_answers;
#[path = "servers/migrations.rs"]
mod migrations;
#[path = "servers/nothing_wedges.rs"]
mod nothing_wedges;
#[path = "servers/several_runtimes.rs"]
mod several_runtimes;
mod support;

/// The backend every case of this binary runs on.
const BACKEND: support::Backend = support::Backend::MariaDb;
