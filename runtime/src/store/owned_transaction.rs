//! [`OwnedTransaction`]: a transaction that owns its pooled connection and leaves it clean
//! whatever happens to the future that uses it.
//!
//! Every `.await` is a cancel point: a caller's future can be dropped while the transaction
//! begins, runs a statement or commits. sqlx's own `Transaction` is created only once
//! `BEGIN` has finished, so a future dropped in between leaves a connection inside a
//! transaction that nobody owns (on SQLite, the single writer stays inside
//! `BEGIN IMMEDIATE` and every later turn fails). Here the connection is owned from before
//! `BEGIN` to after `COMMIT`, and dropping the transaction in any state is safe:
//!
//! - open, in a known state: the rollback is queued on the connection (as sqlx does), which
//!   then returns to the pool; on PostgreSQL the queued rollback is sent only when the pool's
//!   return task runs, so its locks outlive the drop by a task switch: code that is done
//!   with a transaction and goes on calls [`OwnedTransaction::rollback`] instead;
//! - beginning, ending, or poisoned (a savepoint failed, a handler was abandoned): the
//!   connection's state is unknown, so it is closed instead of reused; closing rolls back
//!   whatever it held, and the pool opens a fresh one.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool, TransactionManager};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Result;

/// Where an [`OwnedTransaction`] stands, and so what dropping it must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `BEGIN` was (or may have been) sent and has not answered.
    Beginning,
    /// Inside the transaction, in a state the database reported.
    Open,
    /// `COMMIT` or `ROLLBACK` was (or may have been) sent and has not answered.
    Ending,
    /// Committed: nothing to undo.
    Done,
    /// In a state nobody knows: never reuse the connection.
    Poisoned,
}

/// Where a MySQL transaction's `COMMIT` goes among the statements sent with it.
#[cfg(feature = "mysql")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitPacket {
    /// In one multi-statement string with the statements before and after it: one round
    /// trip.
    Shared,
    /// First in a string of its own, after the statements before it: a MariaDB Galera node
    /// whose applier aborts a transaction (for a write another node committed first)
    /// reports that abort only to the client's next command, so a `COMMIT` behind other
    /// statements in one string may meet no transaction, commit nothing and answer success.
    Leading,
}

/// A transaction on a pooled connection it owns; see the module docs.
pub(crate) struct OwnedTransaction<DB: Database> {
    /// Always there until the transaction is dropped, which gives it back.
    connection: Option<PoolConnection<DB>>,
    /// Where a connection left clean goes back to, if not to the pool.
    parked: Option<Arc<Parked<DB>>>,
    phase: Phase,
    /// Close the connection, rather than queue a rollback, if the transaction is dropped
    /// while open: see [`OwnedTransaction::close_if_abandoned`].
    close_if_abandoned: bool,
}

impl<DB: Database> OwnedTransaction<DB> {
    /// Takes a connection (a parked one, or one from the pool, waiting for it until
    /// `deadline`) and begins with `statement`.
    ///
    /// The pool does not ping a connection that was in use a moment ago, and a parked one is
    /// not pinged at all, so a lost connection (a server that restarted) shows at `BEGIN`,
    /// which has done nothing yet: that connection is closed (and `lost` is told) and the
    /// transaction begins on another, as many times as the pool has connections (plus one).
    pub(crate) async fn begin(
        pool: &Pool<DB>,
        parked: Option<&Arc<Parked<DB>>>,
        deadline: Instant,
        statement: String,
        lost: &(dyn Fn() + Sync),
    ) -> Result<Self>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    {
        let mut tries = pool.options().get_max_connections();
        loop {
            match Self::begin_once(pool, parked, deadline, statement.clone()).await {
                Err(crate::error::Error::Database(error))
                    if tries > 0 && super::errors::is_connection_lost(&error) =>
                {
                    tracing::debug!(%error, "a pooled connection was lost; beginning on another");
                    lost();
                    tries -= 1;
                }
                begun => return begun,
            }
        }
    }

