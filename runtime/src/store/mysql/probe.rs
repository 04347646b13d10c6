//! Whether a MySQL or MariaDB server accepts writes, for the
//! [`Failover`](crate::store::failover::Failover) that waits for the endpoint of a URL to
//! accept them again after a restart, or after a switch behind a proxy or managed endpoint.

use sqlx::mysql::MySqlConnectOptions;
use sqlx::MySql;

use crate::store::failover::{read_on_fresh_connection, Probe};

/// Whether the server refuses writes: a replica, or a primary set read-only during a switch.
const READ_ONLY: &str = "SELECT CAST(@@global.read_only AS SIGNED)";

impl Probe for MySql {
    const BACKEND: &'static str = "MySQL";

    async fn accepts_writes(options: &MySqlConnectOptions) -> sqlx::Result<bool> {
        let read_only: i64 = read_on_fresh_connection::<Self, _>(options, READ_ONLY).await?;
        Ok(read_only == 0)
    }
}
