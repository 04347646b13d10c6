//! A store behind a simulation's [`Schedule`]: every `BEGIN`, statement and `COMMIT` asks
//! the schedule first, which may fail it as SQLite or a server can or hang it there (see
//! [`crate::simulation`]). It wraps the store it is given from outside: its statements reach
//! the schedule through the [`Gate`] every statement passes.
//!
//! A [server-shaped](Schedule::server_shaped) schedule makes the store answer as a server:
//! not a single writer (the engine groups callers across actors), a transaction that waits
//! for the writer as for another's row locks until its deadline, a head read with the
//! snapshot from before that wait when the schedule says so, and a server's errors (a lock
//! timeout where SQLite would be busy, a deadlock for a conflict).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::query::{Gate, On};
use super::{
    ActorLock, Bounds, Counters, LockedActor, ReadConnections, Reads, StateNotices, Store,
    Transaction, WorkNotices, WriteConnection,
};
use crate::error::Result;
use crate::simulation::{admitted, Fault, Schedule, Step};

/// A store, each step of it asking a [`Schedule`] first.
pub(crate) struct SimulatedStore {
    inner: Box<dyn Store>,
    gate: Scheduled,
}

impl SimulatedStore {
    /// `inner`, behind `schedule`.
    pub(crate) fn new(inner: Box<dyn Store>, schedule: Arc<dyn Schedule>) -> Self {
        let server = schedule.server_shaped();
        Self {
            inner,
            gate: Scheduled { schedule, server },
        }
    }

    /// A connection of its own to the file (the read pool's are for the runtime's reads),
    /// inside a transaction whose snapshot is taken now, for a lock to read a stale head
    /// from later ([`Schedule::stale_head`]).
    async fn snapshot_now(&self) -> Result<Option<Snapshot>> {
        use sqlx::ConnectOptions;
        let On::SqlitePool(pool) = self.inner.readers() else {
            return Ok(None);
        };
        let _admitted = admitted().await;
        let mut connection = pool.connect_options().connect().await?;
        sqlx::query("BEGIN").execute(&mut connection).await?;
        sqlx::query("SELECT COUNT(*) FROM solid_messages")
            .execute(&mut connection)
            .await?;
        Ok(Some(Snapshot(connection)))
    }
}

/// A read transaction on a connection of its own: the database as it stood when it began
/// ([`Schedule::stale_head`]).
struct Snapshot(sqlx::SqliteConnection);

impl Snapshot {
    /// The head of `lock`'s mailbox as the snapshot has it; ends the snapshot.
    async fn head(mut self, lock: ActorLock<'_, '_>) -> Result<Option<super::StoredMessage>> {
        let _admitted = admitted().await;
        let known = lock.known.unwrap_or(super::Version::NONE);
        let row = super::query::query(super::instances::INSTANCE_AND_HEAD)
            .bind(lock.actor.actor_type)
            .bind(lock.actor.actor_id)
            .bind(lock.now)
            .bind(known.incarnation)
            .bind(known.revision)
            .fetch_optional(On::Sqlite(&mut self.0))
            .await?;
        sqlx::query("ROLLBACK").execute(&mut self.0).await?;
        let head = row
            .map(|row| super::rows::locked_actor(&row))
            .transpose()?
            .and_then(|locked| locked.head);
        Ok(head)
    }
}

/// The gate of a simulated store's statements: its schedule, asked before each, and whether
/// the store answers as a server.
#[derive(Clone)]
struct Scheduled {
    schedule: Arc<dyn Schedule>,
    server: bool,
}

#[async_trait]
impl Gate for Scheduled {
    /// Waits to be admitted through the thread's turnstile, then asks the schedule: a
    /// statement that fails or hangs leaves the turnstile first.
    async fn statement(&self) -> sqlx::Result<Box<dyn Send>> {
        let admitted = admitted().await;
        match self.schedule.at(Step::Statement) {
            Fault::Proceed => Ok(Box::new(admitted)),
            fault => {
                drop(admitted);
                self.before(Step::Statement, fault).await?;
                Ok(Box::new(()))
            }
        }
    }
}

