//! The statements of the operators' charts, and the trait that runs them on any backend:
//! what finished, failed and waited in each slice of a window of time, counted at read time
//! from the rows the runtime keeps anyway (a turn writes no tally of its own).
//!
//! A window is `[from, until)` cut into slices of `width` microseconds, `from` and `until`
//! multiples of `width`. A time's slice is named by its start, `at - at % width`; a time
//! before the window counts in the slice `from - width`, "before the window". Each statement
//! reads one index and groups what it finds by slice, so a statement returns a row per slice
//! (and status), however many rows the window holds:
//!
//! | statement | index |
//! |---|---|
//! | [`FINISHED_MESSAGES`], [`REMINDER_LATENESS`] | `solid_messages_finished` (status, finished at, enqueued at, due at) |
//! | [`WAITING_MESSAGES`] | `solid_messages_ready` (the ready messages) |
//! | [`DUE_REMINDERS`] | `solid_reminders_due` |
//! | [`FINISHED_EFFECTS`] | `solid_effects_finished` (status, finished at, emitted at) |
//! | [`WAITING_EFFECTS`] | `solid_effects_due` (the ready and running effects) |
//! | [`FAILED_ATTEMPTS`] | `solid_failed_attempts_at` |
//! | [`ACTOR_FINISHED`] | `solid_messages_actor_finished` (type, id, finished at, status) |
//! | [`ACTOR_FAILED_ATTEMPTS`] | `solid_failed_attempts_actor` |
//!
//! The statements run one after another, not in one snapshot: a turn that commits between
//! two of them may be missing from (or counted twice in) the backlog of that moment, never
//! from what finished.

use async_trait::async_trait;

use super::query::{get, query, Row};
use super::{ActorKey, ReadConnections};
use crate::error::Result;

/// The slice of the time `$at` as every statement names it: the start of the slice it is in,
/// or `$1 - $3` for a time before the window `[$1, $2)` of slices `$3` wide.
macro_rules! slice_of {
    ($at:literal) => {
        concat!(
            "CASE WHEN ",
            $at,
            " < $1 THEN $1 - $3 ELSE ",
            $at,
            " - ",
            $at,
            " % $3 END"
        )
    };
}

// solid_messages.

/// The messages that finished in `[$1, $2)`, by status, the slice they finished in, the slice
/// they were enqueued in and (a fired reminder's) the slice it was due in, in slices `$3`
/// wide.
pub(crate) const FINISHED_MESSAGES: &str = concat!(
    "SELECT status, finished_at - finished_at % $3 AS finished_slice, ",
    slice_of!("created_at"),
    " AS created_slice, CASE WHEN scheduled_for IS NULL THEN NULL ELSE ",
    slice_of!("scheduled_for"),
    " END AS due_slice, COUNT(*) AS count
     FROM solid_messages
     WHERE status <> 'ready' AND status IN ('completed', 'rejected', 'dead', 'destroyed')
       AND finished_at >= $1 AND finished_at < $2
     GROUP BY status, finished_slice, created_slice, due_slice"
);

/// The messages waiting now (enqueued before `$2`, now), by the slice they were enqueued in
/// and (a fired reminder's) the slice it was due in, in slices `$3` wide from `$1`.
pub(crate) const WAITING_MESSAGES: &str = concat!(
    "SELECT ",
    slice_of!("created_at"),
    " AS created_slice, CASE WHEN scheduled_for IS NULL THEN NULL ELSE ",
    slice_of!("scheduled_for"),
    " END AS due_slice, COUNT(*) AS count
     FROM solid_messages
     WHERE status = 'ready' AND created_at < $2
     GROUP BY created_slice, due_slice"
);

/// For each slice `$3` wide of `[$1, $2)` in which fired reminders' turns ended (completed,
/// rejected or dead): the number of them, and the lateness (end minus due time) of the
/// median's and the 99th percentile's (nearest rank), the median first; one row where they
/// are the same reminder.
pub(crate) const REMINDER_LATENESS: &str = "SELECT slice, lateness, reminders FROM (
         SELECT finished_at - finished_at % $3 AS slice,
                finished_at - scheduled_for AS lateness,
                ROW_NUMBER() OVER (
                    PARTITION BY finished_at - finished_at % $3
                    ORDER BY finished_at - scheduled_for) AS position,
                COUNT(*) OVER (PARTITION BY finished_at - finished_at % $3) AS reminders
         FROM solid_messages
         WHERE status <> 'ready' AND status IN ('completed', 'rejected', 'dead')
           AND finished_at >= $1 AND finished_at < $2 AND scheduled_for IS NOT NULL
     ) AS ranked
     WHERE (2 * position >= reminders AND 2 * (position - 1) < reminders)
        OR (100 * position >= 99 * reminders AND 100 * (position - 1) < 99 * reminders)
     ORDER BY slice, lateness";

