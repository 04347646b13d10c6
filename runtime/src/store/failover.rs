//! Following the host that accepts writes: [`Failover`] keeps the turns' pool of one
//! PostgreSQL or MySQL database on the host of its list that accepts writes, and finds the
//! next one when a connection to that host is lost or it turns read-only. A MySQL URL names
//! one endpoint (a server, or the proxy or managed endpoint in front of several): the
//! failover then waits for that endpoint to accept writes again after a restart or a
//! switch behind it.
//!
//! The rule its methods obey: only a host just found to accept writes
//! (`transaction_read_only` is off on a fresh connection to it) is ever given to the pool,
//! and once the pool moved to another host, no connection opened before the move is used
//! again (parked ones are dropped at once, pooled ones when next acquired). While the search
//! runs, transactions wait for its end until their deadline and then fail with
//! [`Error::DatabaseUnavailable`]; one search at a time tries the hosts (the one served last
//! first, then the others in the URL's order), backing off to a round a second.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::{Connection, Database, Pool};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::store::connect::Checkout;

/// A database whose hosts a [`Failover`] tries: how it names itself, and whether a host
/// accepts writes.
pub(crate) trait Probe: Database {
    /// The backend as errors name it (`PostgreSQL`, `MySQL`).
    const BACKEND: &'static str;

    /// Whether the server `options` names accepts writes, on a fresh connection: `false`
    /// for a standby or a read-only server.
    fn accepts_writes(
        options: &ConnectOptions<Self>,
    ) -> impl Future<Output = sqlx::Result<bool>> + Send;
}

/// How a connection to a database of type `DB` is made.
pub(crate) type ConnectOptions<DB> = <<DB as Database>::Connection as Connection>::Options;

/// The one value `sql` reads on a fresh connection to the server `options` names, for a
/// [`Probe::accepts_writes`]; the connection is closed after.
pub(crate) async fn read_on_fresh_connection<DB, T>(
    options: &ConnectOptions<DB>,
    sql: &'static str,
) -> sqlx::Result<T>
where
    DB: Database,
    T: Send + Unpin,
    (T,): for<'r> sqlx::FromRow<'r, DB::Row>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let mut connection = DB::Connection::connect_with(options).await?;
    let value = sqlx::query_scalar::<DB, T>(sql)
        .fetch_one(&mut connection)
        .await?;
    let _ = connection.close().await;
    Ok(value)
}

/// One host of a database, and how to connect to it.
pub(crate) struct Host<DB: Database> {
    /// `host:port` (or the socket's path), as errors name it: never with the password.
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) options: ConnectOptions<DB>,
}

impl<DB: Database> Clone for Host<DB> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            host: self.host.clone(),
            port: self.port,
            options: self.options.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for Host<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The first pause between two rounds over the hosts, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MOST_BACKOFF: Duration = Duration::from_secs(1);

/// How long one try of one host may take at most (less if the connect timeout is shorter):
/// a host that does not answer holds up the others.
const MOST_PER_HOST: Duration = Duration::from_secs(2);

/// How long the check of a host that a call's deadline passed waiting for may take.
const HOST_CHECK: Duration = Duration::from_millis(250);

/// What the search knows.
struct State {
    /// The host the pool opens its connections to.
    current: usize,
    /// Since when no host is known to accept writes (`None`: the current one does).
    searching_since: Option<Instant>,
    /// When the pool last moved to another host.
    moved_at: Option<std::time::Instant>,
    /// Why the last round's tries failed.
    last_failure: String,
}

/// The hosts of one database, the pool that follows the one accepting writes, and the search
/// for it; see the module docs.
pub(crate) struct Failover<DB: Probe> {
    hosts: Vec<Host<DB>>,
    /// How long one try of one host may take.
    per_try: Duration,
    state: Mutex<State>,
    /// True while the current host is known to accept writes.
    serving: watch::Sender<bool>,
    /// The pool moved to the host found, once the store opened it.
    pool: Mutex<Option<Pool<DB>>>,
    /// Called when the pool moved (drops the parked connections).
    on_move: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Set when the store closes: a search under way stops.
    closed: AtomicBool,
}

