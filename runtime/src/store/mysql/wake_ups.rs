//! Wake-ups across processes, which MySQL and MariaDB carry no notice for: a bell row that a
//! process rings after it commits work, and that each listening process reads by primary key
//! at a short interval.
//!
//! The ring is an `UPDATE` of the one row (`solid_wake_ups`) on a connection of its own, in
//! autocommit, after the commit that left the work: the row's lock is held for one statement
//! and never by a turn, so turns of different actors do not queue on it. Rings coalesce:
//! a process sends at most one per [`RING_GAP`], however many commits asked for one in the
//! meantime, so the bell costs a busy process a bounded number of writes whatever its rate.
//! A ring that fails (the server away, or on a Galera cluster a conflict with another node's
//! ring at the same moment) is sent again, so no commit goes unrung.
//!
//! A listener reads the row every [`WARM_POLL`] while this process has rung or heard the bell
//! within [`WARM_FOR`], and every [`IDLE_POLL`] otherwise, so an idle process sends fewer than
//! 20 reads a second and a busy one hears another process's commit within a few
//! milliseconds. It tells its workers only of rings it did not send itself: a process's own
//! commits wake its workers in memory. Each ring sets the row to a value of its own
//! (`LAST_INSERT_ID(rung + 1)` hands it back), which is how the listener knows.
//!
//! The bell's connections are taken from the application's pool and detached from it, so they
//! are made as the pool makes its own (its `after_connect` hook, credentials it was given
//! since), and the pool opens others in their place. A runtime that closes sends the ring
//! its last commit asked for before it returns, within [`CLOSE_RING_WITHIN`], so a
//! short-lived process wakes the others too.
//!
//! The bell works on a Galera cluster too: the row replicates as any write does, and a
//! node's listener hears a ring made through another node once it has applied it. The
//! worker it wakes begins with a causal read ([`super`]'s `BEGIN`), so it sees the work.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{Connection, Executor};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::super::{Counters, WorkNotices};
use crate::error::Result;

/// The shortest time between two rings of one process.
const RING_GAP: Duration = Duration::from_millis(5);

/// How long a failed ring waits before it is sent again.
const RING_RETRY: Duration = Duration::from_millis(250);

/// The most one ring may take, connecting included, before it is given up and sent again on
/// a new connection.
const RING_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a closing runtime waits to send the ring its last commit asked for.
const CLOSE_RING_WITHIN: Duration = Duration::from_secs(2);

/// How often a listener reads the bell while its process is busy.
const WARM_POLL: Duration = Duration::from_millis(10);

/// How often a listener reads the bell while its process is idle.
const IDLE_POLL: Duration = Duration::from_millis(60);

/// How long a process counts as busy after it last rang or heard the bell.
const WARM_FOR: Duration = Duration::from_secs(10);

/// Rings the bell: the row's next value, handed back as the statement's insert id.
const RING: &str = "UPDATE solid_wake_ups SET rung = LAST_INSERT_ID(rung + 1) WHERE id = 1";

/// Reads the bell.
const READ: &str = "SELECT rung FROM solid_wake_ups WHERE id = 1";

/// A connection's session for the bell: each statement its own transaction, and a ring that
/// waits at most a second for another's lock on the row.
const SESSION: &str = "SET SESSION autocommit = 1, SESSION innodb_lock_wait_timeout = 1";

/// This process's side of the bell: what it rang, and when it was last busy.
struct Shared {
    /// The application's pool, whose connections the bell detaches for its own.
    pool: MySqlPool,
    /// A ring is wanted (a permit of its own: asks made meanwhile are one ring).
    wanted: Notify,
    /// How many rings were asked for, and how many of those asks a sent ring answered: a
    /// closing runtime sends one more ring while the second is behind.
    asked: AtomicU64,
    answered: AtomicU64,
    /// The value this process's last ring set.
    rang: AtomicI64,
    /// When this process last rang or heard the bell.
    busy_at: Mutex<Instant>,
    /// The value this process's listener last read, kept across its reconnections: a ring
    /// made while it was away is heard when it is back.
    heard: Mutex<Option<i64>>,
}

impl Shared {
    fn busy(&self) {
        *self.busy_at.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// How long a listener waits before it reads the bell again.
    fn poll_interval(&self) -> Duration {
        let busy_at = *self.busy_at.lock().unwrap_or_else(PoisonError::into_inner);
        if busy_at.elapsed() < WARM_FOR {
            WARM_POLL
        } else {
            IDLE_POLL
        }
    }

    /// A connection of the bell's own: made by the application's pool, then detached from it.
    async fn connect(&self) -> Result<MySqlConnection> {
        let mut connection = self.pool.acquire().await?.detach();
        connection.execute(SESSION).await?;
        Ok(connection)
    }
}

/// The bell of one store: rings on request, from a task started by the first.
pub(super) struct Bell {
    shared: Arc<Shared>,
    ringer: Mutex<Option<JoinHandle<()>>>,
}

impl Bell {
    /// A bell on connections made as `pool` makes them.
    pub(super) fn beside(pool: &MySqlPool) -> Self {
        Self {
            shared: Arc::new(Shared {
                pool: pool.clone(),
                wanted: Notify::new(),
                asked: AtomicU64::new(0),
                answered: AtomicU64::new(0),
                rang: AtomicI64::new(0),
                busy_at: Mutex::new(Instant::now()),
                heard: Mutex::new(None),
            }),
            ringer: Mutex::new(None),
        }
    }

