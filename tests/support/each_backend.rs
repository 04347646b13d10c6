//! A database of a test's own on each backend (a SQLite file, or a server started for the
//! test alone), and the macro that declares one test per backend over a case.

use std::any::Any;
use std::path::Path;

use super::mariadb::MariaDb;
use super::postgres::PgServer;
use super::servers::path;
use super::Backend;

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