    /// One try of [`begin`](Self::begin) on one connection.
    async fn begin_once(
        pool: &Pool<DB>,
        parked: Option<&Arc<Parked<DB>>>,
        deadline: Instant,
        statement: String,
    ) -> Result<Self>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    {
        let connection = match parked.and_then(|parked| parked.take()) {
            Some(connection) => connection,
            None => {
                // While it waits, connections that transactions leave go back to the pool.
                let _waiting = parked.map(|parked| parked.wait_for_the_pool());
                match tokio::time::timeout_at(deadline, pool.acquire()).await {
                    Ok(connection) => connection?,
                    Err(_) => return Err(sqlx::Error::PoolTimedOut.into()),
                }
            }
        };
        let mut transaction = Self {
            connection: Some(connection),
            parked: parked.cloned(),
            phase: Phase::Beginning,
            close_if_abandoned: false,
        };
        let connection = transaction.live();
        let begun = if DB::TransactionManager::get_transaction_depth(connection) > 0 {
            // A parked connection whose transaction ended by statements of ours (MySQL's): sqlx
            // still counts one, which this transaction now is.
            sqlx::Executor::execute(&mut **connection, statement.as_str())
                .await
                .map(drop)
        } else {
            DB::TransactionManager::begin(connection, Some(Cow::Owned(statement))).await
        };
        match begun {
            Ok(()) => {
                transaction.phase = Phase::Open;
                Ok(transaction)
            }
            Err(error) => {
                // SQLite's BEGIN, refused as busy, leaves no transaction behind. Anything
                // else leaves the connection in doubt, as does a server's BEGIN string
                // refused part-way (MySQL's sets the session's bounds and `autocommit`
                // before a `START TRANSACTION` whose causal wait on Galera can run out).
                if DB::NAME == "SQLite"
                    && DB::TransactionManager::get_transaction_depth(transaction.live()) == 0
                    && super::errors::is_busy(&error)
                {
                    transaction.phase = Phase::Done;
                }
                Err(error.into())
            }
        }
    }

    /// Commits. If this future is dropped before the database answers, the connection is
    /// closed rather than reused.
    pub(crate) async fn commit(mut self) -> Result<()> {
        self.phase = Phase::Ending;
        DB::TransactionManager::commit(self.live()).await?;
        self.phase = Phase::Done;
        Ok(())
    }

    /// Runs `before`, commits, then runs `after` (`before` and `after` put back the session
    /// settings the transaction's `BEGIN` changed: MySQL has no settings that end with a
    /// transaction), in the round trips `packet` says. If this future is dropped before the
    /// database answers, or any statement fails, the connection is closed rather than
    /// reused; an error means nothing was committed, or (as with
    /// [`commit`](OwnedTransaction::commit)) that the `COMMIT` itself failed.
    #[cfg(feature = "mysql")]
    pub(crate) async fn commit_around(
        self,
        before: &str,
        after: &str,
        packet: CommitPacket,
    ) -> Result<()>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    {
        self.end_around(before, "COMMIT", after, packet).await
    }

    /// Runs `before`, rolls back, then runs `after`, in one round trip, as
    /// [`commit_around`](OwnedTransaction::commit_around) commits.
    #[cfg(feature = "mysql")]
    pub(crate) async fn rollback_around(self, before: &str, after: &str) -> Result<()>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    {
        if self.phase != Phase::Open {
            // Poisoned: dropping closes the connection, which rolls back.
            return Ok(());
        }
        self.end_around(before, "ROLLBACK", after, CommitPacket::Shared)
            .await
    }

