//! The tallies behind the operators' charts, and the statements that write them:
//! `solid_activity` (the whole database's count per minute, kind and lateness bucket),
//! `solid_actor_activity` (each actor's count per minute and kind) and
//! `solid_activity_folded` (the fold mark: every row that finished before it is tallied).
//!
//! A turn writes no tally: its success path is the statements it always had. The workers'
//! upkeep folds the rows that finished in complete minutes ([`fold_activity`],
//! [`fold_actor_activity`]) once those minutes ended a little while ago, and moves the mark in
//! the same transaction; the charts ([`activity`](super::activity)) read the tallies and count
//! the rows that finished since the mark from the rows, in one statement, so a fold that
//! commits meanwhile is counted once. What a row counts as is written once, in [`events`],
//! for both.
//!
//! Each thing that waits (a message in its mailbox, a reminder due and not fired, an effect
//! not done) adds one `*_in` at the minute it started waiting and one `*_out` at the minute it
//! stopped (a message's `_out` is its status); what waited at a minute's end is then what
//! waits now and every `_out` after that minute less every `_in` after it. Transitions that
//! leave no finished row behind are tallied by the transaction that makes them, as the same
//! kinds: a reminder deleted after it was due ([`dropped_reminders`]), and an operator's retry
//! of a dead effect (its first life, and the start of its second: [`add_tallies`]). An
//! operator's retry of a dead letter marks its message (`retry_of`), which counts as a
//! message, not as a reminder that fired again.
//!
//! Folds and the tallies written by transitions upsert in the order of the tally's key, so two
//! of them never wait for each other in a circle.
//!
//! | statement | reads | writes |
//! |---|---|---|
//! | [`fold_activity`] | `solid_messages_finished`, `solid_messages_reminders` (MySQL: `solid_messages_finished`), `solid_failed_attempts_at`, `solid_effects_finished` | `solid_activity` |
//! | [`fold_actor_activity`] | `solid_messages_finished`, `solid_failed_attempts_at` | `solid_actor_activity` |
//! | [`dropped_reminders`] | the reminders being deleted | `solid_activity` |
//! | [`PRUNE_ACTIVITY`], [`PRUNE_ACTOR_ACTIVITY`] | their minutes | both tallies |

use async_trait::async_trait;

use super::dialect::PerDialect;
use super::query::{built, get, query, Dialect, Value};
use super::WriteConnection;
use crate::error::Result;

/// A minute, in microseconds: a tally's span.
pub(crate) const MINUTE: i64 = 60_000_000;

/// A message that completed: its kind is its status (and so are `rejected`, `dead`, and
/// `destroyed`, a message ended because its actor was destroyed first).
pub(crate) const COMPLETED: &str = "completed";
/// A message a handler rejected.
pub(crate) const REJECTED: &str = "rejected";
/// A message that became a dead letter.
pub(crate) const DEAD: &str = "dead";
/// A message ended because its actor was destroyed before it ran.
pub(crate) const DESTROYED: &str = "destroyed";
/// An attempt that failed.
pub(crate) const FAILED: &str = "failed";
/// A finished message, at the minute it was enqueued (or, enqueued after it finished by a
/// clock that stepped back, at its finish).
pub(crate) const MESSAGE_IN: &str = "message_in";
/// A reminder that became due (at its due minute; the fired ones at most their firing's).
pub(crate) const REMINDER_IN: &str = "reminder_in";
/// A reminder that stopped being due: it fired, or was deleted.
pub(crate) const REMINDER_OUT: &str = "reminder_out";
/// An effect that became pending: emitted, or retried by an operator.
pub(crate) const EFFECT_IN: &str = "effect_in";
/// An effect that stopped being pending: done, or dead.
pub(crate) const EFFECT_OUT: &str = "effect_out";
/// A fired reminder whose turn ended (completed, rejected or dead), counted in the bucket of
/// how late it ended.
pub(crate) const LATENESS: &str = "lateness";

/// The start of the minute of the time `at`.
pub(crate) fn minute_of(at: &str) -> String {
    format!("({at} - {at} % {MINUTE})")
}

