//! [`Listener`]: `LISTEN` on a connection of its own that follows the host accepting writes.
//!
//! A listener holds its connection for good, outside the pool the turns use (a pool of one
//! would have none left for turns). When that connection is lost, whatever was notified
//! meanwhile is gone, so the listener says so at once rather than reconnecting to the host
//! it knew: it tells the failover the connection was lost, waits for a host that accepts
//! writes (the same one after a restart, another after a failover), and listens there. Its
//! caller then looks for the work whose notices were lost.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgNotification, PgPool, PgPoolOptions};
use tokio::time::Instant;

use crate::error::Result;
use crate::store::failover::Failover;
use sqlx::Postgres;

/// How long a listener whose connection was lost waits for a host that accepts writes
/// before it fails (its caller tries again).
const FIND_A_HOST_WITHIN: Duration = Duration::from_secs(10);

/// `LISTEN` on one channel, on the host that accepts writes; see the module docs.
pub(super) struct Listener {
    listener: PgListener,
    channel: &'static str,
    /// The turns' pool, whose connect options name the host it uses now.
    pool: PgPool,
    failover: Arc<Failover<Postgres>>,
}

impl Listener {
    /// Listens on `channel` on the host the turns' `pool` uses now.
    pub(super) async fn start(
        pool: &PgPool,
        failover: &Arc<Failover<Postgres>>,
        channel: &'static str,
    ) -> Result<Self> {
        Ok(Self {
            listener: listen(pool, failover, channel).await?,
            channel,
            pool: pool.clone(),
            failover: Arc::clone(failover),
        })
    }

    /// The next notification; `None` once the connection was lost and the listener listens
    /// again, on the host that accepts writes now: what was notified meanwhile is gone.
    pub(super) async fn next(&mut self) -> Result<Option<PgNotification>> {
        // Without eager reconnection a lost connection is `None` at once, not a reconnect to
        // the host it knew, which may be gone for good.
        let lost = match self.listener.try_recv().await {
            Ok(Some(notification)) => return Ok(Some(notification)),
            Ok(None) => None,
            Err(error @ sqlx::Error::PoolClosed) => return Err(error.into()),
            Err(error) => Some(error),
        };
        tracing::debug!(
            ?lost,
            channel = self.channel,
            "the LISTEN connection was lost"
        );
        self.failover.suspect();
        self.failover
            .serving(Instant::now() + FIND_A_HOST_WITHIN)
            .await?;
        self.listener = listen(&self.pool, &self.failover, self.channel).await?;
        Ok(None)
    }
}

/// A listener on `channel` on the host `pool` uses now, which reports a lost connection
/// instead of reconnecting.
async fn listen(
    pool: &PgPool,
    failover: &Failover<Postgres>,
    channel: &'static str,
) -> Result<PgListener> {
    let options = (*pool.connect_options()).clone();
    let own = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(failover.per_try())
        .connect_lazy_with(options);
    let mut listener = PgListener::connect_with(&own).await?;
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    Ok(listener)
}
