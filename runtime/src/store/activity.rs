//! The statements of the operators' charts, and the trait that runs them on any backend:
//! what finished, failed and waited in each slice of a window of time, read from the tallies
//! of its minutes ([`activity_tallies`](super::activity_tallies)) and, for the minutes the
//! upkeep has not folded yet, from the rows that finished since the fold mark.
//!
//! A window is `[from, until)` cut into slices of `width` microseconds, `from` and `until`
//! multiples of `width` (and of a minute). A time's slice is named by its start,
//! `at - at % width`; a time before the window counts in the slice `from - width`, "before
//! the window".
//!
//! What finished and failed, and where each finished thing started and stopped waiting, is
//! one statement ([`activity_tallies`], [`actor_tallies`]): the tallies of the window's
//! minutes, and what the rows that finished from the fold mark on count as, in one snapshot,
//! so a fold that commits meanwhile is counted once. What waited at the end of a slice is
//! what waits now and started by then ([`waiting_messages`], [`due_reminders`],
//! [`waiting_effects`], which read only what waits), and every thing that stopped waiting
//! after that slice less every thing that started after it. Each statement reads its minutes
//! or what waits, never the window's rows:
//!
//! | statement | reads |
//! |---|---|
//! | [`activity_tallies`] | `solid_activity` (the window's minutes); the rows since the fold mark (`solid_activity_folded`'s one row, in a scalar subquery) as [`events`](super::activity_tallies::events) reads them |
//! | [`actor_tallies`] | `solid_actor_activity` (the actor's minutes); since the fold mark, `solid_messages_finished`, `solid_failed_attempts_actor` |
//! | [`waiting_messages`] | `solid_messages_ready` (the ready messages) |
//! | [`due_reminders`] | `solid_reminders_due` |
//! | [`waiting_effects`] | `solid_effects_due` (the ready and running effects) |
//!
//! The statements of a window run one after another, not in one snapshot: a turn that
//! commits between two of them may be missing from (or counted twice in) the backlog of that
//! moment, never from what finished.

use async_trait::async_trait;

use std::sync::LazyLock;

use super::activity_tallies::{
    events, Placing, COMPLETED, DEAD, DESTROYED, EFFECT_IN, EFFECT_OUT, FAILED, FOLD_MARK,
    LATENESS, MESSAGE_IN, REJECTED, REMINDER_IN, REMINDER_OUT,
};
use super::dialect::PerDialect;
use super::query::{get, query, Dialect, Row};
use super::{ActorKey, ReadConnections};
use crate::error::Result;

/// The slice of the time `at` in the window that starts at `from` (a parameter), in slices
/// `width` wide: the start of the slice it is in, or `from - width` for a time before the
/// window.
fn slice_of(at: &str, from: &str, width: &str) -> String {
    format!("(CASE WHEN {at} < {from} THEN {from} - {width} ELSE {at} - {at} % {width} END)")
}

/// The first finish time the rows are counted from in a window starting at `from`: the
/// fold mark, or the window's start if that is later.
///
/// A scalar subquery, not a join of the mark's row: a server's planner then takes it as one
/// value that starts a range of the index on the rows' finish time (PostgreSQL, given the
/// mark as a join's column, estimated a third of the table past it and read the effects
/// whole), and the statement still reads the mark and the rows in one snapshot.
fn unfolded_from(from: &str) -> String {
    format!(
        "(SELECT CASE WHEN folded_until > {from} THEN folded_until ELSE {from} END
          FROM solid_activity_folded WHERE id = 1)"
    )
}

/// For each slice `$3` wide of `[$1, $2)`, and what started waiting before it: the counts of
/// each kind and lateness bucket of the whole database's tally, from its minutes and from the
/// rows that finished since the fold mark.
pub(crate) fn activity_tallies(dialect: Dialect) -> &'static str {
    static ACTIVITY_TALLIES: PerDialect = PerDialect::new(|dialect| {
        let at = |at: &str| slice_of(at, "$1", "$3");
        let from = unfolded_from("$1");
        let events = events(
            dialect,
            &Placing {
                at: &at,
                from: &from,
                until: "$2",
            },
        );
        format!(
            "SELECT slot, kind, bucket, {sum} AS count FROM (
                 SELECT {minute} AS slot, kind, bucket, count FROM solid_activity
                 WHERE minute >= $1 AND minute < $2
                 UNION ALL
                 {events}) AS tallies
             GROUP BY slot, kind, bucket ORDER BY slot",
            sum = dialect.whole("SUM(count)"),
            minute = at("minute"),
        )
    });
    ACTIVITY_TALLIES.get(dialect)
}