/// The earlier of the times `a` and `b`.
fn earlier(a: &str, b: &str) -> String {
    format!("(CASE WHEN {a} < {b} THEN {a} ELSE {b} END)")
}

/// The bucket of `ms` (milliseconds, not negative): the number to two significant figures,
/// rounded down (below 100, the number itself). The median and 99th percentile of buckets are
/// the buckets of the median and 99th percentile.
fn two_figures(ms: &str) -> String {
    let mut sql = format!("CASE WHEN {ms} < 100 THEN {ms}");
    let (mut unit, mut limit) = (10_i64, 1_000_i64);
    // A lateness in milliseconds is below 10^16 (microseconds fit an i64).
    while limit <= 10_000_000_000_000_000 {
        sql.push_str(&format!(" WHEN {ms} < {limit} THEN {ms} - {ms} % {unit}"));
        unit *= 10;
        limit *= 10;
    }
    sql.push_str(&format!(" ELSE {ms} - {ms} % {unit} END"));
    sql
}

/// How a statement places what rows count as: in minutes (a fold) or in a window's slices (a
/// chart), over a range of finish times.
pub(crate) struct Placing<'a> {
    /// The start of the minute or slice of a time.
    pub(crate) at: &'a dyn Fn(&str) -> String,
    /// The first finish time counted: a parameter, or (for a chart) a scalar subquery of the
    /// fold mark, which the planner takes as one value to start a range of the index at.
    pub(crate) from: &'a str,
    /// The finish time counting stops before.
    pub(crate) until: &'a str,
}

/// Where the fired reminders' finished messages of a range are found: the partial index of
/// them on SQLite and PostgreSQL (SQLite reads it only without a list of statuses),
/// `solid_messages_finished` by status on MySQL. `ran` takes only those whose turn ran (not
/// those ended as destroyed). An operator's retry of a dead reminder's message is not a
/// reminder: it is left out.
fn fired_reminders(dialect: Dialect, ran: bool, placing: &Placing<'_>) -> String {
    let statuses = match (dialect, ran) {
        (Dialect::Sqlite | Dialect::Postgres, true) => {
            "scheduled_for IS NOT NULL AND status <> 'ready' AND status <> 'destroyed'"
        }
        (Dialect::MySql, true) => {
            "status IN ('completed', 'rejected', 'dead') AND scheduled_for IS NOT NULL"
        }
        (Dialect::Sqlite | Dialect::Postgres, false) => {
            "scheduled_for IS NOT NULL AND status <> 'ready'"
        }
        (Dialect::MySql, false) => {
            "status IN ('completed', 'rejected', 'dead', 'destroyed') \
             AND scheduled_for IS NOT NULL"
        }
    };
    format!(
        "{statuses} AND finished_at >= {} AND finished_at < {} AND retry_of IS NULL",
        placing.from, placing.until
    )
}

/// The emission and finish times of the effects done or dead in `[from, until)`, read one
/// status at a time: each read is a range of the finished effects' index, whose first column
/// is the status. (PostgreSQL leaves out of its index conditions a condition the partial
/// index's own `WHERE` implies, such as `status IN ('done', 'dead')`, and without one on the
/// status would read the whole index; SQLite reads a partial index only where the statement
/// names its `WHERE`, so the `IN` stays.)
fn finished_effects(from: &str, until: &str) -> String {
    let status = |status: &str| {
        format!(
            "SELECT created_at, finished_at FROM solid_effects
             WHERE status IN ('done', 'dead') AND status = '{status}'
               AND finished_at >= {from} AND finished_at < {until}"
        )
    };
    format!("{}\n UNION ALL\n {}", status("done"), status("dead"))
}