    /// Ends the transaction with `end` (`COMMIT` or `ROLLBACK`) between `before` and `after`,
    /// as multi-statement strings (MySQL's text protocol runs one's statements in order and
    /// stops at the first that fails): one string, or with [`CommitPacket::Leading`] `before`
    /// and then `end` leading `after`.
    ///
    /// sqlx's transaction depth still counts the transaction afterwards (its transaction
    /// manager ends one only with a statement of its own, and a handler that begins a
    /// transaction on the turn's connection gets a savepoint only while it counts one): a
    /// parked connection keeps that count for the next transaction that begins on it, and
    /// one given back to the pool queues sqlx's rollback, which the pool's check of the
    /// returned connection sends, outside any transaction, where it does nothing.
    #[cfg(feature = "mysql")]
    async fn end_around(
        mut self,
        before: &str,
        end: &str,
        after: &str,
        packet: CommitPacket,
    ) -> Result<()>
    where
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    {
        self.phase = Phase::Ending;
        match packet {
            CommitPacket::Shared => {
                let statements = format!("{before}; {end}; {after}");
                sqlx::Executor::execute(&mut **self.live(), statements.as_str()).await?;
            }
            CommitPacket::Leading => {
                sqlx::Executor::execute(&mut **self.live(), before).await?;
                let statements = format!("{end}; {after}");
                sqlx::Executor::execute(&mut **self.live(), statements.as_str()).await?;
            }
        }
        self.phase = Phase::Done;
        Ok(())
    }

    /// Rolls back now, releasing the transaction's locks before this returns. If this future
    /// is dropped before the database answers, the connection is closed rather than reused.
    pub(crate) async fn rollback(mut self) -> Result<()> {
        if self.phase != Phase::Open {
            // Poisoned: dropping closes the connection, which rolls back.
            return Ok(());
        }
        self.phase = Phase::Ending;
        DB::TransactionManager::rollback(self.live()).await?;
        self.phase = Phase::Done;
        Ok(())
    }

    /// Closes the connection if the transaction is dropped while open, as if it were
    /// poisoned. sqlx's MySQL connection can lose its place in the protocol when a
    /// statement's future is dropped, and the pool's check of a returned connection then
    /// waits for a reply that never comes, holding a pool slot for good; a closed connection
    /// holds nothing, and the server rolls its transaction back.
    #[cfg(feature = "mysql")]
    pub(crate) fn close_if_abandoned(mut self) -> Self {
        self.close_if_abandoned = true;
        self
    }

    /// Marks the connection as in an unknown state: it is closed when this is dropped.
    pub(crate) fn poison(&mut self) {
        self.phase = Phase::Poisoned;
    }
}

impl<DB: Database> OwnedTransaction<DB> {
    /// The connection, there from `begin` until the transaction is dropped.
    fn live(&mut self) -> &mut PoolConnection<DB> {
        self.connection
            .as_mut()
            .expect("a transaction's connection is there until it is dropped")
    }
}

impl<DB: Database> Deref for OwnedTransaction<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        self.connection
            .as_deref()
            .expect("a transaction's connection is there until it is dropped")
    }
}

impl<DB: Database> DerefMut for OwnedTransaction<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.live()
    }
}

impl<DB: Database> Drop for OwnedTransaction<DB> {
    fn drop(&mut self) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        match self.phase {
            Phase::Done => {
                let unparked = match &self.parked {
                    Some(parked) => parked.put(connection),
                    None => Some(connection),
                };
                if let Some(mut pooled) = unparked {
                    to_the_pool(&mut pooled);
                }
            }
            Phase::Open if !self.close_if_abandoned => {
                DB::TransactionManager::start_rollback(&mut connection);
            }
            Phase::Open | Phase::Beginning | Phase::Ending | Phase::Poisoned => {
                connection.close_on_drop();
            }
        }
    }
}

/// Connections a store keeps between its transactions, out of the pool: a transaction that
/// ended cleanly leaves its connection here, and the next one takes it without the pool's
/// acquire, or the ping sqlx's pool sends every connection it takes back (a round trip per
/// turn).
///
/// At most half the pool's connections wait here, and none for longer than [`PARK_FOR`]:
/// the rest go back to the pool as before, and so do these once the store is idle, so that
/// reads and the application, which take theirs from the pool, find them there. None is
/// parked while a transaction waits for the pool: it would wait behind every later
/// transaction that finds a parked one. A parked connection the server closed meanwhile
/// shows at the next `BEGIN`, which begins again on another. Dropped, it gives its
/// connections back to the pool, ready for any caller.
pub(crate) struct Parked<DB: Database> {
    connections: Arc<Mutex<ParkedConnections<DB>>>,
    capacity: usize,
    /// Transactions waiting for a connection from the pool.
    waiting: Arc<AtomicUsize>,
    /// Set when the store closes: no connection is parked from then on.
    released: AtomicBool,
}