/// For each slice `$5` wide of `[$3, $4)`: the actor's (`$1`, `$2`) messages that completed,
/// were rejected and became dead letters in it, and its attempts that failed in it, as
/// counts of those kinds, from its tally's minutes and the rows since the fold mark.
pub(crate) fn actor_tallies(dialect: Dialect) -> &'static str {
    static ACTOR_TALLIES: PerDialect = PerDialect::new(|dialect| {
        let at = |at: &str| slice_of(at, "$3", "$5");
        format!(
            "SELECT slot, kind, {sum} AS count FROM (
                 SELECT {minute} AS slot, kind, count FROM solid_actor_activity
                 WHERE actor_type = $1 AND actor_id = $2 AND minute >= $3 AND minute < $4
                 UNION ALL
                 SELECT {finished_at} AS slot, status AS kind, COUNT(*) AS count
                 FROM solid_messages
                 WHERE status <> 'ready'
                   AND status IN ('completed', 'rejected', 'dead')
                   AND finished_at >= {from} AND finished_at < $4
                   AND actor_type = $1 AND actor_id = $2
                 GROUP BY slot, kind
                 UNION ALL
                 SELECT {failed_at} AS slot, '{FAILED}' AS kind, COUNT(*) AS count
                 FROM solid_failed_attempts
                 WHERE actor_type = $1 AND actor_id = $2
                   AND failed_at >= {from} AND failed_at < $4
                 GROUP BY slot) AS tallies
             GROUP BY slot, kind ORDER BY slot",
            sum = dialect.whole("SUM(count)"),
            minute = at("minute"),
            finished_at = at("finished_at"),
            failed_at = at("failed_at"),
            from = unfolded_from("$3"),
        )
    });
    ACTOR_TALLIES.get(dialect)
}

/// The messages waiting now, by the slice they were enqueued in and (a fired reminder's,
/// not an operator's retry of one) the slice it was due in, in slices `$3` wide from `$1`. A
/// time at or after `$2` (now, plus one microsecond: stored before the clock stepped back)
/// counts as now: the message waits now.
pub(crate) fn waiting_messages() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started,
                    CASE WHEN scheduled_for IS NULL OR retry_of IS NOT NULL THEN NULL
                         ELSE {} END AS due,
                    COUNT(*) AS count
             FROM solid_messages
             WHERE status = 'ready'
             GROUP BY started, due",
            slice_of(
                "(CASE WHEN created_at < $2 THEN created_at ELSE $2 - 1 END)",
                "$1",
                "$3"
            ),
            slice_of(
                "(CASE WHEN scheduled_for < $2 THEN scheduled_for ELSE $2 - 1 END)",
                "$1",
                "$3"
            ),
        )
    });
    &TEXT
}

// solid_reminders.

/// The scheduled reminders due before `$2` (now), by the slice they are due in.
pub(crate) fn due_reminders() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, COUNT(*) AS count
             FROM solid_reminders WHERE due_at < $2
             GROUP BY started",
            slice_of("due_at", "$1", "$3"),
        )
    });
    &TEXT
}

// solid_effects.

/// The effects waiting or running now, by the slice they were emitted in (one emitted at or
/// after `$2`, now plus one microsecond, before the clock stepped back: now's).
pub(crate) fn waiting_effects() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {} AS started, COUNT(*) AS count
             FROM solid_effects
             WHERE status IN ('ready', 'running')
             GROUP BY started",
            slice_of(
                "(CASE WHEN created_at < $2 THEN created_at ELSE $2 - 1 END)",
                "$1",
                "$3"
            ),
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

/// How many fired reminders' turns ended in a slice with one lateness (to two significant
/// figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LatenessCount {
    pub(crate) slice: i64,
    /// Milliseconds between when they were due and when their turns ended, in the bucket's
    /// two significant figures, rounded down.
    pub(crate) lateness_ms: i64,
    pub(crate) reminders: i64,
}

