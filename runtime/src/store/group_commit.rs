//! Group commit on SQLite's single writer: turns that arrive together share one
//! transaction, and so one fsync.
//!
//! The writer connection sits behind a fair mutex. The first transaction to take it begins
//! a group (`BEGIN IMMEDIATE`); every transaction, first or not, is a member that runs inside
//! its own savepoint. A member that commits keeps its savepoint's work in the group and
//! lets the next waiting transaction in; the group commits when nobody waits for the writer,
//! or when it reaches [`GroupCommit::max_turns`] members or [`GroupCommit::max_wait`] of age.
//! Every member waits for that `COMMIT` before it hears "committed". A member that rolls back
//! undoes its savepoint only.
//!
//! Cancellation: a member dropped while open is rolled back to its savepoint by whoever takes
//! the writer next; one dropped in the middle of a statement the group needs (`BEGIN`, its
//! savepoint) leaves the connection in doubt, so the whole group is rolled back, the
//! connection closed, and every member told that nothing of it was kept. The `COMMIT` runs in
//! a task of its own, so no caller's cancellation can interrupt it. A flusher task commits a
//! group that its members left open for waiters who then went away.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{watch, Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Counters;
use crate::error::{Error, Result};

/// How turns share a commit on SQLite: see [`Builder::group_commit`](crate::Builder::group_commit).
///
/// A lone caller never waits for a group: a group commits as soon as no other transaction
/// waits for the writer. The bounds only cap how long a busy writer keeps a group open.
///
/// ```
/// use std::time::Duration;
/// use solid_objects::GroupCommit;
///
/// let grouping = GroupCommit::default()
///     .max_turns(32)
///     .max_wait(Duration::from_micros(500));
/// assert_eq!(grouping.turns(), 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCommit {
    max_turns: usize,
    max_wait: Duration,
}

impl Default for GroupCommit {
    /// At most 64 transactions, and at most 1 ms from a group's first statement.
    fn default() -> Self {
        Self {
            max_turns: 64,
            max_wait: Duration::from_millis(1),
        }
    }
}

impl GroupCommit {
    /// One transaction per commit: no grouping.
    pub fn off() -> Self {
        Self::default().max_turns(1)
    }

    /// The most transactions one commit carries (at least 1; 1 turns grouping off).
    #[must_use]
    pub fn max_turns(mut self, turns: usize) -> Self {
        self.max_turns = turns.max(1);
        self
    }

    /// How long after a group begins its members stop letting waiting transactions join.
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The most transactions one commit carries.
    pub fn turns(&self) -> usize {
        self.max_turns
    }

    /// How long a group lets transactions join.
    pub fn wait(&self) -> Duration {
        self.max_wait
    }
}

/// How a group ended, as its members hear it.
#[derive(Debug, Clone)]
enum GroupEnd {
    Committed,
    /// Rolled back by the runtime: nothing of any member was kept.
    RolledBack(String),
    /// Its `COMMIT` failed: whether anything was kept is for the database to say.
    CommitFailed(String),
}

impl GroupEnd {
    /// What a member hears.
    fn into_result(self) -> Result<()> {
        match self {
            Self::Committed => Ok(()),
            Self::RolledBack(why) => Err(rolled_back(&why)),
            Self::CommitFailed(why) => Err(Error::GroupCommitFailed { reason: why }),
        }
    }
}

/// A group's open transaction.
struct OpenGroup {
    /// Members that kept their work in the group and wait for its end.
    members: usize,
    /// When its `BEGIN` ran.
    began: Instant,
    end: watch::Sender<Option<GroupEnd>>,
}

/// The writer connection and its group, behind the writer's mutex.
struct Writer {
    connection: Option<PoolConnection<Sqlite>>,
    group: Option<OpenGroup>,
    /// A statement the group needs was cut off: nobody knows what the connection holds.
    in_doubt: bool,
    /// A member went away with its savepoint open: roll it back before anything else.
    abandoned: bool,
    /// How many transactions commit alone, ungrouped, after a group's `COMMIT` failed (a
    /// deferred constraint one member broke, say): the member at fault then fails alone.
    solo: usize,
}

