//! The statements of the operators' charts, and the trait that runs them on any backend:
//! what finished, failed and waited in each slice of a window of time, counted at read time
//! from the rows the runtime keeps anyway (a turn writes no tally of its own).
//!
//! A window is `[from, until)` cut into slices of `width` microseconds, `from` and `until`
//! multiples of `width`. A time's slice is named by its start, `at - at % width`; a time
//! before the window counts in the slice `from - width`, "before the window".
//!
//! What finished and failed is counted per slice by a range count on an index, not by
//! grouping the window's rows (a sort of every row on SQLite; MySQL groups them, see
//! [`outcomes`]). What waited at the end of each
//! slice is what started by then and had not ended by then; a message that started and ended
//! in the same slice never waited at a slice's end, so only those that waited across a
//! slice's end are grouped, with those waiting now. Each statement reads one index:
//!
//! | statement | index |
//! |---|---|
//! | [`outcomes`] | `solid_messages_finished` (status, finished at, enqueued at, actor), `solid_failed_attempts_at` |
//! | [`messages_across_slices`] | `solid_messages_finished` |
//! | [`waiting_messages`] | `solid_messages_ready` (the ready messages) |
//! | [`fired_reminders`], [`reminder_lateness`] | `solid_messages_reminders` (fired reminders' finished messages; on MySQL, `solid_messages_finished`, which has their due times there) |
//! | [`due_reminders`] | `solid_reminders_due` |
//! | [`effects_across_slices`] | `solid_effects_finished` (status, finished at, emitted at) |
//! | [`waiting_effects`] | `solid_effects_due` (the ready and running effects) |
//! | [`actor_outcomes`] | `solid_messages_finished` (its actor columns filter the window's range), `solid_failed_attempts_actor` |
//!
//! The statements run one after another, not in one snapshot: a turn that commits between
//! two of them may be missing from (or counted twice in) the backlog of that moment, never
//! from what finished.

use async_trait::async_trait;

use std::sync::LazyLock;

use super::dialect::PerDialect;
use super::query::{get, query, Dialect, Row};
use super::{ActorKey, ReadConnections};
use crate::error::Result;

/// The slice of the time `at` as every statement names it: the start of the slice it is in,
/// or `$1 - $3` for a time before the window `[$1, $2)` of slices `$3` wide.
fn slice_of(at: &str) -> String {
    format!("CASE WHEN {at} < $1 THEN $1 - $3 ELSE {at} - {at} % $3 END")
}

/// The slices of `[from, until)`, `width` wide, as a table `slices (slice)` of their starts.
fn slices(from: &str, until: &str, width: &str) -> String {
    format!(
        "WITH RECURSIVE slices (slice) AS (SELECT {from} UNION ALL SELECT slice + {width} \
         FROM slices WHERE slice + {width} < {until}) "
    )
}

/// How many messages of `status` (and of the actor `actor` names, if it names one) finished in
/// the slice `slice` of width `width`, as a column named for the status.
fn finished_in_slice(actor: &str, status: &str, width: &str) -> String {
    format!(
        "(SELECT COUNT(*) FROM solid_messages WHERE {actor}status <> 'ready' \
         AND status = '{status}' AND finished_at >= slice AND finished_at < slice + {width}) \
         AS {status}"
    )
}

/// The columns of [`outcomes`] from events (`slice`, `kind`: a status, or `failed`) grouped by
/// slice (MySQL).
const OUTCOMES_BY_SLICE: &str = "SELECT slice,
        COUNT(CASE WHEN kind = 'completed' THEN 1 END) AS completed,
        COUNT(CASE WHEN kind = 'rejected' THEN 1 END) AS rejected,
        COUNT(CASE WHEN kind = 'dead' THEN 1 END) AS dead,
        COUNT(CASE WHEN kind = 'failed' THEN 1 END) AS failed_attempts ";

/// The counts of one actor's (`$1`, `$2`) slices: its condition, before a status.
const THE_ACTOR: &str = "actor_type = $1 AND actor_id = $2 AND ";

// solid_messages and solid_failed_attempts.

