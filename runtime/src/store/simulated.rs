//! A store behind a simulation's [`Schedule`]: every `BEGIN`, statement and `COMMIT` asks
//! the schedule first, which may fail it as SQLite or a server can or hang it there (see
//! [`crate::simulation`]). It wraps the store it is given from outside: its statements reach
//! the schedule through the [`Gate`] every statement passes.

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
use crate::simulation::{hold_clock, Fault, Schedule, Step};

/// A store, each step of it asking a [`Schedule`] first.
pub(crate) struct SimulatedStore {
    inner: Box<dyn Store>,
    gate: Scheduled,
}

impl SimulatedStore {
    /// `inner`, behind `schedule`.
    pub(crate) fn new(inner: Box<dyn Store>, schedule: Arc<dyn Schedule>) -> Self {
        Self {
            inner,
            gate: Scheduled(schedule),
        }
    }
}

/// The gate of a simulated store's statements: its schedule, asked before each.
#[derive(Clone)]
struct Scheduled(Arc<dyn Schedule>);

#[async_trait]
impl Gate for Scheduled {
    async fn statement(&self) -> sqlx::Result<Box<dyn Send>> {
        before(&*self.0, Step::Statement).await?;
        Ok(Box::new(hold_clock()))
    }
}

/// Asks `schedule` about `step`: `Ok` to go on, the error a failing step returns, or never,
/// for a step that hangs before it.
async fn before(schedule: &dyn Schedule, step: Step) -> sqlx::Result<()> {
    before_fault(schedule, step, schedule.at(step)).await
}

/// What `fault` does before `step`: `Ok` to go on (a fault after a `COMMIT` is the commit's
/// to play), the error a failing step returns, or never, for a step that hangs before it.
async fn before_fault(schedule: &dyn Schedule, step: Step, fault: Fault) -> sqlx::Result<()> {
    match fault {
        Fault::Proceed => Ok(()),
        Fault::Busy => Err(SimulatedError::busy().into()),
        Fault::Io => Err(SimulatedError::io().into()),
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
        before(&*self.gate.0, Step::Begin).await?;
        let _held = hold_clock();
        Ok(Box::new(SimulatedTransaction {
            inner: self.inner.begin(bounds).await?,
            gate: self.gate.clone(),
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

    /// One: a worker pass runs its actors' turns one after another, so the order of their
    /// steps (and which of them a fault lands on) is the seed's, not the threads'.
    fn concurrent_turns(&self) -> usize {
        1
    }

    fn single_writer(&self) -> bool {
        self.inner.single_writer()
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
        let _held = self.gate.statement().await?;
        self.inner.lock_actor(lock).await
    }

    fn group_budget(&self) -> Option<Instant> {
        self.inner.group_budget()
    }

    fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        self.inner.sqlite()
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        let fault = self.gate.0.at(Step::Commit);
        before_fault(&*self.gate.0, Step::Commit, fault).await?;
        let held = hold_clock();
        self.inner.commit().await?;
        drop(held);
        match fault {
            Fault::HangAfter => hang(&*self.gate.0, Step::Commit).await,
            Fault::LostAfter => Err(sqlx::Error::from(SimulatedError::lost()).into()),
            _ => Ok(()),
        }
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        let _held = hold_clock();
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