impl<DB: Probe> Failover<DB> {
    /// The hosts of `hosts`, serving the one at `writable`; a host is tried for at most
    /// `connect_timeout` (2 s at most) during a search.
    pub(crate) fn new(
        hosts: Vec<Host<DB>>,
        writable: usize,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            hosts,
            per_try: connect_timeout.min(MOST_PER_HOST),
            state: Mutex::new(State {
                current: writable,
                searching_since: None,
                moved_at: None,
                last_failure: String::new(),
            }),
            serving: watch::Sender::new(true),
            pool: Mutex::new(None),
            on_move: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }

    /// How long one try of one host may take.
    pub(crate) fn per_try(&self) -> Duration {
        self.per_try
    }

    /// The host the pool opens its connections to now.
    pub(crate) fn current(&self) -> &Host<DB> {
        &self.hosts[self.lock().current]
    }

    /// Moves `pool` along with the host that accepts writes from now on, calling `on_move`
    /// each time it moved.
    pub(crate) fn follow(&self, pool: &Pool<DB>, on_move: impl Fn() + Send + Sync + 'static) {
        *self.pool.lock().unwrap_or_else(PoisonError::into_inner) = Some(pool.clone());
        *self.on_move.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(on_move));
    }

    /// Stops any search: the store is closing.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Says a connection was lost (or refused a write): unless a search runs already, the
    /// hosts are tried again, the current one first, and transactions wait meanwhile.
    pub(crate) fn suspect(self: &Arc<Self>) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.lock();
        if state.searching_since.is_some() {
            return;
        }
        state.searching_since = Some(Instant::now());
        let current = self.hosts[state.current].name.clone();
        drop(state);
        self.serving.send_replace(false);
        tracing::warn!(
            backend = DB::BACKEND,
            host = current,
            "a connection to the database was lost or refused a write; looking for the host \
             that accepts writes (transactions wait for it until their deadline)"
        );
        tokio::spawn(Arc::clone(self).search());
    }

    /// Waits until a host is known to accept writes, or until `deadline`:
    /// [`Error::DatabaseUnavailable`] then.
    pub(crate) async fn serving(&self, deadline: Instant) -> Result<()> {
        // Every turn begins here: while a host serves, no receiver is made.
        if *self.serving.borrow() {
            return Ok(());
        }
        let mut serving = self.serving.subscribe();
        if *serving.borrow_and_update() {
            return Ok(());
        }
        let found = tokio::time::timeout_at(deadline, serving.wait_for(|serving| *serving))
            .await
            .is_ok_and(|waited| waited.is_ok());
        match found {
            true => Ok(()),
            false => Err(self.unavailable()),
        }
    }

    /// Whether a search for a host is under way.
    pub(crate) fn searching(&self) -> bool {
        !*self.serving.borrow()
    }

    /// What a transaction whose pool handed it no connection by its deadline fails with
    /// (`busy`, the pool's timeout, when the pool was busy).
    ///
    /// While a search runs, the database kept the caller waiting: [`Error::DatabaseUnavailable`].
    /// When the pool was opening a connection rather than waiting for one in use (sqlx's
    /// pool tries a refused connection again until the deadline without saying so), one
    /// short try of the host ([`HOST_CHECK`]) tells a host that refuses or does not answer
    /// (unavailable, and a search starts) from one that was only slower than the caller's
    /// deadline (`busy`).
    pub(crate) async fn no_connection_by_deadline(
        self: &Arc<Self>,
        pool: &Pool<DB>,
        busy: Error,
    ) -> Error {
        if !self.searching() {
            let opening =
                pool.num_idle() == 0 && pool.size() < pool.options().get_max_connections();
            if !opening {
                return busy;
            }
            let host = self.current().clone();
            if accepts_writes::<DB>(&host, self.per_try.min(HOST_CHECK))
                .await
                .is_ok()
            {
                return busy;
            }
            self.suspect();
        }
        self.unavailable()
    }

    /// What a transaction that found no host accepting writes fails with.
    pub(crate) fn unavailable(&self) -> Error {
        let state = self.lock();
        let reason = match state.last_failure.as_str() {
            "" => "looking for the host that accepts writes".to_owned(),
            failure => failure.to_owned(),
        };
        Error::DatabaseUnavailable {
            backend: DB::BACKEND,
            hosts: self.names(),
            reason,
            waited: state
                .searching_since
                .map_or(Duration::ZERO, |since| whole_millis(since.elapsed())),
            request_id: None,
        }
    }

    /// The hosts as errors name them.
    fn names(&self) -> String {
        let names: Vec<&str> = self.hosts.iter().map(|host| host.name.as_str()).collect();
        names.join(", ")
    }

    /// Tries the hosts, round after round, until one accepts writes; the pool moves to it.
    async fn search(self: Arc<Self>) {
        let mut backoff = FIRST_BACKOFF;
        while !self.closed.load(Ordering::Acquire) {
            let current = self.lock().current;
            let order =
                std::iter::once(current).chain((0..self.hosts.len()).filter(|&i| i != current));
            let mut failures = Vec::new();
            for index in order {
                match accepts_writes::<DB>(&self.hosts[index], self.per_try).await {
                    Ok(()) => {
                        self.serve(index);
                        return;
                    }
                    Err(failure) => failures.push(failure),
                }
            }
            self.lock().last_failure = failures.join("; ");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MOST_BACKOFF);
        }
    }

    /// Serves the host at `index`, which accepts writes: the pool moves to it if it is
    /// another, and the transactions waiting for a host go on.
    fn serve(&self, index: usize) {
        let mut state = self.lock();
        let from = state.current;
        if index != from {
            if let Some(pool) = &*self.pool.lock().unwrap_or_else(PoisonError::into_inner) {
                pool.set_connect_options(self.hosts[index].options.clone());
            }
            state.moved_at = Some(std::time::Instant::now());
            state.current = index;
            if let Some(on_move) = &*self.on_move.lock().unwrap_or_else(PoisonError::into_inner) {
                on_move();
            }
        }
        let searched = state.searching_since.take();
        state.last_failure.clear();
        drop(state);
        self.serving.send_replace(true);
        let searched_for = searched.map(|since| since.elapsed());
        match index == from {
            true => tracing::info!(
                backend = DB::BACKEND,
                host = self.hosts[index].name,
                ?searched_for,
                "the database accepts writes on the same host; the runtime carries on"
            ),
            false => tracing::warn!(
                backend = DB::BACKEND,
                from = self.hosts[from].name,
                to = self.hosts[index].name,
                ?searched_for,
                "the database accepts writes on another host; the runtime moved there"
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<DB: Probe> Checkout for Failover<DB> {
    fn lost(self: Arc<Self>) {
        self.suspect();
    }

    fn retired(&self, age: Duration) -> bool {
        let moved_at = self.lock().moved_at;
        moved_at.is_some_and(|moved_at| {
            std::time::Instant::now()
                .checked_sub(age)
                .is_none_or(|opened| opened < moved_at)
        })
    }
}

/// The first host of `hosts` that accepts writes, trying them round after round until
/// `timeout` (each for at most the time left, 2 s at most).
///
/// # Errors
///
/// [`Error::DatabaseUnavailable`] when none did by then, saying what each try came to.
pub(crate) async fn first_writable<DB: Probe>(
    hosts: &[Host<DB>],
    timeout: Duration,
) -> Result<usize> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut failures = Vec::new();
        for (index, host) in hosts.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            match accepts_writes::<DB>(host, left.min(MOST_PER_HOST)).await {
                Ok(()) => return Ok(index),
                Err(failure) => failures.push(failure),
            }
        }
        if Instant::now() + backoff >= deadline {
            let names: Vec<&str> = hosts.iter().map(|host| host.name.as_str()).collect();
            return Err(Error::DatabaseUnavailable {
                backend: DB::BACKEND,
                hosts: names.join(", "),
                reason: failures.join("; "),
                waited: whole_millis(started.elapsed()),
                request_id: None,
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MOST_BACKOFF);
    }
}

/// Whether `host` answers within `within` and accepts writes; if not, why not, naming it.
async fn accepts_writes<DB: Probe>(
    host: &Host<DB>,
    within: Duration,
) -> std::result::Result<(), String> {
    match tokio::time::timeout(within, DB::accepts_writes(&host.options)).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(format!("{} accepts no writes (a standby)", host.name)),
        Ok(Err(sqlx::Error::Io(error))) => Err(format!("{}: {}", host.name, error.kind())),
        Ok(Err(error)) => Err(format!("{}: {error}", host.name)),
        Err(_) => Err(format!("{} did not answer within {within:?}", host.name)),
    }
}

/// A duration to the millisecond, as errors print it.
fn whole_millis(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}