/// For each slice `$3` wide of `[$1, $2)`: the messages that completed, were rejected and
/// became dead letters in it, and the attempts that failed in it. SQLite and PostgreSQL count
/// each slice's range of the index; MySQL, which reads no range of an index for a value of the
/// outer query (it would read a status's every row for each slice), groups the window's rows.
pub(crate) fn outcomes(dialect: Dialect) -> &'static str {
    static OUTCOMES: PerDialect = PerDialect::new(|dialect| match dialect {
        Dialect::Sqlite | Dialect::Postgres => format!(
            "{}SELECT slice, {}, {}, {}, (SELECT COUNT(*) FROM solid_failed_attempts
                 WHERE failed_at >= slice AND failed_at < slice + $3) AS failed_attempts
             FROM slices ORDER BY slice",
            slices("$1", "$2", "$3"),
            finished_in_slice("", "completed", "$3"),
            finished_in_slice("", "rejected", "$3"),
            finished_in_slice("", "dead", "$3"),
        ),
        Dialect::MySql => format!(
            "{OUTCOMES_BY_SLICE}FROM (SELECT finished_at - finished_at % $3 AS slice, status AS kind
                   FROM solid_messages
                   WHERE status IN ('completed', 'rejected', 'dead')
                     AND finished_at >= $1 AND finished_at < $2
                   UNION ALL
                   SELECT failed_at - failed_at % $3 AS slice, 'failed' AS kind
                   FROM solid_failed_attempts WHERE failed_at >= $1 AND failed_at < $2
             ) AS events GROUP BY slice ORDER BY slice"
        ),
    });
    OUTCOMES.get(dialect)
}

/// For each slice `$5` wide of `[$3, $4)`: the actor's (`$1`, `$2`) messages that completed,
/// were rejected and became dead letters in it, and its attempts that failed in it (as
/// [`outcomes`] counts them).
pub(crate) fn actor_outcomes(dialect: Dialect) -> &'static str {
    static ACTOR_OUTCOMES: PerDialect = PerDialect::new(|dialect| match dialect {
        Dialect::Sqlite | Dialect::Postgres => format!(
            "{}SELECT slice, {}, {}, {}, (SELECT COUNT(*) FROM solid_failed_attempts
                 WHERE actor_type = $1 AND actor_id = $2
                   AND failed_at >= slice AND failed_at < slice + $5) AS failed_attempts
             FROM slices ORDER BY slice",
            slices("$3", "$4", "$5"),
            finished_in_slice(THE_ACTOR, "completed", "$5"),
            finished_in_slice(THE_ACTOR, "rejected", "$5"),
            finished_in_slice(THE_ACTOR, "dead", "$5"),
        ),
        Dialect::MySql => format!(
            "{OUTCOMES_BY_SLICE}FROM (SELECT finished_at - finished_at % $5 AS slice, status AS kind
                   FROM solid_messages
                   WHERE actor_type = $1 AND actor_id = $2
                     AND status IN ('completed', 'rejected', 'dead')
                     AND finished_at >= $3 AND finished_at < $4
                   UNION ALL
                   SELECT failed_at - failed_at % $5 AS slice, 'failed' AS kind
                   FROM solid_failed_attempts
                   WHERE actor_type = $1 AND actor_id = $2
                     AND failed_at >= $3 AND failed_at < $4
             ) AS events GROUP BY slice ORDER BY slice"
        ),
    });
    ACTOR_OUTCOMES.get(dialect)
}

/// The messages that finished in `[$1, $2)` in a later slice than the one they were enqueued
/// in (they waited across a slice's end), by the slice they were enqueued in and the one they
/// finished in, in slices `$3` wide.
pub(crate) fn messages_across_slices() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, finished_at - finished_at % $3 AS ended, COUNT(*) AS count
             FROM solid_messages
             WHERE status <> 'ready' AND status IN ('completed', 'rejected', 'dead', 'destroyed')
               AND finished_at >= $1 AND finished_at < $2
               AND created_at < finished_at - finished_at % $3
             GROUP BY started, ended",
            slice_of("created_at"),
        )
    });
    &TEXT
}

/// The messages waiting now, by the slice they were enqueued in and (a fired reminder's) the
/// slice it was due in, in slices `$3` wide from `$1`. A time at or after `$2` (now, plus one
/// microsecond: stored before the clock stepped back) counts as now: the message waits now.
pub(crate) fn waiting_messages() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started,
                    CASE WHEN scheduled_for IS NULL THEN NULL ELSE {} END AS due,
                    COUNT(*) AS count
             FROM solid_messages
             WHERE status = 'ready'
             GROUP BY started, due",
            slice_of("(CASE WHEN created_at < $2 THEN created_at ELSE $2 - 1 END)"),
            slice_of("(CASE WHEN scheduled_for < $2 THEN scheduled_for ELSE $2 - 1 END)"),
        )
    });
    &TEXT
}

