//! Whether a PostgreSQL host accepts writes, for the [`Failover`](crate::store::failover::Failover)
//! that follows the one that does.

use sqlx::postgres::PgConnectOptions;
use sqlx::Postgres;

use crate::store::failover::{read_on_fresh_connection, Probe};

/// Whether the session accepts writes: `off` on a primary, `on` on a standby (libpq's test
/// for `target_session_attrs=read-write`).
const READ_ONLY: &str = "SHOW transaction_read_only";

impl Probe for Postgres {
    const BACKEND: &'static str = "PostgreSQL";

    async fn accepts_writes(options: &PgConnectOptions) -> sqlx::Result<bool> {
        let read_only: String = read_on_fresh_connection::<Self, _>(options, READ_ONLY).await?;
        Ok(read_only == "off")
    }
}