/// What the store, its members and the flusher share.
struct Shared {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    pool: SqlitePool,
    limits: GroupCommit,
    /// Set when a group was left open for waiters: the flusher makes sure it ends.
    flush: Notify,
    counters: Arc<Counters>,
    /// Asks the writer's progress handler to interrupt a statement a handler left running;
    /// cleared when the writer takes a fresh connection.
    interrupt: Arc<AtomicBool>,
}

/// SQLite's writer with group commit; see the module docs.
pub(crate) struct GroupWriter {
    shared: Arc<Shared>,
    flusher: JoinHandle<()>,
}

impl GroupWriter {
    /// Takes turns on `pool` (of one connection), whose statements `interrupt` interrupts.
    pub(crate) fn new(
        pool: SqlitePool,
        limits: GroupCommit,
        interrupt: Arc<AtomicBool>,
        counters: Arc<Counters>,
    ) -> Self {
        let shared = Arc::new(Shared {
            writer: Arc::new(tokio::sync::Mutex::new(Writer {
                connection: None,
                group: None,
                in_doubt: false,
                abandoned: false,
                solo: 0,
            })),
            pool,
            limits,
            flush: Notify::new(),
            counters,
            interrupt,
        });
        let flusher = tokio::spawn(flush_abandoned_groups(Arc::downgrade(&shared)));
        Self { shared, flusher }
    }

    /// Joins the open group, or begins one with `begin` (waiting for the writer until
    /// `deadline`). `alone`: commits the open group first and begins one of its own, whose
    /// first member has no budget.
    pub(crate) async fn begin(
        &self,
        deadline: Instant,
        begin: String,
        alone: bool,
    ) -> Result<GroupMember> {
        let shared = &self.shared;
        let waiting = shared.counters.wait_for_writer();
        let locked = tokio::time::timeout_at(deadline, shared.writer.clone().lock_owned()).await;
        drop(waiting);
        let Ok(writer) = locked else {
            return Err(sqlx::Error::PoolTimedOut.into());
        };
        // From here on, dropping the member (this future cancelled) leaves the writer to
        // the flusher in a state it can recover from.
        let mut member = GroupMember {
            writer: Some(writer),
            shared: Arc::clone(shared),
            deadline,
            budget: None,
            open: false,
            poisoned: false,
        };
        let writer = member.writer_mut();
        shared.recover(writer).await;
        if alone {
            end_group(writer, &shared.counters).await;
        }
        let joined = match &writer.group {
            None => {
                shared.begin_group(writer, deadline, begin).await?;
                false
            }
            // The group's first member needs no savepoint: undoing it undoes the group.
            Some(group) if group.members == 0 => false,
            Some(_) => {
                writer.in_doubt = true;
                run(writer, "SAVEPOINT solid_member").await?;
                writer.in_doubt = false;
                true
            }
        };
        // Earlier members wait for a member that joins them: it gets the group's time budget.
        member.budget = joined.then(|| Instant::now() + shared.limits.max_wait);
        member.open = true;
        Ok(member)
    }

    /// Ends any open group (committing what its members kept), closes the connection and
    /// its pool.
    pub(crate) async fn close(&self) {
        let mut writer = self.shared.writer.lock().await;
        self.shared.recover(&mut writer).await;
        end_group(&mut writer, &self.shared.counters).await;
        writer.connection = None;
        drop(writer);
        self.flusher.abort();
        self.shared.pool.close().await;
    }
}

impl Drop for GroupWriter {
    fn drop(&mut self) {
        self.flusher.abort();
    }
}

impl Shared {
    /// Makes the writer usable after a member that went away: undoes the abandoned member,
    /// or, with the connection in doubt, rolls the group back and closes it.
    async fn recover(&self, writer: &mut Writer) {
        if writer.in_doubt {
            discard(writer, "a statement of the group was cut off").await;
            return;
        }
        if writer.abandoned {
            writer.abandoned = false;
            if let Err(error) = undo_member(writer).await {
                let why = format!("rolling back a cancelled turn failed: {error}");
                discard(writer, &why).await;
            }
        }
    }

