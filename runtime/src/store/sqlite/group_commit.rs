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
//! Each statement is a hand-off to the connection's worker thread and back, which costs more
//! than most of the turn's SQL: a turn's transaction, whose first statement locks its actor,
//! sends the group's `BEGIN` or its own `SAVEPOINT` in front of that lock, in one hand-off
//! ([`Opening`]). `BEGIN` sets SQLite's busy timeout only when the one on the connection
//! would outlast the transaction's bound; a wait it cut short is waited out again, up to the
//! bound.
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

use futures_util::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Either, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{watch, Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::super::Counters;
use crate::error::{Error, Result};
use crate::limits::deadline_after;
pub(crate) use crate::limits::GroupCommit;
use crate::store::ErrorKinds;

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

/// What a member's first statement carries in front of its own SQL, when its begin left it
/// to that statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// The group's `BEGIN IMMEDIATE`: the member is the first of a new group.
    Begin,
    /// The member's `SAVEPOINT solid_member`: it joins earlier members.
    Savepoint,
    /// Nothing: the member's group and savepoint are open.
    Done,
}

/// A group's open transaction.
struct OpenGroup {
    /// Members that kept their work in the group and wait for its end.
    members: usize,
    /// When its `BEGIN` ran.
    began: Instant,
    end: watch::Sender<Option<GroupEnd>>,
}

impl OpenGroup {
    /// A group whose `BEGIN` ran just now, with no members yet.
    fn begun() -> Self {
        Self {
            members: 0,
            began: Instant::now(),
            end: watch::Sender::new(None),
        }
    }
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
    /// SQLite's busy timeout on the connection: how long its `BEGIN` waits for another
    /// process's write lock.
    busy_timeout: Duration,
}

/// What the store, its members and the flusher share.
struct Shared {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    pool: SqlitePool,
    limits: GroupCommit,
    /// The busy timeout a fresh connection has.
    connect_busy_timeout: Duration,
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
    /// Takes turns on `pool` (of one connection, whose busy timeout is `busy_timeout` when
    /// it connects), whose statements `interrupt` interrupts.
    pub(crate) fn new(
        pool: SqlitePool,
        limits: GroupCommit,
        busy_timeout: Duration,
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
                busy_timeout,
            })),
            pool,
            limits,
            connect_busy_timeout: busy_timeout,
            flush: Notify::new(),
            counters,
            interrupt,
        });
        let flusher = tokio::spawn(flush_abandoned_groups(Arc::downgrade(&shared)));
        Self { shared, flusher }
    }

    /// Joins the open group, or begins one (waiting for the writer until `deadline`, and for
    /// another process's write lock until `busy_until`). `alone`: commits the open group
    /// first and begins one of its own, whose first member has no budget. `locks_first`: the
    /// member's first statement is its actor's lock, which then carries the group's `BEGIN`
    /// or the member's `SAVEPOINT` ([`GroupMember::opening`]).
    pub(crate) async fn begin(
        &self,
        deadline: Instant,
        busy_until: Instant,
        alone: bool,
        locks_first: bool,
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
            busy_until,
            budget: None,
            open: false,
            poisoned: false,
            opening: Opening::Done,
        };
        let writer = member.writer_mut();
        shared.recover(writer).await;
        if alone {
            end_group(writer, &shared.counters).await;
        }
        let (joined, opening) = match &writer.group {
            // The lock sends the BEGIN, unless it must set a shorter busy timeout first.
            None if locks_first
                && writer.connection.is_some()
                && writer.busy_timeout <= remaining(busy_until) =>
            {
                (false, Opening::Begin)
            }
            None => {
                shared
                    .begin_group(writer, deadline, busy_until, false)
                    .await?;
                (false, Opening::Done)
            }
            // The group's first member needs no savepoint: undoing it undoes the group.
            Some(group) if group.members == 0 => (false, Opening::Done),
            Some(_) if locks_first => (true, Opening::Savepoint),
            Some(_) => {
                writer.in_doubt = true;
                run(writer, "SAVEPOINT solid_member").await?;
                writer.in_doubt = false;
                (true, Opening::Done)
            }
        };
        // Earlier members wait for a member that joins them: it gets the group's time budget.
        member.budget = joined.then(|| deadline_after(shared.limits.wait()));
        member.opening = opening;
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

    /// Takes a connection if the writer has none, and begins a group on it, waiting for
    /// another process's write lock until `busy_until` (`exact`: the busy timeout set to the
    /// whole bound from the first try).
    async fn begin_group(
        &self,
        writer: &mut Writer,
        deadline: Instant,
        busy_until: Instant,
        exact: bool,
    ) -> Result<()> {
        if writer.connection.is_none() {
            #[cfg(feature = "simulation")]
            let admitted = crate::simulation::admitted().await;
            let acquired = tokio::time::timeout_at(deadline, self.pool.acquire()).await;
            #[cfg(feature = "simulation")]
            drop(admitted);
            let connection = acquired.map_err(|_| sqlx::Error::PoolTimedOut)??;
            // A fresh connection: a statement abandoned on the last one is gone with it.
            self.interrupt.store(false, Ordering::Release);
            writer.connection = Some(connection);
            writer.busy_timeout = self.connect_busy_timeout;
        }
        let mut exact = exact;
        loop {
            let (begin, busy_timeout) = begin_statement(writer.busy_timeout, busy_until, exact);
            writer.in_doubt = true;
            let begun = run(writer, &begin).await;
            writer.in_doubt = false;
            match begun {
                Ok(()) => {
                    writer.busy_timeout = busy_timeout;
                    writer.group = Some(OpenGroup::begun());
                    return Ok(());
                }
                // A BEGIN the database refused (another process holds the file) leaves no
                // transaction behind; one that gave up before the bound (a busy timeout an
                // earlier, shorter transaction left) waits again, the rest of the bound.
                Err(error) if error.is_busy() => {
                    writer.busy_timeout = busy_timeout;
                    if exact || Instant::now() >= busy_until {
                        return Err(error);
                    }
                    exact = true;
                }
                // Anything else leaves the connection in doubt.
                Err(error) => {
                    discard(writer, "its BEGIN failed").await;
                    return Err(error);
                }
            }
        }
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
            || group.members >= self.limits.turns()
            || group.began.elapsed() >= self.limits.wait()
    }
}

