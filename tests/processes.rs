//! Several OS processes on one database: a worker killed with SIGKILL mid-turn or mid-effect,
//! a process killed while a group of calls shares one open transaction,
//! the soak that kills workers every two seconds, the soak through a PostgreSQL failover,
//! the soak through a MariaDB primary restarted and then replaced behind one endpoint, the
//! soak over a three-node Galera cluster that loses a node, and one HTTP request's trace
//! through a worker in another process. Each module re-runs this
//! binary as its child processes (selecting one function by its full name) and runs on
//! SQLite, PostgreSQL and MariaDB.

#[path = "processes/chains_across_processes.rs"]
mod chains_across_processes;
#[path = "processes/chaos.rs"]
mod chaos;
#[path = "processes/crash.rs"]
mod crash;
#[path = "processes/crashed_groups.rs"]
mod crashed_groups;
#[path = "processes/failover.rs"]
mod failover;
#[path = "processes/galera.rs"]
mod galera;
#[path = "processes/mariadb_outage.rs"]
mod mariadb_outage;
mod support;
#[path = "processes/trace_context.rs"]
mod trace_context;

/// The backend of `support::Harness::new()` in this binary: a test that names no backend runs on a SQLite file.
const BACKEND: support::Backend = support::Backend::Sqlite;