/// What the schedule says of `step`, asked once the thread's turnstile admits it: the
/// order of the answers, and of the transactions that begin and commit, is the seed's.
async fn fault_at(schedule: &dyn Schedule, step: Step) -> Fault {
    let _admitted = admitted().await;
    schedule.at(step)
}

impl Scheduled {
    /// What `fault` does before `step`: `Ok` to go on (a fault after a `COMMIT` is the
    /// commit's to play), the error a failing step returns (as a server words it, for a
    /// server-shaped store), or never, for a step that hangs before it.
    async fn before(&self, step: Step, fault: Fault) -> sqlx::Result<()> {
        before_fault(&*self.schedule, step, fault, self.server).await
    }
}

/// What `fault` does before `step`; see [`Scheduled::before`].
async fn before_fault(
    schedule: &dyn Schedule,
    step: Step,
    fault: Fault,
    server: bool,
) -> sqlx::Result<()> {
    match fault {
        Fault::Proceed => Ok(()),
        Fault::Busy if server => Err(SimulatedError::lock_timeout().into()),
        Fault::Busy => Err(SimulatedError::busy().into()),
        Fault::Io if server => Err(SimulatedError::disk_full().into()),
        Fault::Io => Err(SimulatedError::io().into()),
        Fault::Conflict if server => Err(SimulatedError::deadlock().into()),
        Fault::Conflict => Err(SimulatedError::conflict().into()),
        Fault::HangAfter | Fault::LostAfter if step == Step::Commit => Ok(()),
        Fault::LostAfter => Err(SimulatedError::lost().into()),
        Fault::Hang | Fault::HangAfter => hang(schedule, step).await,
    }
}

/// Never returns; tells `schedule` when its future is dropped.
async fn hang<T>(schedule: &dyn Schedule, step: Step) -> T {
    /// Tells the schedule that the hung step's future is gone.
    struct Released<'a>(&'a dyn Schedule, Step);

    impl Drop for Released<'_> {
        fn drop(&mut self) {
            self.0.released(self.1);
        }
    }

    let _released = Released(schedule, step);
    schedule.hanging(step);
    std::future::pending().await
}

impl ReadConnections for SimulatedStore {
    fn readers(&self) -> On<'_> {
        On::Gated(&self.gate, Box::new(self.inner.readers()))
    }
}

#[async_trait]
impl Store for SimulatedStore {
    fn reads(&self) -> &dyn Reads {
        self
    }

    async fn begin(&self, bounds: Bounds) -> Result<Box<dyn Transaction>> {
        let fault = fault_at(&*self.gate.schedule, Step::Begin).await;
        self.gate.before(Step::Begin, fault).await?;
        // A server's transaction takes its snapshot before it waits for a lock; the schedule
        // says whether its lock reads the head from there.
        let snapshot = if self.gate.server && self.gate.schedule.stale_head() {
            self.snapshot_now().await?
        } else {
            None
        };
        Ok(Box::new(SimulatedTransaction {
            inner: self.inner.begin(bounds).await?,
            gate: self.gate.clone(),
            snapshot,
        }))
    }

    async fn listen_states(&self) -> Result<Option<Box<dyn StateNotices>>> {
        self.inner.listen_states().await
    }

    async fn announce_watched(&self, watcher: &str, actors: &str, lease: Duration) -> Result<()> {
        self.inner.announce_watched(watcher, actors, lease).await
    }

    async fn reconnect(&self, deadline: Instant) -> Result<()> {
        self.inner.reconnect(deadline).await
    }

    fn work_committed(&self) {
        self.inner.work_committed();
    }

    fn counters(&self) -> &Counters {
        self.inner.counters()
    }

    /// One: a worker pass runs its actors' turns one after another (callers, passes and
    /// groups run side by side; turns of one pass polled together would not replay, their
    /// order being the stream's, not the seed's).
    fn concurrent_turns(&self) -> usize {
        1
    }

