//! Opening a server database within bounded time, and checking the schema it holds.
//!
//! The rule its functions obey: a runtime's first connection to a server, and then the first
//! connection of the pool it builds, are opened here under the builder's connect timeout, so
//! that a server that refuses or never answers (or answers once, then stops) fails start-up
//! with an error naming its host and port instead of leaving start-up waiting on the pool
//! (whose acquire timeout is long: turns bound their own waits). Nothing here writes.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// The longest pause between two tries of a server that refused the connection.
const MOST_BACKOFF: Duration = Duration::from_secs(1);

/// How long a pooled connection sits idle before its next acquire pings it first.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// Where a server is, as errors name it (never with the URL's password).
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// `PostgreSQL` or `MySQL`.
    pub(crate) backend: &'static str,
    /// The host, or the path of the socket.
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Endpoint {
    fn unreachable(&self, reason: String, timeout: Duration) -> Error {
        Error::Unreachable {
            backend: self.backend,
            host: self.host.clone(),
            port: self.port,
            reason,
            timeout,
        }
    }
}

/// What a store that follows its database from host to host says about the connections its
/// pool hands out.
pub(crate) trait Checkout: Send + Sync + 'static {
    /// Whether a connection opened `age` ago must not be used any more: it is to a host the
    /// pool has left.
    fn retired(&self, age: Duration) -> bool;

    /// A pooled connection turned out lost when pinged: the host may be gone.
    fn lost(self: Arc<Self>);
}

/// Opens a pool of up to `connections` connections to the server `options` name: its
/// first connection within `timeout` ([`connect_within`]), then the pool's own first
/// connection within `timeout` too ([`first_of_pool`]), which it keeps idle for start-up's
/// statements. Later acquires wait long: turns bound their own waits. With a `checkout`,
/// the pool hands out no connection it says is retired, and tells it of lost ones.
pub(crate) async fn open_pool<DB: sqlx::Database>(
    options: <DB::Connection as Connection>::Options,
    endpoint: &Endpoint,
    connections: u32,
    timeout: Duration,
    checkout: Option<Arc<dyn Checkout>>,
) -> Result<sqlx::Pool<DB>> {
    let first: DB::Connection = connect_within(&options, endpoint, timeout).await?;
    // The server answers: the pool opens its own connections from here on.
    let _ = tokio::time::timeout(timeout, first.close()).await;
    let pool = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(3600))
        // A connection in use is not pinged on every acquire (a round trip per turn): only
        // one that sat idle for a while is, and a turn whose connection turns out lost at
        // its BEGIN begins again on another (see `OwnedTransaction::begin`).
        .test_before_acquire(false)
        .before_acquire(move |connection, meta| {
            let checkout = checkout.clone();
            Box::pin(async move {
                if checkout.as_ref().is_some_and(|c| c.retired(meta.age)) {
                    return Ok(false);
                }
                if meta.idle_for >= PING_WHEN_IDLE_FOR {
                    if let Err(error) = connection.ping().await {
                        if let Some(checkout) = checkout {
                            checkout.lost();
                        }
                        return Err(error);
                    }
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options);
    first_of_pool(&pool, endpoint, timeout).await?;
    Ok(pool)
}

/// Opens the first connection of a pool built on a server that answered, within `timeout`,
/// and leaves it idle in the pool for start-up's statements: a server that answered one
/// connection and not the next fails here with [`Error::Unreachable`].
async fn first_of_pool<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<()> {
    match tokio::time::timeout(timeout, pool.acquire()).await {
        Ok(Ok(_connection)) => Ok(()),
        Ok(Err(sqlx::Error::Io(error))) => Err(endpoint.unreachable(error.to_string(), timeout)),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(endpoint.unreachable(
            "it answered a first connection, then did not answer the next".to_owned(),
            timeout,
        )),
    }
}

/// Opens one connection with `options` within `timeout`. A refused connection is tried
/// again until then (the server may be starting); a server that accepts and never answers,
/// or that refused until the end, fails with [`Error::Unreachable`], as does any other I/O
/// failure; what the server itself answers (a wrong password, say) is returned as it is.
async fn connect_within<C: Connection>(
    options: &C::Options,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<C> {
    // A timeout past what the clock can count (`Duration::MAX`) waits as long as it can,
    // a century, rather than overflowing the instant.
    let deadline = Instant::now()
        .checked_add(timeout)
        .or_else(|| Instant::now().checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or_else(Instant::now);
    let mut backoff = Duration::from_millis(10);
    loop {
        let refused = match tokio::time::timeout_at(deadline, C::connect_with(options)).await {
            Ok(Ok(connection)) => return Ok(connection),
            Ok(Err(sqlx::Error::Io(error)))
                if error.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                true
            }
            Ok(Err(sqlx::Error::Io(error))) => {
                return Err(endpoint.unreachable(error.to_string(), timeout))
            }
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => false,
        };
        if !refused || Instant::now() + backoff >= deadline {
            let reason = match refused {
                true => "it refused the connection (does anything listen on that port?)",
                false => "it did not answer",
            };
            return Err(endpoint.unreachable(reason.to_owned(), timeout));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MOST_BACKOFF);
    }
}

/// The server URL with its database replaced by `name`, its query kept (for test
/// databases).
#[cfg(feature = "test-support")]
pub(crate) fn with_database(server_url: &str, name: &str) -> Result<String> {
    let (base, query) = match server_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (server_url, None),
    };
    let authority_start = base.find("://").map(|at| at + 3).ok_or_else(|| {
        Error::Config("a test database server URL needs a scheme (postgres://..)".to_owned())
    })?;
    let host_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |at| authority_start + at);
    let mut url = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    Ok(url)
}

#[cfg(all(test, feature = "test-support"))]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_of_a_server_url_is_replaced_and_its_query_kept() {
        let url = |server: &str| with_database(server, "t1").unwrap();
        assert_eq!(
            url("postgres://u:p@h:5432/postgres"),
            "postgres://u:p@h:5432/t1"
        );
        assert_eq!(url("mysql://root@h"), "mysql://root@h/t1");
        assert_eq!(
            url("postgres://u@h/db?sslmode=disable"),
            "postgres://u@h/t1?sslmode=disable"
        );
    }
}