/// How long from now until `until`, at least a millisecond (a zero busy timeout would not
/// wait at all).
fn remaining(until: Instant) -> Duration {
    until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The `BEGIN` of a group on a connection whose busy timeout is `busy_timeout`, for a
/// transaction that waits for another process's write lock until `busy_until`, and the busy
/// timeout the connection has after it.
///
/// The busy timeout is set only when the connection's would outlast the bound; it is then
/// set to seven eighths of the bound, so the next transactions, whose bounds are a moment
/// shorter, find it short enough and send no `PRAGMA`. `exact` sets it to the whole bound:
/// a `BEGIN` that gave up early waits again so.
fn begin_statement(
    busy_timeout: Duration,
    busy_until: Instant,
    exact: bool,
) -> (std::borrow::Cow<'static, str>, Duration) {
    let bound = remaining(busy_until);
    if !exact && busy_timeout <= bound {
        return ("BEGIN IMMEDIATE".into(), busy_timeout);
    }
    let timeout = if exact { bound } else { bound * 7 / 8 };
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
    (
        format!("PRAGMA busy_timeout = {millis}; BEGIN IMMEDIATE").into(),
        Duration::from_millis(millis as u64),
    )
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
    #[cfg(feature = "simulation")]
    let _admitted = crate::simulation::admitted().await;
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
    /// How long its `BEGIN` may wait for another process's write lock.
    busy_until: Instant,
    /// When it must be done by, having joined earlier members who wait for it.
    budget: Option<Instant>,
    /// Whether it began (and so has work of its own to undo if it goes away).
    open: bool,
    /// Its handler was abandoned mid-statement: the group cannot be trusted.
    poisoned: bool,
    /// What its first statement must carry, until that statement ran.
    opening: Opening,
}

impl GroupMember {
    /// The writer connection, for the member's statements once its group and savepoint are
    /// open ([`GroupMember::open`]).
    pub(crate) fn connection(&mut self) -> &mut SqliteConnection {
        if self.opening != Opening::Done {
            // A statement outside the member's savepoint: the group cannot be trusted.
            debug_assert!(false, "a member ran a statement before its opening");
            self.poisoned = true;
        }
        self.writer_mut()
            .connection
            .as_deref_mut()
            .expect("a member holds the writer and its connection until it ends")
    }

    /// What the member's first statement must carry in front of its own SQL: the text of
    /// the query given to [`GroupMember::open_with`].
    pub(crate) fn opening(&self) -> Opening {
        self.opening
    }

    /// Runs `query`, the member's first statement, whose text starts with the statement
    /// [`GroupMember::opening`] named, and returns its first row. Its group and savepoint
    /// are then open, unless the opening statement itself failed: a `BEGIN` refused while
    /// another process holds the file then leaves no transaction, and is sent again alone
    /// ([`GroupMember::open`]); any other failure leaves the connection in doubt.
    pub(crate) async fn open_with<'q>(
        &mut self,
        query: sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>,
    ) -> Result<Option<SqliteRow>> {
        let opening = self.opening;
        let writer = self.writer_mut();
        writer.in_doubt = true;
        let connection = writer
            .connection
            .as_deref_mut()
            .ok_or_else(|| Error::Database(sqlx::Error::PoolClosed))?;
        // The opening statement returns no row: the stream's first step is its end.
        let mut steps = sqlx::Executor::fetch_many(connection, query);
        let mut opened = false;
        let mut first_row = None;
        let ran = loop {
            match steps.try_next().await {
                Ok(Some(step)) => {
                    opened = true;
                    if let (Either::Right(row), None) = (step, &first_row) {
                        first_row = Some(row);
                    }
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(Error::from(error)),
            }
        };
        drop(steps);
        let writer = self.writer_mut();
        if opened {
            writer.in_doubt = false;
            if opening == Opening::Begin {
                writer.group = Some(OpenGroup::begun());
            }
            self.opening = Opening::Done;
        } else if opening == Opening::Begin && ran.as_ref().is_err_and(Error::is_busy) {
            writer.in_doubt = false;
        }
        ran.map(|()| first_row)
    }

    /// Opens the member's group and savepoint with statements of their own, when its
    /// first statement could not carry them ([`GroupMember::open_with`]).
    pub(crate) async fn open(&mut self) -> Result<()> {
        let (deadline, busy_until, opening) = (self.deadline, self.busy_until, self.opening);
        let shared = Arc::clone(&self.shared);
        let writer = self.writer_mut();
        match opening {
            // Its first statement's BEGIN waited the connection's busy timeout: this one
            // waits the rest of the bound.
            Opening::Begin => {
                shared
                    .begin_group(writer, deadline, busy_until, true)
                    .await?;
            }
            Opening::Savepoint => {
                writer.in_doubt = true;
                run(writer, "SAVEPOINT solid_member").await?;
                writer.in_doubt = false;
            }
            Opening::Done => {}
        }
        self.opening = Opening::Done;
        Ok(())
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
        if self.opening != Opening::Done && !self.poisoned {
            // It ran no statement: it has nothing to keep.
            return self.rollback().await;
        }
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
        // A member that ran no statement has nothing to undo.
        let undone = if self.opening == Opening::Done {
            undo_member(&mut writer).await
        } else {
            Ok(())
        };
        if let Err(error) = undone {
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
        } else if self.open && self.opening == Opening::Done && !writer.in_doubt {
            if cancelled_turn_kept() {
                // The defect put back: the turn stays in the group, for whoever takes the
                // writer next to commit with its own (the flusher, a task of its own, would
                // race the next turn's reads).
                return;
            }
            writer.abandoned = true;
        }
        drop(writer);
        self.shared.flush.notify_one();
    }
}

/// Whether a simulation put back the defect of a cancelled turn left in the writer's
/// transaction ([`Defect::CancelledTurnKept`](crate::simulation::Defect)); never elsewhere.
fn cancelled_turn_kept() -> bool {
    #[cfg(feature = "simulation")]
    return crate::simulation::reintroduced(crate::simulation::Defect::CancelledTurnKept);
    #[cfg(not(feature = "simulation"))]
    false
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