/// What the statements of a window found, for the whole database.
#[derive(Debug, Clone, Default)]
pub(crate) struct ActivityRows {
    /// Each slice's outcomes, in order (a slice where nothing finished or failed has none).
    pub(crate) outcomes: Vec<SliceOutcomes>,
    /// Messages that waited across a slice's end, or wait now.
    pub(crate) ready_messages: Vec<Waited>,
    /// Reminders that were due across a slice's end before they fired, or are due now.
    pub(crate) due_reminders: Vec<Waited>,
    /// Effects that were pending across a slice's end, or are now.
    pub(crate) pending_effects: Vec<Waited>,
    /// Per slice, how many fired reminders' turns ended with each lateness.
    pub(crate) lateness: Vec<LatenessCount>,
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

    /// Where folding stands: every row that finished before it is in the tallies.
    async fn fold_mark(&self) -> Result<i64>;

    /// How the database plans each statement of [`activity`](Self::activity) and
    /// [`actor_activity`](Self::actor_activity) over `span`: each statement's name and the
    /// steps of its plan, one a line (MySQL's: the table, the access type, the key and
    /// `rows=` the rows it estimates reading).
    async fn activity_plans(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<Vec<(&'static str, Vec<String>)>>;
}

/// The charts' statements, each named and asked for its plan ([`Dialect::explain`]); the
/// first binds an actor before the span.
static EXPLAINED: [(&str, PerDialect); 5] = [
    (
        "actor_tallies",
        PerDialect::new(|dialect| format!("{}{}", dialect.explain(), actor_tallies(dialect))),
    ),
    (
        "activity_tallies",
        PerDialect::new(|dialect| format!("{}{}", dialect.explain(), activity_tallies(dialect))),
    ),
    (
        "waiting_messages",
        PerDialect::new(|dialect| format!("{}{}", dialect.explain(), waiting_messages())),
    ),
    (
        "due_reminders",
        PerDialect::new(|dialect| format!("{}{}", dialect.explain(), due_reminders())),
    ),
    (
        "waiting_effects",
        PerDialect::new(|dialect| format!("{}{}", dialect.explain(), waiting_effects())),
    ),
];

/// One step of a plan, as [`ActivityReads::activity_plans`] gives it.
fn plan_step(dialect: Dialect, row: &Row) -> Result<String> {
    Ok(match dialect {
        Dialect::Sqlite => get(row, "detail")?,
        Dialect::Postgres => get(row, 0)?,
        Dialect::MySql => format!(
            "{} {} {} rows={}",
            get::<Option<String>>(row, "table")?.unwrap_or_default(),
            get::<Option<String>>(row, "type")?.unwrap_or_default(),
            get::<Option<String>>(row, "key")?.unwrap_or_default(),
            // MariaDB's estimate is text; another server's, if not, is left unknown.
            get::<Option<String>>(row, "rows")
                .ok()
                .flatten()
                .unwrap_or_else(|| "?".to_owned()),
        ),
    })
}

/// Adds a count of `kind` in `slice` to the slice's outcomes, if it is an outcome.
fn add_outcome(outcomes: &mut Vec<SliceOutcomes>, slice: i64, kind: &str, count: i64) {
    if ![COMPLETED, REJECTED, DEAD, FAILED].contains(&kind) {
        return;
    }
    if outcomes.last().is_none_or(|last| last.slice != slice) {
        outcomes.push(SliceOutcomes {
            slice,
            ..SliceOutcomes::default()
        });
    }
    if let Some(outcome) = outcomes.last_mut() {
        match kind {
            COMPLETED => outcome.completed += count,
            REJECTED => outcome.rejected += count,
            DEAD => outcome.dead += count,
            _ => outcome.failed_attempts += count,
        }
    }
}

/// A `(started, count)` row of something that waits now, or a `(started, ended, count)` row.
fn waited(row: &Row, ended: Option<i64>) -> Result<Waited> {
    Ok(Waited {
        started: get(row, "started")?,
        ended,
        count: get(row, "count")?,
    })
}

/// Reads the rows of [`activity_tallies`] into `rows`: outcomes by slice; each thing that
/// stopped waiting in a slice as having waited since before the window until then, and each
/// that started as the same, taken back (what waited at a slice's end then adds up to every
/// stop after it less every start after it); and the lateness buckets.
fn read_tallies(rows: &mut ActivityRows, tallies: &[Row], before: i64) -> Result<()> {
    for row in tallies {
        let slice: i64 = get(row, "slot")?;
        let kind: String = get(row, "kind")?;
        let count: i64 = get(row, "count")?;
        let since_before = |count| Waited {
            started: before,
            ended: Some(slice),
            count,
        };
        match kind.as_str() {
            COMPLETED | REJECTED | DEAD => {
                add_outcome(&mut rows.outcomes, slice, &kind, count);
                rows.ready_messages.push(since_before(count));
            }
            DESTROYED => rows.ready_messages.push(since_before(count)),
            FAILED => add_outcome(&mut rows.outcomes, slice, &kind, count),
            MESSAGE_IN => rows.ready_messages.push(since_before(-count)),
            REMINDER_IN => rows.due_reminders.push(since_before(-count)),
            REMINDER_OUT => rows.due_reminders.push(since_before(count)),
            EFFECT_IN => rows.pending_effects.push(since_before(-count)),
            EFFECT_OUT => rows.pending_effects.push(since_before(count)),
            LATENESS => rows.lateness.push(LatenessCount {
                slice,
                lateness_ms: get(row, "bucket")?,
                reminders: count,
            }),
            _ => {}
        }
    }
    rows.outcomes.retain(|outcome| outcome.slice > before);
    Ok(())
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
        let waiting = |statement| bind(statement, span.now.saturating_add(1));
        let mut rows = ActivityRows::default();
        let tallies = bind(activity_tallies(self.dialect()), span.until)
            .fetch_all(self.readers())
            .await?;
        read_tallies(&mut rows, &tallies, span.from - span.width)?;
        for row in waiting(waiting_messages())
            .fetch_all(self.readers())
            .await?
        {
            rows.ready_messages.push(waited(&row, None)?);
            // A fired reminder's message waits: the reminder was due until it fired.
            if let Some(due) = get::<Option<i64>>(&row, "due")? {
                rows.due_reminders.push(Waited {
                    started: due,
                    ended: Some(get(&row, "started")?),
                    count: get(&row, "count")?,
                });
            }
        }
        for row in waiting(due_reminders()).fetch_all(self.readers()).await? {
            rows.due_reminders.push(waited(&row, None)?);
        }
        for row in waiting(waiting_effects()).fetch_all(self.readers()).await? {
            rows.pending_effects.push(waited(&row, None)?);
        }
        Ok(rows)
    }

    async fn actor_activity(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<Vec<SliceOutcomes>> {
        let rows = query(actor_tallies(self.dialect()))
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(span.from)
            .bind(span.until)
            .bind(span.width)
            .fetch_all(self.readers())
            .await?;
        let mut outcomes = Vec::new();
        for row in &rows {
            let kind: String = get(row, "kind")?;
            add_outcome(&mut outcomes, get(row, "slot")?, &kind, get(row, "count")?);
        }
        Ok(outcomes)
    }

    async fn activity_plans(
        &self,
        actor: ActorKey<'_, '_>,
        span: Span,
    ) -> Result<Vec<(&'static str, Vec<String>)>> {
        let dialect = self.dialect();
        let mut plans = Vec::new();
        for (index, (name, explained)) in EXPLAINED.iter().enumerate() {
            let mut statement = query(explained.get(dialect));
            if index == 0 {
                statement = statement.bind(actor.actor_type).bind(actor.actor_id);
            }
            let until = match index {
                0 | 1 => span.until,
                _ => span.now.saturating_add(1),
            };
            let rows = statement
                .bind(span.from)
                .bind(until)
                .bind(span.width)
                .fetch_all(self.readers())
                .await?;
            let steps = rows
                .iter()
                .map(|row| plan_step(dialect, row))
                .collect::<Result<_>>()?;
            plans.push((*name, steps));
        }
        Ok(plans)
    }

    async fn fold_mark(&self) -> Result<i64> {
        let row = query(FOLD_MARK).fetch_optional(self.readers()).await?;
        Ok(row
            .map(|row| get::<i64>(&row, 0))
            .transpose()?
            .unwrap_or_default())
    }
}