    /// Asks for a ring, soon, after a commit that left work; never waits.
    pub(super) fn ring(&self) {
        self.shared.busy();
        self.shared.asked.fetch_add(1, Ordering::AcqRel);
        self.shared.wanted.notify_one();
        let mut ringer = self.ringer.lock().unwrap_or_else(PoisonError::into_inner);
        if ringer.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        // A ring asked for outside a Tokio runtime waits for the next one asked inside.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            *ringer = Some(runtime.spawn(ring_for_ever(Arc::clone(&self.shared))));
        }
    }

    /// A listener for rings of other processes.
    pub(super) fn listener(&self, counters: Arc<Counters>) -> Listener {
        Listener {
            shared: Arc::clone(&self.shared),
            counters,
            connection: None,
        }
    }

    /// Stops ringing, after sending the ring that a commit asked for and no ring has
    /// answered yet (within [`CLOSE_RING_WITHIN`]).
    pub(super) async fn close(&self) {
        self.stop();
        let shared = &self.shared;
        let asked = shared.asked.load(Ordering::Acquire);
        if asked > shared.answered.load(Ordering::Acquire) {
            let mut connection = None;
            let rung =
                tokio::time::timeout(CLOSE_RING_WITHIN, ring_once(shared, &mut connection, asked))
                    .await;
            if !matches!(rung, Ok(Ok(()))) {
                tracing::debug!("the wake-up bell's last ring was not sent before the close");
            }
            if let Some(connection) = connection {
                let _ = connection.close().await;
            }
        }
    }

    /// Stops ringing at once (a ring asked for meanwhile is not sent).
    fn stop(&self) {
        if let Some(ringer) = self
            .ringer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            ringer.abort();
        }
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The ringer's loop: one ring per request, at most one per [`RING_GAP`].
async fn ring_for_ever(shared: Arc<Shared>) {
    let mut connection = None;
    loop {
        shared.wanted.notified().await;
        let asked = shared.asked.load(Ordering::Acquire);
        let rung =
            tokio::time::timeout(RING_TIMEOUT, ring_once(&shared, &mut connection, asked)).await;
        match rung {
            Ok(Ok(())) => tokio::time::sleep(RING_GAP).await,
            failed => {
                let reason = match failed {
                    Ok(Err(error)) => error.to_string(),
                    _ => "no answer within 5 s".to_owned(),
                };
                tracing::debug!(%reason, "ringing the wake-up bell failed; ringing again");
                connection = None;
                shared.wanted.notify_one();
                tokio::time::sleep(RING_RETRY).await;
            }
        }
    }
}

/// One ring, on the bell's connection (made first if there is none), answering the first
/// `asked` asks for one.
async fn ring_once(
    shared: &Shared,
    connection: &mut Option<MySqlConnection>,
    asked: u64,
) -> Result<()> {
    let connection = match connection {
        Some(connection) => connection,
        None => connection.insert(shared.connect().await?),
    };
    let done = connection.execute(RING).await?;
    if let Ok(rung) = i64::try_from(done.last_insert_id()) {
        shared.rang.store(rung, Ordering::Release);
    }
    shared.answered.fetch_max(asked, Ordering::AcqRel);
    Ok(())
}

/// Hears the rings of other processes, by reading the bell on a connection of its own.
pub(super) struct Listener {
    shared: Arc<Shared>,
    counters: Arc<Counters>,
    connection: Option<MySqlConnection>,
}

impl Listener {
    async fn read(&mut self) -> Result<i64> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self.connection.insert(self.shared.connect().await?),
        };
        let read = sqlx::query_scalar(READ).fetch_one(&mut *connection).await;
        if read.is_err() {
            if let Some(connection) = self.connection.take() {
                let _ = connection.close().await;
            }
        }
        Ok(read?)
    }
}

#[async_trait]
impl WorkNotices for Listener {
    /// Waits until the bell holds a value that neither the last read nor this process's own
    /// latest ring explains.
    async fn next(&mut self) -> Result<()> {
        loop {
            let heard = *self
                .shared
                .heard
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if heard.is_some() {
                tokio::time::sleep(self.shared.poll_interval()).await;
            }
            let rung = self.read().await?;
            let before = self
                .shared
                .heard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replace(rung);
            let Some(before) = before else {
                continue;
            };
            if rung == before {
                continue;
            }
            self.shared.busy();
            let own = self.shared.rang.load(Ordering::Acquire);
            if rung == own && before == own - 1 {
                continue;
            }
            self.counters.work_notice();
            return Ok(());
        }
    }
}
