//! What the throwaway servers of tests/support/ (a lone MariaDB or PostgreSQL server, a
//! Galera cluster, a PostgreSQL primary with its standby) share: skipping where the server
//! is not installed, free loopback ports, paths as text, and names for new databases; and a
//! database on a server of a test's own, whichever backend.

use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::Connection;

use super::mariadb::MariaDb;
use super::postgres::PgServer;
use super::Backend;

/// Says that the test skips because `missing` (why no server can start here) and returns
/// `None`; under CI (`CI` set) a missing server panics instead.
pub fn skipped<T>(missing: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "{missing}");
    eprintln!("skipped: {missing}");
    None
}

/// A name no other database of this machine's test processes has: `prefix`, this process's
/// id and a number of this process's own.
pub fn database_name(prefix: &str) -> String {
    static DATABASES: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    )
}

/// `path` as text (temp paths are UTF-8).
pub fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

/// Creates the empty database `name` through `server`, a URL of the server's own database
/// (`postgres` on PostgreSQL, none on MariaDB).
pub async fn create_database(server: &str, name: &str) {
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(server)
        .await
        .expect("the server accepts connections");
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("CREATE DATABASE");
    let _ = admin.close().await;
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// A fresh database of the test's own on `backend`: a SQLite file in `dir`, or a database on
/// a server started for the test alone (stopped once the returned handle is dropped); what
/// a runtime or a child process opens it by (the file's path or the database's URL), and the
/// handle. `None` (the test skips) where that server is not installed, outside CI.
pub async fn own_database(backend: Backend, dir: &Path) -> Option<(String, Box<dyn Any>)> {
    match backend {
        Backend::Sqlite => Some((path(&dir.join("actors.db")).to_owned(), Box::new(()))),
        Backend::Postgres => {
            let server = PgServer::start()?;
            Some((server.database().await, Box::new(server)))
        }
        Backend::MariaDb => {
            let server = MariaDb::start()?;
            Some((server.database().await, Box::new(server)))
        }
    }
}

/// Declares a test per backend, each `test => case(Backend, more arguments)` an async test
/// (on two worker threads) that awaits `case` on that backend; for the cases that run on a
/// database of their own on each backend ([`own_database`]).
#[allow(unused_macros)] // only the process tests declare their tests with it
macro_rules! test_on_each_backend {
    ($($test:ident => $case:ident($backend:ident $(, $argument:expr)*)),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $case($crate::support::Backend::$backend $(, $argument)*).await;
            }
        )+
    };
}

#[allow(unused_imports)] // as the macro
pub(crate) use test_on_each_backend;
