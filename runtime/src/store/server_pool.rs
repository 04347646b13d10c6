//! What the two server stores (PostgreSQL, MySQL) keep of their database alike: one pool that
//! serves turns and reads, the connections turns park between them, the failover that follows
//! the host that accepts writes, and a write transaction's owned connection.
//!
//! The rule its items obey: what a server does its own way (what runs at start, the statement
//! that begins a turn's transaction, how its `COMMIT` is sent, how it locks an actor) stays in
//! the server's folder; what is here runs alike on both.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;
use tokio::time::Instant;

use super::connect::{open_pool, Checkout, Endpoint};
use super::failover::{Failover, Host, Probe};
use super::owned_transaction::{OwnedTransaction, Parked};
use super::query::On;
use super::{Counters, SchemaMode, WriteConnection};
use crate::error::Result;
use crate::store::ErrorKinds;

/// A server database as a store reaches it: where its statements run.
pub(crate) trait Server: Probe {
    /// A connection of a write transaction, as where its statements run.
    fn on(connection: &mut Self::Connection) -> On<'_>;

    /// The pool, as where reads run; `lost` is told of a connection that turns out lost.
    fn pool_on<'e>(pool: &'e Pool<Self>, lost: &'e (dyn Fn() + Sync)) -> On<'e>;
}

/// How long the failover tries a host of an application's pool (the runtime knows no connect
/// timeout of its own there).
const CONNECT_TIMEOUT_OF_A_POOL: Duration = Duration::from_secs(2);

/// How a server store opens its database.
pub(crate) struct ServerOptions<'a> {
    /// The database's URL (PostgreSQL's multi-host form lists several hosts).
    pub(crate) url: &'a str,
    /// The most connections the pool opens.
    pub(crate) connections: u32,
    /// How long the first connection to the server, and then the pool's first, may take.
    pub(crate) connect_timeout: Duration,
    /// Whether start-up applies the migrations or checks that they were.
    pub(crate) schema: SchemaMode,
}

/// A server store's connections: its pool, the connections turns park between them, and the
/// failover that keeps the pool on the host that accepts writes.
pub(crate) struct ServerPool<DB: Server> {
    /// One pool serves turns and reads alike.
    pub(crate) readers: Pool<DB>,
    /// The connections turns leave between them, out of the pool.
    parked: Arc<Parked<DB>>,
    /// The database's hosts (or its one endpoint), and the wait for one that accepts writes.
    pub(crate) failover: Arc<Failover<DB>>,
    /// Tells the failover of a lost connection (it looks for the host again).
    lost: Box<dyn Fn() + Send + Sync>,
    /// Whether the runtime opened the pool (and so closes it), or the application did.
    owns_pool: bool,
}

