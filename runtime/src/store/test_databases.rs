//! Databases of their own for tests on a PostgreSQL or MySQL server (feature
//! `test-support`): which server a URL names, and its backend's commands to create and drop
//! one (`postgres/test_database.rs`, `mysql/test_database.rs`), each bounded in time.

use std::future::Future;
use std::time::Duration;

use super::query::Dialect;
use crate::error::{Error, Result};

/// How long creating or dropping a test database may wait for the server.
const SERVER_WAIT: Duration = Duration::from_secs(30);

/// The server backend a test database's server URL names.
pub(crate) fn server_of(url: &str) -> Result<Dialect> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Dialect::Postgres)
    } else if url.starts_with("mysql://") {
        Ok(Dialect::MySql)
    } else {
        Err(Error::Config(
            "a test database needs a postgres:// or mysql:// server URL".to_owned(),
        ))
    }
}

/// Creates the database `name` on the server of `server_url`, ready for a runtime: empty on
/// PostgreSQL, a copy of a migrated template on MySQL.
pub(crate) async fn create(server_url: &str, name: &str) -> Result<()> {
    match server_of(server_url)? {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            within_wait(super::postgres::test_database::create(server_url, name)).await
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => within_wait(super::mysql::test_database::create(server_url, name)).await,
        server => Err(not_built(server)),
    }
}

/// Drops the database `name` on the server of `server_url`, ending the connections still
/// open on it.
pub(crate) async fn drop(server_url: &str, name: &str) -> Result<()> {
    match server_of(server_url)? {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            within_wait(super::postgres::test_database::drop(server_url, name)).await
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => within_wait(super::mysql::test_database::drop(server_url, name)).await,
        server => Err(not_built(server)),
    }
}

/// What a test database on a backend this build left out gets.
#[cfg_attr(all(feature = "postgres", feature = "mysql"), allow(dead_code))]
fn not_built(server: Dialect) -> Error {
    let feature = match server {
        Dialect::Postgres => "postgres",
        _ => "mysql",
    };
    Error::Config(format!(
        "this build has no {feature} backend: enable the solid-objects feature `{feature}`"
    ))
}

/// `work` on the test database server, within [`SERVER_WAIT`].
async fn within_wait(work: impl Future<Output = Result<()>>) -> Result<()> {
    tokio::time::timeout(SERVER_WAIT, work).await.map_err(|_| {
        Error::Config(format!(
            "the test database server did not answer within {SERVER_WAIT:?}"
        ))
    })?
}