/// Where a statement on fired reminders' finished messages in `[$1, $2)` finds them: the
/// partial index of them on SQLite and PostgreSQL (SQLite reads it only without a list of
/// statuses), `solid_messages_finished` by status on MySQL. `ran` takes only those whose
/// turn ran (not those ended as destroyed); otherwise every one.
fn fired_reminders_finished(dialect: Dialect, ran: bool) -> &'static str {
    match (dialect, ran) {
        (Dialect::Sqlite | Dialect::Postgres, true) => {
            "scheduled_for IS NOT NULL AND status <> 'ready' AND status <> 'destroyed'
             AND finished_at >= $1 AND finished_at < $2"
        }
        (Dialect::MySql, true) => {
            "status IN ('completed', 'rejected', 'dead') AND scheduled_for IS NOT NULL
             AND finished_at >= $1 AND finished_at < $2"
        }
        (Dialect::Sqlite | Dialect::Postgres, false) => {
            "scheduled_for IS NOT NULL AND status <> 'ready'
             AND finished_at >= $1 AND finished_at < $2"
        }
        (Dialect::MySql, false) => {
            "status IN ('completed', 'rejected', 'dead', 'destroyed') AND scheduled_for IS NOT NULL
             AND finished_at >= $1 AND finished_at < $2"
        }
    }
}

/// The fired reminders whose messages ended in `[$1, $2)`, by the slice they were due in and
/// the slice they fired in (their message was enqueued), in slices `$3` wide. A reminder was
/// due until it fired whether its message then ran or was ended as destroyed (its actor was
/// destroyed first), so those count too.
pub(crate) fn fired_reminders(dialect: Dialect) -> &'static str {
    static FIRED_REMINDERS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT {} AS started, {} AS ended, COUNT(*) AS count FROM solid_messages WHERE {}
             GROUP BY started, ended",
            slice_of("scheduled_for"),
            slice_of("created_at"),
            fired_reminders_finished(dialect, false),
        )
    });
    FIRED_REMINDERS.get(dialect)
}

/// For each slice `$3` wide of `[$1, $2)` in which fired reminders' turns ended (completed,
/// rejected or dead): the number of them, and the lateness (end minus due time) of the
/// median's and the 99th percentile's (nearest rank), the median first; one row where they
/// are the same reminder.
pub(crate) fn reminder_lateness(dialect: Dialect) -> &'static str {
    static REMINDER_LATENESS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT slice, lateness, reminders FROM (
                 SELECT finished_at - finished_at % $3 AS slice,
                        finished_at - scheduled_for AS lateness,
                        ROW_NUMBER() OVER (
                            PARTITION BY finished_at - finished_at % $3
                            ORDER BY finished_at - scheduled_for) AS position,
                        COUNT(*) OVER (PARTITION BY finished_at - finished_at % $3)
                            AS reminders
                 FROM solid_messages WHERE {}) AS ranked
             WHERE (2 * position >= reminders AND 2 * (position - 1) < reminders)
                OR (100 * position >= 99 * reminders
                    AND 100 * (position - 1) < 99 * reminders)
             ORDER BY slice, lateness",
            fired_reminders_finished(dialect, true),
        )
    });
    REMINDER_LATENESS.get(dialect)
}

// solid_reminders.

/// The scheduled reminders due before `$2` (now), by the slice they are due in.
pub(crate) fn due_reminders() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, COUNT(*) AS count
             FROM solid_reminders WHERE due_at < $2
             GROUP BY started",
            slice_of("due_at"),
        )
    });
    &TEXT
}

// solid_effects.

/// The effects that finished (done or dead) in `[$1, $2)` in a later slice than the one they
/// were emitted in, by the slice they were emitted in and the one they finished in.
pub(crate) fn effects_across_slices() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, finished_at - finished_at % $3 AS ended, COUNT(*) AS count
             FROM solid_effects
             WHERE status IN ('done', 'dead') AND finished_at >= $1 AND finished_at < $2
               AND created_at < finished_at - finished_at % $3
             GROUP BY started, ended",
            slice_of("created_at"),
        )
    });
    &TEXT
}