    /// Takes a connection if the writer has none, and begins a group on it.
    async fn begin_group(
        &self,
        writer: &mut Writer,
        deadline: Instant,
        begin: String,
    ) -> Result<()> {
        if writer.connection.is_none() {
            let acquired = tokio::time::timeout_at(deadline, self.pool.acquire()).await;
            let connection = acquired.map_err(|_| sqlx::Error::PoolTimedOut)??;
            // A fresh connection: a statement abandoned on the last one is gone with it.
            self.interrupt.store(false, Ordering::Release);
            writer.connection = Some(connection);
        }
        writer.in_doubt = true;
        let begun = run(writer, &begin).await;
        writer.in_doubt = false;
        if let Err(error) = begun {
            // A BEGIN the database refused (another process holds the file) leaves no
            // transaction behind; anything else leaves the connection in doubt.
            if !error.is_busy() {
                discard(writer, "its BEGIN failed").await;
            }
            return Err(error);
        }
        writer.group = Some(OpenGroup {
            members: 0,
            began: Instant::now(),
            end: watch::Sender::new(None),
        });
        Ok(())
    }

    /// Whether the writer's group should commit now rather than wait for more members.
    /// Leaves the writer to the group's other members: if the group is `due`, ends it in a
    /// task of its own (a caller that goes away cannot cut off the others' COMMIT); else
    /// leaves it open and wakes the flusher, which ends it once no turn waits to join.
    fn pass_on(&self, mut writer: OwnedMutexGuard<Writer>, due: bool) {
        if due {
            let counters = Arc::clone(&self.counters);
            tokio::spawn(async move { end_group(&mut writer, &counters).await });
        } else {
            drop(writer);
            self.flush.notify_one();
        }
    }

    fn should_commit(&self, writer: &Writer) -> bool {
        let Some(group) = &writer.group else {
            return false;
        };
        writer.solo > 0
            || !self.counters.writer_awaited()
            || group.members >= self.limits.max_turns
            || group.began.elapsed() >= self.limits.max_wait
    }
}

/// Undoes the member that holds the writer: its savepoint, or, as the group's first member
/// (none kept work in it yet), the whole group.
async fn undo_member(writer: &mut Writer) -> Result<()> {
    let first = writer.group.as_ref().is_none_or(|group| group.members == 0);
    let sql = if first {
        "ROLLBACK"
    } else {
        "ROLLBACK TO solid_member; RELEASE solid_member"
    };
    writer.in_doubt = true;
    run(writer, sql).await?;
    writer.in_doubt = false;
    if first {
        writer.group = None;
    }
    Ok(())
}

/// Closes the connection (which rolls back what it held) and tells the group's members how
/// their work stands: nothing of it was kept if the connection is still inside the group's
/// transaction; otherwise a handler ended that transaction itself (a `COMMIT` through
/// `Turn::sqlite`, say), so members must read their messages back to learn what was kept.
async fn discard(writer: &mut Writer, why: &str) {
    let members = writer.group.as_ref().map_or(0, |group| group.members);
    let end = if members == 0 || inside_transaction(writer).await {
        GroupEnd::RolledBack(why.to_owned())
    } else {
        GroupEnd::CommitFailed(format!(
            "{why}; a turn ended the group's transaction itself, so some of it may have been kept"
        ))
    };
    close(writer);
    writer.in_doubt = false;
    writer.abandoned = false;
    if let Some(group) = writer.group.take() {
        group.end.send_replace(Some(end));
    }
}

/// Whether the writer's connection is still inside a transaction: SQLite refuses a `BEGIN`
/// there. (A `BEGIN` that succeeds is rolled back at once.)
async fn inside_transaction(writer: &mut Writer) -> bool {
    match run(writer, "BEGIN").await {
        Ok(()) => {
            let _ = run(writer, "ROLLBACK").await;
            false
        }
        Err(Error::Database(sqlx::Error::Database(error))) => {
            error.message().contains("within a transaction")
        }
        Err(_) => false,
    }
}

/// Commits the writer's group. A `COMMIT` that fails (a deferred constraint, a full disk)
/// is followed by a `ROLLBACK`: if that succeeds nothing was kept and the connection stays;
/// if not, the connection is closed and the outcome is in doubt.
async fn commit(writer: &mut Writer, counters: &Counters) -> std::result::Result<(), Failed> {
    writer.in_doubt = true;
    let committed = run(writer, "COMMIT").await;
    writer.in_doubt = false;
    let Err(error) = committed else {
        counters.commit();
        return Ok(());
    };
    writer.in_doubt = true;
    let undone = run(writer, "ROLLBACK").await;
    writer.in_doubt = false;
    if undone.is_ok() {
        Err(Failed::RolledBack(error))
    } else {
        close(writer);
        Err(Failed::InDoubt(error))
    }
}