/// What the rows that finished in the range count as, as rows `(slot, kind, bucket, count)`
/// joined by `UNION ALL`: each finished message by status, and where it started waiting;
/// each failed attempt; each fired reminder where it became due and where it fired, and how
/// late its turn ended; each done or dead effect where it was emitted and where it ended.
pub(crate) fn events(dialect: Dialect, placing: &Placing<'_>) -> String {
    let Placing { at, from, until } = *placing;
    let finished = format!(
        "status <> 'ready' AND status IN ('completed', 'rejected', 'dead', 'destroyed')
         AND finished_at >= {from} AND finished_at < {until}"
    );
    let effects = finished_effects(from, until);
    let lateness = format!(
        "(CASE WHEN finished_at > scheduled_for THEN {} ELSE 0 END)",
        dialect.whole_quotient("finished_at - scheduled_for", "1000")
    );
    format!(
        "SELECT {finished_at} AS slot, status AS kind, 0 AS bucket, COUNT(*) AS count
         FROM solid_messages WHERE {finished} GROUP BY slot, kind
         UNION ALL
         SELECT {enqueued} AS slot, '{MESSAGE_IN}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM solid_messages WHERE {finished} GROUP BY slot
         UNION ALL
         SELECT {failed_at} AS slot, '{FAILED}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM solid_failed_attempts
         WHERE failed_at >= {from} AND failed_at < {until} GROUP BY slot
         UNION ALL
         SELECT {due} AS slot, '{REMINDER_IN}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM solid_messages WHERE {fired} GROUP BY slot
         UNION ALL
         SELECT {created_at} AS slot, '{REMINDER_OUT}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM solid_messages WHERE {fired} GROUP BY slot
         UNION ALL
         SELECT slot, '{LATENESS}' AS kind, {bucket} AS bucket, COUNT(*) AS count
         FROM (SELECT {finished_at} AS slot, {lateness} AS late_ms
               FROM solid_messages WHERE {ran}) AS late
         GROUP BY slot, bucket
         UNION ALL
         SELECT {emitted} AS slot, '{EFFECT_IN}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM ({effects}) AS effects GROUP BY slot
         UNION ALL
         SELECT {finished_at} AS slot, '{EFFECT_OUT}' AS kind, 0 AS bucket, COUNT(*) AS count
         FROM ({effects}) AS effects GROUP BY slot",
        finished_at = at("finished_at"),
        enqueued = at(&earlier("created_at", "finished_at")),
        failed_at = at("failed_at"),
        due = at(&earlier("scheduled_for", "created_at")),
        created_at = at("created_at"),
        fired = fired_reminders(dialect, false, placing),
        ran = fired_reminders(dialect, true, placing),
        bucket = two_figures("late_ms"),
        emitted = at(&earlier("created_at", "finished_at")),
    )
}

/// The upsert that adds a row's count to the whole database's tally.
const ADD_TO_ACTIVITY: &str = "ON CONFLICT (minute, kind, bucket) DO UPDATE SET
     count = solid_activity.count + excluded.count";

/// Folds what the rows that finished in `[$1, $2)` (whole minutes) count as into the whole
/// database's tally.
pub(crate) fn fold_activity(dialect: Dialect) -> &'static str {
    static FOLD_ACTIVITY: PerDialect = PerDialect::new(|dialect| {
        let events = events(
            dialect,
            &Placing {
                at: &minute_of,
                from: "$1",
                until: "$2",
            },
        );
        format!(
            "INSERT INTO solid_activity (minute, kind, bucket, count)
             SELECT slot, kind, bucket, count FROM (
                 SELECT slot, kind, bucket, {sum} AS count FROM ({events}) AS events
                 GROUP BY slot, kind, bucket) AS folded
             WHERE true ORDER BY slot, kind, bucket {ADD_TO_ACTIVITY}",
            sum = dialect.whole("SUM(count)"),
        )
    });
    FOLD_ACTIVITY.get(dialect)
}

