//! Test databases on a MySQL or MariaDB server (feature `test-support`): each a copy of a
//! template database that this build migrated, made in one round trip.
//!
//! Migrating a fresh database takes a DDL statement per table and index change, each its own
//! commit on the server, plus the migration lock's rows; a copy takes one `CREATE TABLE ..
//! LIKE` per table and the rows of the template's own tables (the applied migrations, the
//! wake-up bell), sent as one string. The template, `solid_template_<newest migration>`, is
//! created and migrated once per process and server (under the migration lock, so processes
//! that start at once share it), and kept on the server for the next run: a build with
//! another newest migration uses a template of its own.
//!
//! `CREATE TABLE .. LIKE` copies columns, indexes and table options, but not foreign keys,
//! triggers or views: the schema has none, and a migration that adds one must be copied here
//! too (the case that compares a copy with a migrated database fails until it is).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sqlx::mysql::{MySqlConnection, MySqlPoolOptions};
use sqlx::Connection;

use super::migration_lock::LOCK_TABLE;
use super::migrations::MIGRATIONS;
use crate::error::Result;
use crate::store::connect::with_database;

/// The templates this process migrated: each server's template name and tables.
static TEMPLATES: Mutex<Option<HashMap<String, Template>>> = Mutex::new(None);

/// A migrated template database, and the tables a copy of it takes.
#[derive(Clone)]
struct Template {
    name: String,
    tables: Vec<String>,
}

/// Creates the database `name` on the server of `server_url` as a copy of this build's
/// migrated schema.
pub(crate) async fn create(server_url: &str, name: &str) -> Result<()> {
    let template = template(server_url).await?;
    let mut copy = format!("CREATE DATABASE {}", quoted(name));
    for table in &template.tables {
        let (to, from) = (
            format!("{}.{}", quoted(name), quoted(table)),
            format!("{}.{}", quoted(&template.name), quoted(table)),
        );
        copy.push_str(&format!("; CREATE TABLE {to} LIKE {from}"));
        // The rows the migrations left (the applied versions, the wake-up bell), but not
        // the migration lock, which another process checking the template may hold now.
        if table != LOCK_TABLE {
            copy.push_str(&format!("; INSERT INTO {to} SELECT * FROM {from}"));
        }
    }
    let mut connection = MySqlConnection::connect(server_url).await?;
    let copied = sqlx::raw_sql(&copy).execute(&mut connection).await;
    if copied.is_err() {
        // A copy cut short leaves no half-made database behind.
        let drop = format!("DROP DATABASE IF EXISTS {}", quoted(name));
        let _ = sqlx::raw_sql(&drop).execute(&mut connection).await;
    }
    connection.close().await?;
    copied?;
    Ok(())
}

/// Ends the other connections using database `name` on the server of `server_url`, then
/// drops it: MySQL has no `DROP DATABASE .. FORCE`, and a connection still in a transaction
/// on the database holds a metadata lock the drop would wait for.
pub(crate) async fn drop(server_url: &str, name: &str) -> Result<()> {
    let mut connection = MySqlConnection::connect(server_url).await?;
    // MySQL and MariaDB type the id differently: read it as a signed integer on both.
    let sessions: Vec<i64> = sqlx::query_scalar(
        "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST
         WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(name)
    .fetch_all(&mut connection)
    .await?;
    for session in sessions {
        // A session that ended meanwhile is no error.
        let _ = sqlx::raw_sql(&format!("KILL CONNECTION {session}"))
            .execute(&mut connection)
            .await;
    }
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {}", quoted(name)))
        .execute(&mut connection)
        .await?;
    connection.close().await?;
    Ok(())
}

/// This build's template on the server of `server_url`, created and migrated on first use
/// in this process.
async fn template(server_url: &str) -> Result<Template> {
    let known = TEMPLATES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|templates| templates.get(server_url).cloned());
    if let Some(template) = known {
        return Ok(template);
    }
    let newest = MIGRATIONS.last().map_or(0, |migration| migration.0);
    let name = format!("solid_template_{newest}");
    let mut connection = MySqlConnection::connect(server_url).await?;
    sqlx::raw_sql(&format!("CREATE DATABASE IF NOT EXISTS {}", quoted(&name)))
        .execute(&mut connection)
        .await?;
    connection.close().await?;
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&with_database(server_url, &name)?)
        .await?;
    let migrated = super::migrations::migrate(&pool).await;
    let tables = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables
         WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
    .fetch_all(&pool)
    .await;
    pool.close().await;
    migrated?;
    let template = Template {
        name,
        tables: tables?
            .into_iter()
            .map(|super::Text(table)| table)
            .collect(),
    };
    TEMPLATES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(server_url.to_owned(), template.clone());
    Ok(template)
}

/// An identifier quoted for MySQL.
fn quoted(identifier: &str) -> String {
    format!("`{}`", identifier.replace('`', "``"))
}