impl<DB: Server> ServerPool<DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    /// Opens a pool of up to the options' `connections` connections to the host `failover`
    /// stands at, its first within their `connect_timeout`; the pool hands out no connection
    /// to a host the failover has left.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`](crate::error::Error::Unreachable) when the host does not answer
    /// within the `connect_timeout`; the server's error when it refuses.
    pub(crate) async fn open(
        failover: &Arc<Failover<DB>>,
        options: &ServerOptions<'_>,
    ) -> Result<Pool<DB>> {
        let host = failover.current();
        let endpoint = Endpoint {
            backend: DB::BACKEND,
            host: host.host.clone(),
            port: host.port,
        };
        let checkout: Arc<dyn Checkout> = Arc::clone(failover) as Arc<dyn Checkout>;
        open_pool(
            host.options.clone(),
            &endpoint,
            options.connections,
            options.connect_timeout,
            Some(checkout),
        )
        .await
    }

    /// The connections of a pool the runtime opened ([`ServerPool::open`]), which `failover`
    /// moves from host to host; closing them closes the pool.
    pub(crate) fn opened(pool: Pool<DB>, failover: Arc<Failover<DB>>) -> Self {
        Self::following(pool, failover, true)
    }

    /// The connections of an application's pool on `host`: closing them leaves it open.
    pub(crate) fn of_application(pool: Pool<DB>, host: Host<DB>) -> Self {
        let failover = Failover::new(vec![host], 0, CONNECT_TIMEOUT_OF_A_POOL);
        Self::following(pool, failover, false)
    }

    /// The connections of `pool`, which `failover` moves from host to host; closing them
    /// closes the pool only if the runtime `owns_pool`.
    fn following(pool: Pool<DB>, failover: Arc<Failover<DB>>, owns_pool: bool) -> Self {
        let parked = Arc::new(Parked::beside(&pool));
        let left_behind = Arc::clone(&parked);
        failover.follow(&pool, move || left_behind.close_all());
        let suspect = Arc::clone(&failover);
        Self {
            parked,
            readers: pool,
            failover,
            lost: Box::new(move || suspect.suspect()),
            owns_pool,
        }
    }

    /// The pool, as where reads run.
    pub(crate) fn readers(&self) -> On<'_> {
        DB::pool_on(&self.readers, &*self.lost)
    }

    /// Begins a write transaction with `statement` on a parked connection or one from the
    /// pool, once a host accepts writes, by `deadline`.
    ///
    /// # Errors
    ///
    /// [`Error::DatabaseUnavailable`](crate::error::Error::DatabaseUnavailable) when no host
    /// accepts writes, or no connection is free, by `deadline`; the server's error when the
    /// statement fails.
    pub(crate) async fn begin(
        &self,
        deadline: Instant,
        statement: String,
    ) -> Result<OwnedTransaction<DB>> {
        // While no host is known to accept writes, wait for the search (until the deadline).
        self.failover.serving(deadline).await?;
        let begun = OwnedTransaction::begin(
            &self.readers,
            Some(&self.parked),
            deadline,
            statement,
            &*self.lost,
        )
        .await;
        match begun {
            Err(error) if error.is_busy() => Err(self
                .failover
                .no_connection_by_deadline(&self.readers, error)
                .await),
            begun => begun,
        }
    }

    /// Looks for the host that accepts writes again, waiting for it until `deadline`.
    ///
    /// # Errors
    ///
    /// [`Error::DatabaseUnavailable`](crate::error::Error::DatabaseUnavailable) when none
    /// does by `deadline`.
    pub(crate) async fn reconnect(&self, deadline: Instant) -> Result<()> {
        self.failover.suspect();
        self.failover.serving(deadline).await
    }

    /// Stops following the hosts, closes the parked connections, and closes the pool if the
    /// runtime opened it.
    pub(crate) async fn close(&self) {
        self.failover.close();
        self.parked.release();
        if self.owns_pool {
            self.readers.close().await;
        }
    }
}

/// A write transaction of a server store: its connection, owned, the store's counters, and
/// what the server keeps beside them for its lock and its `COMMIT` (`E`).
pub(crate) struct ServerTransaction<DB: Server, E> {
    /// The transaction's connection, out of the pool until it ends.
    pub(crate) tx: OwnedTransaction<DB>,
    /// The store's counters.
    pub(crate) counters: Arc<Counters>,
    /// What the server keeps beside the connection (MySQL: the bounds and how it commits).
    pub(crate) own: E,
}

/// What a server's transaction knows of its own beside its connection (its bounds, the
/// server's flavor), as far as the writes traits ask.
pub(crate) trait TransactionOwn: Send {
    /// Whether the server's `DELETE` returns the rows it deleted (`RETURNING`).
    fn deletes_return_rows(&self) -> bool;
}

/// PostgreSQL's transaction keeps nothing of its own; its `DELETE` returns rows.
impl TransactionOwn for () {
    fn deletes_return_rows(&self) -> bool {
        true
    }
}

impl<DB: Server, E: TransactionOwn> WriteConnection for ServerTransaction<DB, E> {
    fn on(&mut self) -> On<'_> {
        DB::on(&mut self.tx)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn poison(&mut self) {
        self.tx.poison();
    }

    fn deletes_return_rows(&mut self) -> bool {
        self.own.deletes_return_rows()
    }
}