/// How a group's `COMMIT` failed.
enum Failed {
    /// Nothing of the group was kept.
    RolledBack(Error),
    /// Whether the group was kept is unknown: its connection was closed.
    InDoubt(Error),
}

impl Failed {
    fn into_error(self) -> Error {
        match self {
            Self::RolledBack(error) | Self::InDoubt(error) => error,
        }
    }
}

/// Closes the writer's connection instead of reusing it; closing rolls back what it held.
fn close(writer: &mut Writer) {
    if let Some(mut connection) = writer.connection.take() {
        connection.close_on_drop();
    }
}

/// Runs `sql` on the writer's connection.
async fn run(writer: &mut Writer, sql: &str) -> Result<()> {
    let connection = writer
        .connection
        .as_deref_mut()
        .ok_or_else(|| Error::Database(sqlx::Error::PoolClosed))?;
    sqlx::Executor::execute(connection, sql).await?;
    Ok(())
}

/// Ends the groups left open for waiters who went away: runs whenever a member leaves a group
/// open, and ends the group once it has the writer (after every transaction queued before it).
async fn flush_abandoned_groups(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let writer = Arc::clone(&strong.writer);
        strong.flush.notified().await;
        drop(strong);
        let mut writer = writer.lock_owned().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        strong.recover(&mut writer).await;
        end_group(&mut writer, &strong.counters).await;
    }
}

/// Commits the writer's group if it has members, or rolls it back if it has none, and tells
/// the members.
async fn end_group(writer: &mut Writer, counters: &Counters) {
    let Some(group) = writer.group.take() else {
        return;
    };
    let end = if group.members == 0 {
        writer.in_doubt = true;
        let undone = run(writer, "ROLLBACK").await;
        writer.in_doubt = false;
        match undone {
            Ok(()) => GroupEnd::RolledBack("it had no members".to_owned()),
            Err(error) => {
                close(writer);
                GroupEnd::RolledBack(error.to_string())
            }
        }
    } else {
        match commit(writer, counters).await {
            Ok(()) => GroupEnd::Committed,
            // One member's own failure is its own: it hears the database's error.
            Err(failed) if group.members == 1 => {
                GroupEnd::CommitFailed(failed.into_error().to_string())
            }
            // The group was undone: its members run again, each committing alone for a
            // while, so the member at fault fails alone.
            Err(Failed::RolledBack(error)) => {
                writer.solo = group.members;
                GroupEnd::RolledBack(format!("its COMMIT failed: {error}"))
            }
            Err(Failed::InDoubt(error)) => GroupEnd::CommitFailed(error.to_string()),
        }
    };
    group.end.send_replace(Some(end));
}

/// One transaction of a group: a savepoint on the writer, which it holds until it ends.
pub(crate) struct GroupMember {
    /// The writer, held from `SAVEPOINT` until the member commits or rolls back.
    writer: Option<OwnedMutexGuard<Writer>>,
    shared: Arc<Shared>,
    /// Its caller's deadline: how long it waits for its group's end.
    deadline: Instant,
    /// When it must be done by, having joined earlier members who wait for it.
    budget: Option<Instant>,
    /// Whether it began (and so has work of its own to undo if it goes away).
    open: bool,
    /// Its handler was abandoned mid-statement: the group cannot be trusted.
    poisoned: bool,
}

impl GroupMember {
    /// The writer connection, for the member's statements.
    pub(crate) fn connection(&mut self) -> &mut SqliteConnection {
        self.writer_mut()
            .connection
            .as_deref_mut()
            .expect("a member holds the writer and its connection until it ends")
    }

    /// When this member must be done by for the sake of the earlier members of its group;
    /// `None` as a group's first member.
    pub(crate) fn budget(&self) -> Option<Instant> {
        self.budget
    }