/// The messages of the actor (`$1`, `$2`) that finished in `[$3, $4)`, by status and the
/// slice `$5` wide they finished in.
pub(crate) const ACTOR_FINISHED: &str =
    "SELECT status, finished_at - finished_at % $5 AS slice, COUNT(*) AS count
     FROM solid_messages
     WHERE actor_type = $1 AND actor_id = $2 AND status <> 'ready'
       AND finished_at >= $3 AND finished_at < $4
     GROUP BY status, slice";

// solid_reminders.

/// The scheduled reminders due before `$2` (now), by the slice they are due in.
pub(crate) const DUE_REMINDERS: &str = concat!(
    "SELECT ",
    slice_of!("due_at"),
    " AS slice, COUNT(*) AS count
     FROM solid_reminders WHERE due_at < $2
     GROUP BY slice"
);

// solid_effects.

/// The effects that finished (done or dead) in `[$1, $2)`, by the slice they finished in and
/// the slice they were emitted in.
pub(crate) const FINISHED_EFFECTS: &str = concat!(
    "SELECT finished_at - finished_at % $3 AS finished_slice, ",
    slice_of!("created_at"),
    " AS created_slice, COUNT(*) AS count
     FROM solid_effects
     WHERE status IN ('done', 'dead') AND finished_at >= $1 AND finished_at < $2
     GROUP BY finished_slice, created_slice"
);

/// The effects waiting or running now (emitted before `$2`, now), by the slice they were
/// emitted in.
pub(crate) const WAITING_EFFECTS: &str = concat!(
    "SELECT ",
    slice_of!("created_at"),
    " AS created_slice, COUNT(*) AS count
     FROM solid_effects
     WHERE status IN ('ready', 'running') AND created_at < $2
     GROUP BY created_slice"
);

// solid_failed_attempts.

/// The attempts that failed in `[$1, $2)`, by slice.
pub(crate) const FAILED_ATTEMPTS: &str =
    "SELECT failed_at - failed_at % $3 AS slice, COUNT(*) AS count
     FROM solid_failed_attempts
     WHERE failed_at >= $1 AND failed_at < $2
     GROUP BY slice";

/// The attempts at messages of the actor (`$1`, `$2`) that failed in `[$3, $4)`, by slice.
pub(crate) const ACTOR_FAILED_ATTEMPTS: &str =
    "SELECT failed_at - failed_at % $5 AS slice, COUNT(*) AS count
     FROM solid_failed_attempts
     WHERE actor_type = $1 AND actor_id = $2 AND failed_at >= $3 AND failed_at < $4
     GROUP BY slice";

/// A window of time in slices, in stored microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The start of the first slice: a multiple of `width`.
    pub(crate) from: i64,
    /// The end of the last slice (excluded): a multiple of `width`.
    pub(crate) until: i64,
    /// How long a slice is.
    pub(crate) width: i64,
    /// When the figures are read: what waits is counted as it stands then.
    pub(crate) now: i64,
}

/// How many rows fall in a slice (named by its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SliceCount {
    pub(crate) slice: i64,
    pub(crate) count: i64,
}

/// Messages of one status counted by when they were enqueued, finished and due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageSlices {
    /// `ready` for those waiting now.
    pub(crate) status: String,
    /// The slice they finished in; `None` while they wait.
    pub(crate) finished: Option<i64>,
    /// The slice they were enqueued in.
    pub(crate) created: i64,
    /// A fired reminder's: the slice it was due in.
    pub(crate) due: Option<i64>,
    pub(crate) count: i64,
}

/// Effects counted by when they were emitted and finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EffectSlices {
    /// The slice they finished in; `None` while they wait or run.
    pub(crate) finished: Option<i64>,
    /// The slice they were emitted in.
    pub(crate) created: i64,
    pub(crate) count: i64,
}

/// One percentile's reminder in a slice: its lateness, and how many reminders ran there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RankedLateness {
    pub(crate) slice: i64,
    /// Microseconds between when it was due and when its turn ended.
    pub(crate) lateness: i64,
    pub(crate) reminders: i64,
}

