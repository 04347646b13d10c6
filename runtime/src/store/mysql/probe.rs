//! Whether a MySQL or MariaDB server accepts writes, for the
//! [`Failover`](crate::store::failover::Failover) that waits for the endpoint of a URL to
//! accept them again after a restart, or after a switch behind a proxy or managed endpoint.

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{Connection, MySql, MySqlConnection};

use crate::store::failover::Probe;

/// Whether the server refuses writes: a replica, or a primary set read-only during a switch.
const READ_ONLY: &str = "SELECT CAST(@@global.read_only AS SIGNED)";

impl Probe for MySql {
    const BACKEND: &'static str = "MySQL";

    async fn accepts_writes(options: &MySqlConnectOptions) -> sqlx::Result<bool> {
        let mut connection = MySqlConnection::connect_with(options).await?;
        let read_only: i64 = sqlx::query_scalar(READ_ONLY)
            .fetch_one(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok(read_only == 0)
    }
}