    /// The writer connection.
    pub(crate) fn connection_ref(&self) -> &SqliteConnection {
        self.writer
            .as_deref()
            .and_then(|writer| writer.connection.as_deref())
            .expect("a member holds the writer and its connection until it ends")
    }

    fn writer_mut(&mut self) -> &mut Writer {
        self.writer
            .as_deref_mut()
            .expect("a member holds the writer until it ends")
    }

    /// Keeps the member's work in its group and waits for the group's `COMMIT`.
    pub(crate) async fn commit(mut self) -> Result<()> {
        let mut writer = self.writer.take().expect("an open member holds the writer");
        if self.poisoned {
            let mut end = writer.group.as_ref().map(|group| group.end.subscribe());
            discard(&mut writer, "a turn in it was abandoned mid-statement").await;
            return match end.as_mut().map(|end| end.borrow_and_update().clone()) {
                Some(Some(end)) => end.into_result(),
                _ => Err(rolled_back("a turn in it was abandoned mid-statement")),
            };
        }
        writer
            .group
            .as_mut()
            .expect("an open member's group is open")
            .members += 1;
        let commit_now = self.shared.should_commit(&writer);
        writer.solo = writer.solo.saturating_sub(1);
        let group = writer.group.as_ref().expect("the group is open");
        let end = group.end.subscribe();
        if commit_now && group.members == 1 {
            // Alone in its group: committing here is committing its own transaction, and a
            // caller that goes away mid-COMMIT leaves only its own work in doubt (the next
            // holder then closes the connection). Its failure is its own error.
            let group = writer.group.take().expect("the group is open");
            let committed = commit(&mut writer, &self.shared.counters).await;
            let end = match &committed {
                Ok(()) => GroupEnd::Committed,
                Err(_) => GroupEnd::CommitFailed("its only member's COMMIT failed".to_owned()),
            };
            group.end.send_replace(Some(end));
            return committed.map_err(Failed::into_error);
        }
        self.shared.pass_on(writer, commit_now);
        // A later member of the group may still run at the caller's deadline (up to its
        // budget): the turn then commits with the group, or not, and the engine reads back
        // which.
        tokio::time::timeout_at(self.deadline, group_end(end))
            .await
            .unwrap_or_else(|_| {
                Err(Error::GroupCommitFailed {
                    reason: "its group had not committed by the caller's deadline; the turn \
                             commits with it, or not"
                        .to_owned(),
                })
            })
    }

    /// Undoes the member's work and leaves the group to its other members.
    pub(crate) async fn rollback(mut self) -> Result<()> {
        let mut writer = self.writer.take().expect("an open member holds the writer");
        if self.poisoned {
            discard(&mut writer, "a turn in it was abandoned mid-statement").await;
            return Ok(());
        }
        if let Err(error) = undo_member(&mut writer).await {
            let why = format!("rolling back a turn's savepoint failed: {error}");
            discard(&mut writer, &why).await;
            return Err(error);
        }
        if writer.group.is_some() {
            let due = self.shared.should_commit(&writer);
            self.shared.pass_on(writer, due);
        }
        Ok(())
    }

    /// Marks the member's connection as in an unknown state (its handler was abandoned
    /// mid-statement): its group is rolled back and the connection closed.
    pub(crate) fn poison(&mut self) {
        self.poisoned = true;
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        let Some(mut writer) = self.writer.take() else {
            return;
        };
        if self.poisoned {
            writer.in_doubt = true;
        } else if self.open && !writer.in_doubt {
            writer.abandoned = true;
        }
        drop(writer);
        self.shared.flush.notify_one();
    }
}

/// Waits for the group's end and says what its member hears.
async fn group_end(mut end: watch::Receiver<Option<GroupEnd>>) -> Result<()> {
    let ended = end.wait_for(Option::is_some).await.map(|end| end.clone());
    match ended {
        Ok(Some(end)) => end.into_result(),
        Ok(None) | Err(_) => Err(Error::GroupCommitFailed {
            reason: "the group's commit was abandoned (the runtime is shutting down)".to_owned(),
        }),
    }
}

/// The error a member of a group the runtime rolled back hears.
fn rolled_back(why: &str) -> Error {
    Error::GroupRolledBack {
        reason: why.to_owned(),
    }
}