/// The effects waiting or running now, by the slice they were emitted in (one emitted at or
/// after `$2`, now plus one microsecond, before the clock stepped back: now's).
pub(crate) fn waiting_effects() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, COUNT(*) AS count
             FROM solid_effects
             WHERE status IN ('ready', 'running')
             GROUP BY started",
            slice_of("(CASE WHEN created_at < $2 THEN created_at ELSE $2 - 1 END)"),
        )
    });
    &TEXT
}

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

/// What finished and failed in one slice (named by its start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SliceOutcomes {
    pub(crate) slice: i64,
    pub(crate) completed: i64,
    pub(crate) rejected: i64,
    pub(crate) dead: i64,
    pub(crate) failed_attempts: i64,
}

/// Things that started waiting in one slice and stopped in another (or wait still).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waited {
    /// The slice they started waiting in (before the window: `from - width`).
    pub(crate) started: i64,
    /// The slice they stopped in; `None` while they wait.
    pub(crate) ended: Option<i64>,
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
    /// Each slice's outcomes, in order.
    pub(crate) outcomes: Vec<SliceOutcomes>,
    /// Messages that waited across a slice's end, or wait now.
    pub(crate) ready_messages: Vec<Waited>,
    /// Reminders that were due across a slice's end before they fired, or are due now.
    pub(crate) due_reminders: Vec<Waited>,
    /// Effects that were pending across a slice's end, or are now.
    pub(crate) pending_effects: Vec<Waited>,
    /// Per slice, the median's and the 99th percentile's lateness, the median first.
    pub(crate) lateness: Vec<RankedLateness>,
}

/// The operators' charts' reads, without locking anything.
#[async_trait]
pub(crate) trait ActivityReads: Send + Sync {
    /// What finished, failed and waited in each slice of `span`, and how late reminders ran.
    async fn activity(&self, span: Span) -> Result<ActivityRows>;

    /// What finished and failed in each slice of `span` for one actor, in order.
    async fn actor_activity(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<Vec<SliceOutcomes>>;
}

/// A row of [`outcomes`] or [`actor_outcomes`].
fn slice_outcomes(row: &Row) -> Result<SliceOutcomes> {
    Ok(SliceOutcomes {
        slice: get(row, "slice")?,
        completed: get(row, "completed")?,
        rejected: get(row, "rejected")?,
        dead: get(row, "dead")?,
        failed_attempts: get(row, "failed_attempts")?,
    })
}

/// A `(started, ended, count)` row; `ended` is `None` where the statement has none.
fn waited(row: &Row, ended: bool) -> Result<Waited> {
    Ok(Waited {
        started: get(row, "started")?,
        ended: if ended {
            Some(get(row, "ended")?)
        } else {
            None
        },
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
        let dialect = self.dialect();
        for row in finished(outcomes(dialect))
            .fetch_all(self.readers())
            .await?
        {
            rows.outcomes.push(slice_outcomes(&row)?);
        }
        for row in finished(messages_across_slices())
            .fetch_all(self.readers())
            .await?
        {
            rows.ready_messages.push(waited(&row, true)?);
        }
        for row in waiting(waiting_messages())
            .fetch_all(self.readers())
            .await?
        {
            rows.ready_messages.push(waited(&row, false)?);
            // A fired reminder's message waits: the reminder was due until it fired.
            if let Some(due) = get::<Option<i64>>(&row, "due")? {
                rows.due_reminders.push(Waited {
                    started: due,
                    ended: Some(get(&row, "started")?),
                    count: get(&row, "count")?,
                });
            }
        }
        for row in finished(fired_reminders(dialect))
            .fetch_all(self.readers())
            .await?
        {
            rows.due_reminders.push(waited(&row, true)?);
        }
        for row in waiting(due_reminders()).fetch_all(self.readers()).await? {
            rows.due_reminders.push(waited(&row, false)?);
        }
        for row in finished(effects_across_slices())
            .fetch_all(self.readers())
            .await?
        {
            rows.pending_effects.push(waited(&row, true)?);
        }
        for row in waiting(waiting_effects()).fetch_all(self.readers()).await? {
            rows.pending_effects.push(waited(&row, false)?);
        }
        for row in finished(reminder_lateness(dialect))
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
    ) -> Result<Vec<SliceOutcomes>> {
        let rows = query(actor_outcomes(self.dialect()))
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(span.from)
            .bind(span.until)
            .bind(span.width)
            .fetch_all(self.readers())
            .await?;
        rows.iter().map(slice_outcomes).collect()
    }
}
