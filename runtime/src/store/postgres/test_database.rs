//! Test databases on a PostgreSQL server (feature `test-support`): created empty (the
//! runtime's start migrates them), dropped with the connections still open on them.

use sqlx::{Connection, PgConnection};

use crate::error::Result;

/// Creates the empty database `name` on the server of `server_url`.
pub(crate) async fn create(server_url: &str, name: &str) -> Result<()> {
    run(server_url, &format!("CREATE DATABASE {}", quoted(name))).await
}

/// Drops the database `name`, ending the connections still open on it.
pub(crate) async fn drop(server_url: &str, name: &str) -> Result<()> {
    let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quoted(name));
    run(server_url, &drop).await
}

/// Runs `statement` on a connection of its own to the server.
async fn run(server_url: &str, statement: &str) -> Result<()> {
    let mut connection = PgConnection::connect(server_url).await?;
    sqlx::raw_sql(statement).execute(&mut connection).await?;
    connection.close().await?;
    Ok(())
}

/// An identifier quoted for PostgreSQL.
fn quoted(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}