/// Folds each actor's messages that completed, were rejected or became dead letters in
/// `[$1, $2)` (whole minutes), and its attempts that failed then, into the actors' tally.
pub(crate) fn fold_actor_activity() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "INSERT INTO solid_actor_activity (actor_type, actor_id, minute, kind, count)
             SELECT actor_type, actor_id, slot, kind, count FROM (
                 SELECT actor_type, actor_id, {finished_at} AS slot, status AS kind,
                        COUNT(*) AS count
                 FROM solid_messages
                 WHERE status <> 'ready' AND status IN ('completed', 'rejected', 'dead')
                   AND finished_at >= $1 AND finished_at < $2
                 GROUP BY actor_type, actor_id, slot, kind
                 UNION ALL
                 SELECT actor_type, actor_id, {failed_at} AS slot, '{FAILED}' AS kind,
                        COUNT(*) AS count
                 FROM solid_failed_attempts WHERE failed_at >= $1 AND failed_at < $2
                 GROUP BY actor_type, actor_id, slot) AS folded
             WHERE true ORDER BY actor_type, actor_id, slot, kind
             ON CONFLICT (actor_type, actor_id, minute, kind) DO UPDATE SET
                 count = solid_actor_activity.count + excluded.count",
            finished_at = minute_of("finished_at"),
            failed_at = minute_of("failed_at"),
        )
    });
    &TEXT
}

/// Where folding stands: every row that finished before it is tallied.
pub(crate) const FOLD_MARK: &str = "SELECT folded_until FROM solid_activity_folded WHERE id = 1";

/// A finish time `time` (a parameter: a message's or an effect's finish, an attempt's
/// failure) as a statement writes it: never before the fold mark, read as the statement runs.
///
/// A row that finished before the mark is in no tally (its minute is folded) and the charts
/// do not count it from the rows either. A host whose clock was set back, or a turn whose
/// handler ran while a fold passed the minute it started in, stamps the mark instead, so its
/// row is counted by the next fold. What is left: a fold that commits between a turn's last
/// statement and its `COMMIT`, past a stamp minutes old.
pub(crate) fn finish_stamp(dialect: Dialect, time: &str) -> String {
    dialect.later_unless_null(time, &format!("({FOLD_MARK})"))
}

/// The fold mark, locked for this transaction's fold; no row where another transaction
/// holds it (another process folds).
pub(crate) fn lock_fold_mark(dialect: Dialect) -> &'static str {
    static LOCK_FOLD_MARK: PerDialect =
        PerDialect::new(|dialect| format!("{FOLD_MARK}{}", dialect.skip_locked()));
    LOCK_FOLD_MARK.get(dialect)
}

/// The fold mark, held against a fold until commit (waiting for one under way).
pub(crate) fn share_fold_mark(dialect: Dialect) -> &'static str {
    static SHARE_FOLD_MARK: PerDialect =
        PerDialect::new(|dialect| format!("{FOLD_MARK}{}", dialect.for_share()));
    SHARE_FOLD_MARK.get(dialect)
}

/// 1 when no other session of this database runs a transaction that took its id before this
/// one (which has one: it locked the fold mark), else 0 (PostgreSQL). Transaction ids are the
/// whole server's; `pg_stat_activity` shows every session's (`backend_xid` is among the
/// columns any role reads), and another database's are no turn of this one. Its figures
/// are read once per transaction unless cleared first ([`CLEAR_ACTIVITY_SNAPSHOT`]).
const OLDER_WRITERS_ENDED: &str = "SELECT CASE WHEN EXISTS (
         SELECT 1 FROM pg_stat_activity this, pg_stat_activity other
         WHERE this.pid = pg_backend_pid() AND other.pid <> this.pid
           AND other.datname = current_database() AND other.backend_xid IS NOT NULL
           AND age(other.backend_xid) > age(this.backend_xid))
     THEN CAST(0 AS BIGINT) ELSE CAST(1 AS BIGINT) END";

/// Makes the next read of `pg_stat_activity` in this transaction read the sessions afresh.
const CLEAR_ACTIVITY_SNAPSHOT: &str = "SELECT pg_stat_clear_snapshot()";

/// Moves the fold mark to `$1`.
pub(crate) const MOVE_FOLD_MARK: &str =
    "UPDATE solid_activity_folded SET folded_until = $1 WHERE id = 1";

