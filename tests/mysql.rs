//! The behaviour cases of tests/cases/ on the MySQL store, against MariaDB: one throwaway
//! server for this test process (tests/support/mariadb.rs), a fresh database for each case.
//! Without `mariadbd` outside CI, every case skips.

mod cases;
mod support;

/// The backend every case of this binary runs on.
const BACKEND: support::Backend = support::Backend::MariaDb;