// Only the servers' stores park connections; a SQLite-only build still compiles the type.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
impl<DB: Database> Parked<DB> {
    /// Room for half of `pool`'s connections (none for a pool of one).
    pub(crate) fn beside(pool: &Pool<DB>) -> Self {
        let capacity = usize::try_from(pool.options().get_max_connections() / 2).unwrap_or(0);
        Self {
            connections: Arc::new(Mutex::new(ParkedConnections {
                idle: Vec::with_capacity(capacity),
                sweeping: false,
                sweeper: None,
            })),
            capacity,
            waiting: Arc::default(),
            released: AtomicBool::new(false),
        }
    }

    /// The connection parked last, if any.
    fn take(&self) -> Option<PoolConnection<DB>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .idle
            .pop()
            .map(|(connection, _)| connection)
    }

    /// Counts a transaction waiting for the pool until the guard is dropped.
    fn wait_for_the_pool(&self) -> WaitingForThePool {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        WaitingForThePool(Arc::clone(&self.waiting))
    }

    /// Parks a clean connection, or hands it back (for the pool) when there is no room or a
    /// transaction waits for the pool.
    fn put(&self, connection: PoolConnection<DB>) -> Option<PoolConnection<DB>> {
        if self.released.load(Ordering::Acquire) || self.waiting.load(Ordering::Acquire) > 0 {
            return Some(connection);
        }
        // The sweep that gives idle connections back runs on Tokio.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Some(connection);
        };
        let mut connections = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if connections.idle.len() >= self.capacity {
            return Some(connection);
        }
        connections.idle.push((connection, Instant::now()));
        // A sweep whose Tokio runtime ended (a `block_on` that returned) ended with it; one
        // being started (no handle yet) has not.
        let sweep_ended = connections
            .sweeper
            .as_ref()
            .is_some_and(JoinHandle::is_finished);
        if connections.sweeping && !sweep_ended {
            return None;
        }
        connections.sweeping = true;
        connections.sweeper = None;
        drop(connections);
        // Spawned with the lock released: a runtime shutting down drops the sweep at once,
        // and its `GivesBack` takes the lock to give the parked connections back.
        let sweeper = runtime.spawn(sweep(GivesBack(Arc::downgrade(&self.connections))));
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sweeper = Some(sweeper);
        None
    }

    /// Closes every parked connection (they are to a host the pool has left).
    pub(crate) fn close_all(&self) {
        for mut connection in self.drain() {
            connection.close_on_drop();
        }
    }

    /// Takes every parked connection.
    fn drain(&self) -> Vec<PoolConnection<DB>> {
        let idle = std::mem::take(
            &mut self
                .connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .idle,
        );
        idle.into_iter().map(|(connection, _)| connection).collect()
    }

    /// Gives every parked connection back to the pool, and every later one too: before the
    /// pool closes, which waits for every connection taken from it.
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::Release);
        for mut connection in self.drain() {
            to_the_pool(&mut connection);
        }
    }
}

impl<DB: Database> Drop for Parked<DB> {
    fn drop(&mut self) {
        self.release();
    }
}

/// How long a connection stays parked with no transaction taking it.
const PARK_FOR: Duration = Duration::from_millis(20);

/// The parked connections, each with when it was parked, and the sweep that gives them back.
struct ParkedConnections<DB: Database> {
    idle: Vec<(PoolConnection<DB>, Instant)>,
    /// Set while a sweep is under way; its task clears it when it has nothing left to do.
    sweeping: bool,
    /// The sweep's task, which may also have ended with the Tokio runtime it ran on; `None`
    /// while it is being spawned.
    sweeper: Option<JoinHandle<()>>,
}

