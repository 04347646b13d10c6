//! Whether a PostgreSQL host accepts writes, for the [`Failover`](crate::store::failover::Failover)
//! that follows the one that does.

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Postgres};

use crate::store::failover::Probe;

/// Whether the session accepts writes: `off` on a primary, `on` on a standby (libpq's test
/// for `target_session_attrs=read-write`).
const READ_ONLY: &str = "SHOW transaction_read_only";

impl Probe for Postgres {
    const BACKEND: &'static str = "PostgreSQL";

    async fn accepts_writes(options: &PgConnectOptions) -> sqlx::Result<bool> {
        let mut connection = PgConnection::connect_with(options).await?;
        let read_only: String = sqlx::query_scalar(READ_ONLY)
            .fetch_one(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok(read_only == "off")
    }
}
