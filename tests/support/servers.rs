//! What the throwaway servers of tests/support/ (a lone MariaDB or PostgreSQL server, a
//! Galera cluster, a PostgreSQL primary with its standby) share: skipping where the server
//! is not installed, free loopback ports, paths as text, and names for new databases. It
//! imports nothing else of tests/support/, so runtime/tests/cli.rs includes it by path.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::Connection;

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