/// Gives back to the pool each connection parked for [`PARK_FOR`], until none is parked (or
/// the store is gone).
///
/// A sweep whose Tokio runtime ends (a `block_on` that returns), even before its first poll,
/// gives back as its task is dropped what it would have (`gives_back` is dropped with it):
/// nothing else may run again to hand those connections back.
async fn sweep<DB: Database>(gives_back: GivesBack<DB>) {
    let connections = Weak::clone(&gives_back.0);
    loop {
        tokio::time::sleep(PARK_FOR).await;
        let Some(connections) = connections.upgrade() else {
            return;
        };
        let (stale, done): (Vec<PoolConnection<DB>>, bool) = {
            let mut parked = connections.lock().unwrap_or_else(PoisonError::into_inner);
            let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut parked.idle)
                .into_iter()
                .partition(|(_, parked_at)| parked_at.elapsed() >= PARK_FOR);
            parked.idle = fresh;
            let done = parked.idle.is_empty();
            if done {
                parked.sweeping = false;
            }
            (
                stale
                    .into_iter()
                    .map(|(connection, _)| connection)
                    .collect(),
                done,
            )
        };
        for mut connection in stale {
            to_the_pool(&mut connection);
        }
        if done {
            return;
        }
    }
}

/// Gives every parked connection back to the pool when dropped: with the sweep's task.
struct GivesBack<DB: Database>(Weak<Mutex<ParkedConnections<DB>>>);

impl<DB: Database> Drop for GivesBack<DB> {
    fn drop(&mut self) {
        let Some(connections) = self.0.upgrade() else {
            return;
        };
        let idle = std::mem::take(
            &mut connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .idle,
        );
        for (mut connection, _) in idle {
            to_the_pool(&mut connection);
        }
    }
}

/// Readies a connection for the pool, which gives it to any caller: sqlx counts no
/// transaction on it any more (a parked one may still count the last one, which statements of
/// ours ended; its queued rollback then does nothing).
fn to_the_pool<DB: Database>(connection: &mut PoolConnection<DB>) {
    DB::TransactionManager::start_rollback(connection);
}

/// A transaction counted as waiting for the pool, until dropped.
struct WaitingForThePool(Arc<AtomicUsize>);

impl Drop for WaitingForThePool {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// Parks its connection when dropped, as a transaction that ended does.
    struct ParksOnDrop(
        Option<PoolConnection<sqlx::Sqlite>>,
        Arc<Parked<sqlx::Sqlite>>,
    );

    impl Drop for ParksOnDrop {
        fn drop(&mut self) {
            if let Some(connection) = self.0.take() {
                drop(self.1.put(connection));
            }
        }
    }

    /// A connection parked while its Tokio runtime shuts down (a task dropped by the
    /// shutdown parks it) starts a sweep the runtime drops at once: that sweep gives the
    /// connections back, and the shutdown ends.
    #[test]
    fn a_connection_parked_while_its_runtime_shuts_down_leaves_no_shutdown_waiting() {
        let (ended, shut_down) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let (pool, parked) = runtime.block_on(async {
                let pool = sqlx::pool::PoolOptions::<sqlx::Sqlite>::new()
                    .max_connections(4)
                    .connect("sqlite::memory:")
                    .await
                    .unwrap();
                let parked = Arc::new(Parked::beside(&pool));
                (pool, parked)
            });
            let connection = runtime.block_on(pool.acquire()).unwrap();
            let parks = ParksOnDrop(Some(connection), Arc::clone(&parked));
            runtime.spawn(async move {
                let _parks = parks;
                std::future::pending::<()>().await;
            });
            drop(runtime);
            let _ = ended.send(parked.take().is_none());
        });
        let given_back = shut_down
            .recv_timeout(Duration::from_secs(30))
            .expect("the runtime shut down");
        assert!(
            given_back,
            "the dropped sweep gave the parked connection back"
        );
    }
}