/// Most tallies one statement of [`add_tallies`] adds: four bound values each, far inside
/// every backend's limit per statement.
const TALLIES_PER_STATEMENT: usize = 1_000;

/// Adds each `(minute, kind, count)` of `tallies` to the whole database's tally, in the order
/// given (the tally's key order, each key once: two writers never wait for each other in a
/// circle), a statement per [`TALLIES_PER_STATEMENT`].
pub(crate) async fn add_tallies<C: WriteConnection + ?Sized>(
    connection: &mut C,
    tallies: &[(i64, &'static str, i64)],
) -> Result<()> {
    for batch in tallies.chunks(TALLIES_PER_STATEMENT) {
        let dialect = connection.dialect();
        let mut sql =
            String::from("INSERT INTO solid_activity (minute, kind, bucket, count) VALUES ");
        dialect.push_rows(&mut sql, batch.len(), 4);
        let values: Vec<Value<'_>> = batch
            .iter()
            .flat_map(|&(minute, kind, count)| {
                [minute.into(), kind.into(), 0_i64.into(), count.into()]
            })
            .collect();
        sql.push(' ');
        // Built statements are not respelled for MySQL: its upsert is written here.
        sql.push_str(match dialect {
            Dialect::MySql => {
                "ON DUPLICATE KEY UPDATE count = solid_activity.count + VALUES(count)"
            }
            Dialect::Sqlite | Dialect::Postgres => ADD_TO_ACTIVITY,
        });
        connection.counters().statement();
        built(sql, values).execute(connection.on()).await?;
    }
    Ok(())
}

/// A dead effect an operator retries: the times of its first life, and of the retry that
/// starts its second (microseconds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EffectLife {
    pub(crate) created_at: i64,
    pub(crate) died_at: i64,
    pub(crate) retried_at: i64,
}

impl EffectLife {
    /// What the retry adds to the whole database's tally, `(minute, kind, count)` in the
    /// tally's key order, with the fold mark at `mark`.
    ///
    /// The row, made ready again, keeps its emission time: when it ends, a fold counts it as
    /// pending from its emission to that end. So the retry counts its second life's start
    /// and takes back the emission the fold will count; and its first life, which no fold
    /// will see now, unless a fold counted it already (it died before the mark).
    pub(crate) fn tallies(self, mark: i64) -> Vec<(i64, &'static str, i64)> {
        let minute = |at: i64| at - at.rem_euclid(MINUTE);
        let mut tallies = vec![
            (minute(self.retried_at), EFFECT_IN, 1),
            (minute(self.created_at), EFFECT_IN, -1),
        ];
        if self.died_at >= mark {
            tallies.push((minute(self.created_at.min(self.died_at)), EFFECT_IN, 1));
            tallies.push((minute(self.died_at), EFFECT_OUT, 1));
        }
        in_key_order(tallies)
    }
}

/// The tallies `tallies`, `(minute, kind, count)`, in the tally's key order, those of one key
/// added into one and those that add nothing left out.
pub(crate) fn in_key_order(
    mut tallies: Vec<(i64, &'static str, i64)>,
) -> Vec<(i64, &'static str, i64)> {
    tallies.sort_unstable_by_key(|(minute, kind, _)| (*minute, *kind));
    tallies.dedup_by(|later, earlier| {
        let same = (later.0, later.1) == (earlier.0, earlier.1);
        if same {
            earlier.2 += later.2;
        }
        same
    });
    tallies.retain(|(_, _, count)| *count != 0);
    tallies
}

/// The tally of the reminders `source` (a table and the start of its `WHERE`) that were due
/// before `now_minute` (the start of the minute they are deleted in): each is due from its
/// due minute until that minute. A reminder due in the minute it is deleted never was at a
/// minute's end.
pub(crate) fn dropped_reminders(source: &str, now_minute: &str) -> String {
    format!(
        "INSERT INTO solid_activity (minute, kind, bucket, count)
         SELECT slot, kind, 0, count FROM (
             SELECT {due} AS slot, '{REMINDER_IN}' AS kind, COUNT(*) AS count
             FROM {source} AND due_at < {now_minute} GROUP BY slot
             UNION ALL
             SELECT {now_minute} AS slot, '{REMINDER_OUT}' AS kind, COUNT(*) AS count
             FROM {source} AND due_at < {now_minute} HAVING COUNT(*) > 0) AS dropped
         WHERE true ORDER BY slot, kind {ADD_TO_ACTIVITY}",
        due = minute_of("due_at"),
    )
}

/// Deletes the whole database's tallies of minutes before `$1`.
pub(crate) const PRUNE_ACTIVITY: &str = "DELETE FROM solid_activity WHERE minute < $1";

/// Deletes the actors' tallies of minutes before `$1`.
pub(crate) const PRUNE_ACTOR_ACTIVITY: &str = "DELETE FROM solid_actor_activity WHERE minute < $1";

/// The upkeep's writes to the tallies, inside a transaction.
#[async_trait]
pub(crate) trait TallyWrites: Send {
    /// The fold mark, locked for a fold until commit; `None` while another transaction
    /// holds it.
    async fn lock_fold_mark(&mut self) -> Result<Option<i64>>;

    /// Whether every transaction that began writing before this one has ended, so a fold
    /// that reads now sees every row stamped under the mark it holds: on PostgreSQL, whether
    /// no session of this database runs an older one; always on SQLite, whose one writer this
    /// is, and on MySQL, which does not tell it (there a turn that stamped under the old mark
    /// and commits after the fold is the known limit).
    async fn older_writers_ended(&mut self) -> Result<bool>;

    /// Folds the rows that finished in `[from, until)` (whole minutes, from the fold mark)
    /// into the tallies; returns how many tally rows it wrote (0: nothing finished then).
    async fn fold_activity(&mut self, from: i64, until: i64) -> Result<u64>;

    /// Moves the fold mark to `until`: every row that finished before it is tallied.
    async fn move_fold_mark(&mut self, until: i64) -> Result<()>;

    /// Deletes the tallies of minutes before `before`; returns how many rows.
    async fn prune_tallies(&mut self, before: i64) -> Result<u64>;
}

#[async_trait]
impl<T: WriteConnection> TallyWrites for T {
    async fn lock_fold_mark(&mut self) -> Result<Option<i64>> {
        self.counters().statement();
        let row = query(lock_fold_mark(self.dialect()))
            .fetch_optional(self.on())
            .await?;
        Ok(row.map(|row| get(&row, 0)).transpose()?)
    }

    async fn older_writers_ended(&mut self) -> Result<bool> {
        if self.dialect() != Dialect::Postgres {
            return Ok(true);
        }
        self.counters().statement();
        query(CLEAR_ACTIVITY_SNAPSHOT).execute(self.on()).await?;
        self.counters().statement();
        let ended: i64 = query(OLDER_WRITERS_ENDED).fetch_scalar(self.on()).await?;
        Ok(ended == 1)
    }

    async fn fold_activity(&mut self, from: i64, until: i64) -> Result<u64> {
        self.counters().statement();
        let activity = query(fold_activity(self.dialect()))
            .bind(from)
            .bind(until)
            .execute(self.on())
            .await?;
        self.counters().statement();
        let actors = query(fold_actor_activity())
            .bind(from)
            .bind(until)
            .execute(self.on())
            .await?;
        Ok(activity.rows_affected + actors.rows_affected)
    }

    async fn move_fold_mark(&mut self, until: i64) -> Result<()> {
        self.counters().statement();
        query(MOVE_FOLD_MARK).bind(until).execute(self.on()).await?;
        Ok(())
    }

    async fn prune_tallies(&mut self, before: i64) -> Result<u64> {
        self.counters().statement();
        let activity = query(PRUNE_ACTIVITY)
            .bind(before)
            .execute(self.on())
            .await?;
        self.counters().statement();
        let actors = query(PRUNE_ACTOR_ACTIVITY)
            .bind(before)
            .execute(self.on())
            .await?;
        Ok(activity.rows_affected + actors.rows_affected)
    }
}