/// What the statements of a window found, for the whole database.
#[derive(Debug, Clone, Default)]
pub(crate) struct ActivityRows {
    /// The messages that finished in the window, then those waiting now.
    pub(crate) messages: Vec<MessageSlices>,
    /// The reminders still scheduled, by the slice they are due in.
    pub(crate) reminders: Vec<SliceCount>,
    /// The effects that finished in the window, then those waiting or running now.
    pub(crate) effects: Vec<EffectSlices>,
    pub(crate) failed_attempts: Vec<SliceCount>,
    /// Per slice, the median's and the 99th percentile's lateness, the median first.
    pub(crate) lateness: Vec<RankedLateness>,
}

/// Messages of one status that finished in a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusSlice {
    pub(crate) status: String,
    pub(crate) slice: i64,
    pub(crate) count: i64,
}

/// What the statements of a window found for one actor.
#[derive(Debug, Clone, Default)]
pub(crate) struct ActorActivityRows {
    /// Its messages that finished in the window.
    pub(crate) finished: Vec<StatusSlice>,
    pub(crate) failed_attempts: Vec<SliceCount>,
}

/// The operators' charts' reads, without locking anything.
#[async_trait]
pub(crate) trait ActivityReads: Send + Sync {
    /// What finished, failed and waited in each slice of `span`, and how late reminders ran.
    async fn activity(&self, span: Span) -> Result<ActivityRows>;

    /// What finished and failed in each slice of `span` for one actor.
    async fn actor_activity(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<ActorActivityRows>;
}

/// A `(slice, count)` row.
fn slice_count(row: &Row) -> Result<SliceCount> {
    Ok(SliceCount {
        slice: get(row, "slice")?,
        count: get(row, "count")?,
    })
}

#[async_trait]
impl<S: ReadConnections> ActivityReads for S {
    async fn activity(&self, span: Span) -> Result<ActivityRows> {
        // What finished is counted up to the window's end; what waits, as it stands now.
        let bind = |statement, until| {
            query(statement)
                .bind(span.from)
                .bind(until)
                .bind(span.width)
        };
        let finished = |statement| bind(statement, span.until);
        let waiting = |statement| bind(statement, span.now.saturating_add(1));
        let mut rows = ActivityRows::default();
        for row in finished(FINISHED_MESSAGES)
            .fetch_all(self.readers())
            .await?
        {
            rows.messages.push(MessageSlices {
                status: get(&row, "status")?,
                finished: Some(get(&row, "finished_slice")?),
                created: get(&row, "created_slice")?,
                due: get(&row, "due_slice")?,
                count: get(&row, "count")?,
            });
        }
        for row in waiting(WAITING_MESSAGES).fetch_all(self.readers()).await? {
            rows.messages.push(MessageSlices {
                status: "ready".to_owned(),
                finished: None,
                created: get(&row, "created_slice")?,
                due: get(&row, "due_slice")?,
                count: get(&row, "count")?,
            });
        }
        for row in waiting(DUE_REMINDERS).fetch_all(self.readers()).await? {
            rows.reminders.push(slice_count(&row)?);
        }
        for row in finished(FINISHED_EFFECTS).fetch_all(self.readers()).await? {
            rows.effects.push(EffectSlices {
                finished: Some(get(&row, "finished_slice")?),
                created: get(&row, "created_slice")?,
                count: get(&row, "count")?,
            });
        }
        for row in waiting(WAITING_EFFECTS).fetch_all(self.readers()).await? {
            rows.effects.push(EffectSlices {
                finished: None,
                created: get(&row, "created_slice")?,
                count: get(&row, "count")?,
            });
        }
        for row in finished(FAILED_ATTEMPTS).fetch_all(self.readers()).await? {
            rows.failed_attempts.push(slice_count(&row)?);
        }
        for row in finished(REMINDER_LATENESS)
            .fetch_all(self.readers())
            .await?
        {
            rows.lateness.push(RankedLateness {
                slice: get(&row, "slice")?,
                lateness: get(&row, "lateness")?,
                reminders: get(&row, "reminders")?,
            });
        }
        Ok(rows)
    }

    async fn actor_activity(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<ActorActivityRows> {
        let bind = |statement| {
            query(statement)
                .bind(actor.actor_type)
                .bind(actor.actor_id)
                .bind(span.from)
                .bind(span.until)
                .bind(span.width)
        };
        let mut rows = ActorActivityRows::default();
        for row in bind(ACTOR_FINISHED).fetch_all(self.readers()).await? {
            rows.finished.push(StatusSlice {
                status: get(&row, "status")?,
                slice: get(&row, "slice")?,
                count: get(&row, "count")?,
            });
        }
        for row in bind(ACTOR_FAILED_ATTEMPTS)
            .fetch_all(self.readers())
            .await?
        {
            rows.failed_attempts.push(slice_count(&row)?);
        }
        Ok(rows)
    }
}