    fn single_writer(&self) -> bool {
        !self.gate.server && self.inner.single_writer()
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    async fn listen(&self) -> Result<Option<Box<dyn WorkNotices>>> {
        self.inner.listen().await
    }

    fn schema(&self) -> (&'static str, i64) {
        self.inner.schema()
    }

    async fn settings(&self) -> Result<Vec<(String, String)>> {
        self.inner.settings().await
    }

    async fn database_micros(&self) -> Result<Option<i64>> {
        self.inner.database_micros().await
    }
}

/// A transaction whose statements and `COMMIT` ask the schedule first.
struct SimulatedTransaction {
    inner: Box<dyn Transaction>,
    gate: Scheduled,
    /// The snapshot taken when the transaction began, for its lock to read a stale head
    /// from ([`Schedule::stale_head`]).
    snapshot: Option<Snapshot>,
}

impl WriteConnection for SimulatedTransaction {
    fn on(&mut self) -> On<'_> {
        On::Gated(&self.gate, Box::new(self.inner.on()))
    }

    fn counters(&self) -> &Counters {
        self.inner.counters()
    }

    fn poison(&mut self) {
        self.inner.poison();
    }
}

#[async_trait]
impl Transaction for SimulatedTransaction {
    async fn lock_actor(&mut self, lock: ActorLock<'_, '_>) -> Result<Option<LockedActor>> {
        let held = self.gate.statement().await?;
        let locked = self.inner.lock_actor(lock).await?;
        drop(held);
        match (self.snapshot.take(), locked) {
            (Some(snapshot), Some(locked)) => Ok(Some(LockedActor {
                head: snapshot.head(lock).await?,
                ..locked
            })),
            (_, locked) => Ok(locked),
        }
    }

    fn group_budget(&self) -> Option<Instant> {
        self.inner.group_budget()
    }

    fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        self.inner.sqlite()
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        let fault = fault_at(&*self.gate.schedule, Step::Commit).await;
        self.gate.before(Step::Commit, fault).await?;
        self.inner.commit().await?;
        match fault {
            Fault::HangAfter => hang(&*self.gate.schedule, Step::Commit).await,
            Fault::LostAfter => Err(sqlx::Error::from(SimulatedError::lost()).into()),
            _ => Ok(()),
        }
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.inner.rollback().await
    }
}

/// An error SQLite or a server could have returned, made by the schedule.
#[derive(Debug)]
struct SimulatedError {
    /// SQLite's primary result code, or a server's SQLSTATE.
    code: &'static str,
    message: &'static str,
}

impl SimulatedError {
    /// SQLite's busy database.
    fn busy() -> Self {
        Self {
            code: "5",
            message: "database is locked (simulated)",
        }
    }

    /// SQLite's I/O error.
    fn io() -> Self {
        Self {
            code: "10",
            message: "disk I/O error (simulated)",
        }
    }

    /// A server's lock timeout: another transaction held the lock past the deadline.
    fn lock_timeout() -> Self {
        Self {
            code: "55P03",
            message: "canceling statement due to lock timeout (simulated)",
        }
    }

    /// A server's full disk.
    fn disk_full() -> Self {
        Self {
            code: "53100",
            message: "could not extend file: No space left on device (simulated)",
        }
    }

    /// PostgreSQL's deadlock: the server chose this transaction to end.
    fn deadlock() -> Self {
        Self {
            code: "40P01",
            message: "deadlock detected (simulated)",
        }
    }

    /// A server's serialization failure: another transaction won.
    fn conflict() -> Self {
        Self {
            code: "40001",
            message: "could not serialize access due to concurrent update (simulated)",
        }
    }

    /// A server's connection failure.
    fn lost() -> Self {
        Self {
            code: "08006",
            message: "connection to the server was lost (simulated)",
        }
    }
}

impl std::fmt::Display for SimulatedError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.message)
    }
}

impl std::error::Error for SimulatedError {}

impl sqlx::error::DatabaseError for SimulatedError {
    fn message(&self) -> &str {
        self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.code))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}
