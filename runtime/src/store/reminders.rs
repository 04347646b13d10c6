//! The statements of `solid_reminders` and the traits that run them on any backend:
//! [`ReminderReads`] outside a transaction, [`ReminderWrites`] inside one.
//!
//! Firing a reminder takes no actor's lock: it appends a message and settles the reminder.

use std::sync::OnceLock;

use async_trait::async_trait;

use super::activity_tallies::{
    add_tallies, dropped_reminders, in_key_order, MINUTE, REMINDER_IN, REMINDER_OUT,
};
use super::dialect::PerDialect;
use super::query::{built, get, query, Dialect, Value};
use super::{
    rows, ActorKey, DueReminder, ReadConnections, ReminderRecord, ReminderWrite, WriteConnection,
};
use crate::error::Result;

/// The reminders of the actor (`$1`, `$2`), the next due first.
pub(crate) const ACTOR_REMINDERS: &str =
    "SELECT name, \"key\", due_at, every_micros, missed FROM solid_reminders
     WHERE actor_type = $1 AND actor_id = $2 ORDER BY due_at, name, \"key\"";

/// Stores the actor's (`$1`, `$2`) reminder named `$3` with key `$4`, replacing the one with
/// that name and key (and, with the trace context, the context `$10` of the turn that
/// scheduled it).
pub(crate) const UPSERT_REMINDER: &str = concat!(
    "INSERT INTO solid_reminders
         (actor_type, actor_id, name, \"key\", due_at, arguments, incarnation,
          every_micros, missed",
    traced!(", traceparent"),
    ")
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9",
    traced!(", $10"),
    ")
     ON CONFLICT (actor_type, actor_id, name, \"key\") DO UPDATE SET
         due_at = excluded.due_at, arguments = excluded.arguments,
         incarnation = excluded.incarnation,
         every_micros = excluded.every_micros, missed = excluded.missed",
    traced!(", traceparent = excluded.traceparent")
);

/// When the actor's (`$1`, `$2`) reminder named `$3` with key `$4` is due.
pub(crate) const REMINDER_DUE: &str = "SELECT due_at FROM solid_reminders
     WHERE actor_type = $1 AND actor_id = $2 AND name = $3 AND \"key\" = $4";

/// Reminders a turn deletes: the actor's (`$1`, `$2`) reminder named `$3` with key `$4`
/// (every key, for `NULL`), or every reminder of the actor (`$1`, `$2`) when it is destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doomed<'a> {
    /// The reminder named `name` with `key` (every key, for `None`).
    Named { name: &'a str, key: Option<&'a str> },
    /// Every reminder of the actor.
    Every,
}

impl Doomed<'_> {
    /// Which rows of `solid_reminders` it takes.
    fn condition(self) -> &'static str {
        match self {
            Self::Named { .. } => {
                "actor_type = $1 AND actor_id = $2 AND name = $3 AND ($4 IS NULL OR \"key\" = $4)"
            }
            Self::Every => "actor_type = $1 AND actor_id = $2",
        }
    }

    /// The parameter that holds the start of the minute they are deleted in.
    fn now_minute(self) -> &'static str {
        match self {
            Self::Named { .. } => "$5",
            Self::Every => "$3",
        }
    }

    /// Which of its statements a text is for: 0 for a named reminder, 1 for every one.
    fn index(self) -> usize {
        match self {
            Self::Named { .. } => 0,
            Self::Every => 1,
        }
    }

    /// Its kind, which is all a statement's text depends on (the name and key are bound).
    fn kind(self) -> Doomed<'static> {
        match self {
            Self::Named { .. } => Doomed::Named {
                name: "",
                key: None,
            },
            Self::Every => Doomed::Every,
        }
    }
}

/// A statement written once for each kind of [`Doomed`] at its first use, by `write`.
struct PerDoomed {
    write: fn(Doomed<'static>) -> String,
    texts: [OnceLock<String>; 2],
}

impl PerDoomed {
    /// A statement that `write` writes for a kind of [`Doomed`].
    const fn new(write: fn(Doomed<'static>) -> String) -> Self {
        Self {
            write,
            texts: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// The statement for the kind of `doomed`.
    fn get(&'static self, doomed: Doomed<'_>) -> &'static str {
        self.texts[doomed.index()].get_or_init(|| (self.write)(doomed.kind()))
    }
}

/// Deletes the reminders `doomed` takes, and tallies those that were due before the minute
/// they are deleted in as due until then ([`dropped_reminders`]), in one statement
/// (PostgreSQL).
fn delete_and_tally(doomed: Doomed<'_>) -> &'static str {
    static TEXTS: PerDoomed = PerDoomed::new(delete_and_tally_text);
    TEXTS.get(doomed)
}

/// The text of [`delete_and_tally`].
fn delete_and_tally_text(doomed: Doomed<'_>) -> String {
    format!(
        "WITH gone AS (DELETE FROM solid_reminders WHERE {} RETURNING due_at) {}",
        doomed.condition(),
        dropped_reminders("gone WHERE true", doomed.now_minute()),
    )
}

/// Tallies the reminders `doomed` takes that were due before the minute they are about to be
/// deleted in, locking them first (MySQL, whose `DELETE` returns nothing: a firing under way
/// holds them, and this waits for it and finds them gone).
fn tally_doomed(dialect: Dialect, doomed: Doomed<'_>) -> &'static str {
    static TEXTS: [PerDialect; 2] = [
        PerDialect::new(|dialect| {
            tally_doomed_text(
                dialect,
                Doomed::Named {
                    name: "",
                    key: None,
                },
            )
        }),
        PerDialect::new(|dialect| tally_doomed_text(dialect, Doomed::Every)),
    ];
    TEXTS[doomed.index()].get(dialect)
}

/// The text of [`tally_doomed`].
fn tally_doomed_text(dialect: Dialect, doomed: Doomed<'_>) -> String {
    let source = format!(
        "(SELECT due_at FROM solid_reminders WHERE {}{}) AS doomed WHERE true",
        doomed.condition(),
        dialect.for_update(),
    );
    dropped_reminders(&source, doomed.now_minute())
}

/// Deletes the reminders `doomed` takes (after [`tally_doomed`]), or (`returning`) deletes
/// them and returns their due times, for a backend that returns what a `DELETE` deleted.
fn delete_doomed(doomed: Doomed<'_>, returning: bool) -> &'static str {
    static TEXTS: PerDoomed = PerDoomed::new(|doomed| delete_doomed_text(doomed, ""));
    static RETURNING: PerDoomed =
        PerDoomed::new(|doomed| delete_doomed_text(doomed, " RETURNING due_at"));
    match returning {
        true => RETURNING.get(doomed),
        false => TEXTS.get(doomed),
    }
}

/// The text of [`delete_doomed`].
fn delete_doomed_text(doomed: Doomed<'_>, returning: &str) -> String {
    format!(
        "DELETE FROM solid_reminders WHERE {}{returning}",
        doomed.condition()
    )
}

/// What deleting reminders due at `due` (microseconds) in the minute `now_minute` adds to the
/// whole database's tally, `(minute, kind, count)` in the tally's key order: each reminder due
/// before that minute was due from its due minute until then ([`dropped_reminders`], counted
/// here from the deleted rows instead of before deleting them).
fn dropped_tallies(due: &[i64], now_minute: i64) -> Vec<(i64, &'static str, i64)> {
    let mut tallies: Vec<(i64, &'static str, i64)> = Vec::new();
    let mut overdue: Vec<i64> = due
        .iter()
        .filter(|due| **due < now_minute)
        .map(|due| due - due.rem_euclid(MINUTE))
        .collect();
    overdue.sort_unstable();
    for minute in &overdue {
        match tallies.last_mut() {
            Some((last, _, count)) if last == minute => *count += 1,
            _ => tallies.push((*minute, REMINDER_IN, 1)),
        }
    }
    // Every due minute is before `now_minute`: the `reminder_out` comes last in key order.
    if !overdue.is_empty() {
        let count = i64::try_from(overdue.len()).unwrap_or(i64::MAX);
        tallies.push((now_minute, REMINDER_OUT, count));
    }
    tallies
}

/// What firing reminders that missed occurrences adds to the whole database's tally,
/// `(minute, kind, count)` in the tally's key order: each `(due, occurrence)` is a fired
/// message that was due from `due`, not from the minute of its occurrence, where the fold
/// counts it from. A reminder whose first missed occurrences did not fire was due from its
/// due time; an occurrence that fired after the first as a reminder caught up was due from
/// the firing (until then the reminder was one due reminder).
fn unfired_tallies(unfired: &[(i64, i64)]) -> Vec<(i64, &'static str, i64)> {
    let minute = |at: i64| at - at.rem_euclid(MINUTE);
    in_key_order(
        unfired
            .iter()
            .flat_map(|&(due, occurrence)| {
                [
                    (minute(due), REMINDER_IN, 1),
                    (minute(occurrence), REMINDER_IN, -1),
                ]
            })
            .collect(),
    )
}

/// Up to `$3` reminders due at `$2` whose ids are not in the JSON array `$1` (of strings),
/// earliest first, locked until commit where the backend skips locked rows.
pub(crate) fn due_reminders(dialect: Dialect) -> &'static str {
    static DUE_REMINDERS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT id, due_at, actor_type, actor_id, name, arguments, incarnation,
                    every_micros, missed{}
             FROM solid_reminders
             WHERE due_at <= $2 AND CAST(id AS TEXT) NOT IN ({})
             ORDER BY due_at, id LIMIT $3{}",
            traced!(read "traceparent"),
            dialect.json_texts("$1"),
            dialect.skip_locked(),
        )
    });
    DUE_REMINDERS.get(dialect)
}

/// The start of the delete of fired one-shot reminders: their ids, then `)`, follow.
const DELETE_REMINDERS: &str = "DELETE FROM solid_reminders WHERE id IN (";

/// The start of the move of recurring reminders to their next occurrences (PostgreSQL,
/// SQLite): `VALUES (id, due_at), ..`, then [`MOVE_REMINDERS_END`], follow.
const MOVE_REMINDERS: &str = "WITH moved (id, due_at) AS (";

/// The end of [`MOVE_REMINDERS`].
const MOVE_REMINDERS_END: &str = ") UPDATE solid_reminders
     SET due_at = (SELECT moved.due_at FROM moved
                   WHERE moved.id = solid_reminders.id)
     WHERE id IN (SELECT id FROM moved)";

/// The same on MySQL, which has no common table expression before an `UPDATE`: a derived
/// table of the moves (`SELECT id, due_at UNION ALL ..`), joined; [`MOVE_REMINDERS_END_MYSQL`]
/// follows.
const MOVE_REMINDERS_MYSQL: &str = "UPDATE solid_reminders JOIN (";

/// The end of [`MOVE_REMINDERS_MYSQL`].
const MOVE_REMINDERS_END_MYSQL: &str = ") AS moved ON moved.id = solid_reminders.id
     SET solid_reminders.due_at = moved.due_at";

/// Most reminders one statement deletes or moves.
const ROWS_PER_SETTLE: usize = 1_000;

/// The delete of the one-shot reminders `ids`.
fn delete_reminders(dialect: Dialect, ids: &[i64]) -> super::query::Query<'static> {
    let mut sql = String::from(DELETE_REMINDERS);
    for number in 1..=ids.len() {
        if number > 1 {
            sql.push_str(", ");
        }
        dialect.push_placeholder(&mut sql, number);
    }
    sql.push(')');
    built(sql, ids.iter().map(Value::from).collect())
}

/// The move of recurring reminders (`(id, due_at)`) to their next occurrences.
fn move_reminders(dialect: Dialect, moves: &[(i64, i64)]) -> super::query::Query<'static> {
    let mut sql = String::new();
    let values = moves
        .iter()
        .flat_map(|(id, due_at)| [Value::from(*id), Value::from(*due_at)])
        .collect();
    match dialect {
        Dialect::Sqlite | Dialect::Postgres => {
            sql.push_str(MOVE_REMINDERS);
            sql.push_str("VALUES ");
            dialect.push_rows(&mut sql, moves.len(), 2);
            sql.push_str(MOVE_REMINDERS_END);
        }
        Dialect::MySql => {
            sql.push_str(MOVE_REMINDERS_MYSQL);
            for row in 0..moves.len() {
                if row > 0 {
                    sql.push_str(" UNION ALL ");
                }
                sql.push_str("SELECT ? AS id, ? AS due_at");
            }
            sql.push_str(MOVE_REMINDERS_END_MYSQL);
        }
    }
    built(sql, values)
}

/// Reads of the reminders, outside any write transaction.
#[async_trait]
pub(crate) trait ReminderReads: Send + Sync {
    /// The actor's scheduled reminders, the next due first.
    async fn reminders(&self, actor: ActorKey<'_, '_>) -> Result<Vec<ReminderRecord>>;

    /// Whether any reminder is due by `now` (microseconds): one read of the due index, so an
    /// idle worker's pass begins no transaction to find none.
    async fn any_reminder_due(&self, now: i64) -> Result<bool>;
}

/// The earliest due time of any reminder.
const EARLIEST_DUE: &str = "SELECT MIN(due_at) FROM solid_reminders";

#[async_trait]
impl<S: ReadConnections> ReminderReads for S {
    async fn reminders(&self, actor: ActorKey<'_, '_>) -> Result<Vec<ReminderRecord>> {
        query(ACTOR_REMINDERS)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .fetch_rows(self.readers(), rows::reminder)
            .await
    }

    async fn any_reminder_due(&self, now: i64) -> Result<bool> {
        let row = query(EARLIEST_DUE).fetch_one(self.readers()).await?;
        let earliest: Option<i64> = get(&row, 0)?;
        Ok(earliest.is_some_and(|due_at| due_at <= now))
    }
}

/// A turn's (and a worker's) writes to the reminders, inside a transaction.
#[async_trait]
pub(crate) trait ReminderWrites: Send {
    /// Stores a reminder, replacing the one with the same name and key.
    async fn upsert_reminder(
        &mut self,
        actor: ActorKey<'_, '_>,
        reminder: &ReminderWrite<'_>,
    ) -> Result<()>;

    /// When the reminder with this name and key is due next, if it is scheduled.
    async fn reminder_due(
        &mut self,
        actor: ActorKey<'_, '_>,
        name: &str,
        key: &str,
    ) -> Result<Option<i64>>;

    /// Deletes the reminders `doomed` takes, if any, at `now` (microseconds); the charts keep
    /// each one that was due before this minute as due until it.
    async fn delete_reminders(
        &mut self,
        actor: ActorKey<'_, '_>,
        doomed: Doomed<'_>,
        now: i64,
    ) -> Result<()>;

    /// Returns up to `limit` reminders due at `now`, earliest first, locked until commit
    /// (skipping those another transaction holds, and those whose ids are in `skip`, a JSON
    /// array of ids as strings); a row that does not read is an
    /// [`Error::UnreadableReminder`](crate::Error::UnreadableReminder) in its place. The
    /// catch-up policy is returned as stored: reading it is the caller's.
    async fn due_reminders(
        &mut self,
        now: i64,
        limit: i64,
        skip: &str,
    ) -> Result<Vec<Result<DueReminder>>>;

    /// Settles fired reminders in a statement or two however many they are: deletes the
    /// one-shots (`finished`, by id) and moves each recurring one to its next occurrence
    /// (`moved`, as `(id, due_at)`). A fired message due from another time than its
    /// occurrence's (`unfired`, as that time and the occurrence: see [`unfired_tallies`]) is
    /// tallied so, in statements of their own only then.
    async fn settle_reminders(
        &mut self,
        finished: &[i64],
        moved: &[(i64, i64)],
        unfired: &[(i64, i64)],
    ) -> Result<()>;
}

#[async_trait]
impl<T: WriteConnection> ReminderWrites for T {
    async fn upsert_reminder(
        &mut self,
        actor: ActorKey<'_, '_>,
        reminder: &ReminderWrite<'_>,
    ) -> Result<()> {
        self.counters().statement();
        let upsert = query(UPSERT_REMINDER)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(reminder.name)
            .bind(reminder.key)
            .bind(reminder.due_at)
            .bind(reminder.arguments)
            .bind(reminder.incarnation)
            .bind(reminder.every)
            .bind(reminder.missed);
        #[cfg(feature = "opentelemetry")]
        let upsert = upsert.bind(reminder.trace.traceparent());
        upsert.execute(self.on()).await?;
        Ok(())
    }

    async fn reminder_due(
        &mut self,
        actor: ActorKey<'_, '_>,
        name: &str,
        key: &str,
    ) -> Result<Option<i64>> {
        self.counters().statement();
        Ok(query(REMINDER_DUE)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(name)
            .bind(key)
            .fetch_optional_scalar(self.on())
            .await?)
    }

    async fn delete_reminders(
        &mut self,
        actor: ActorKey<'_, '_>,
        doomed: Doomed<'_>,
        now: i64,
    ) -> Result<()> {
        let now_minute = now - now.rem_euclid(MINUTE);
        // The reminder's own parameters, then (for a tally) the minute.
        let bound = |statement, tallied: bool| {
            let statement = query(statement).bind(actor.actor_type).bind(actor.actor_id);
            let statement = match doomed {
                Doomed::Named { name, key } => statement.bind(name).bind(key),
                Doomed::Every => statement,
            };
            match tallied {
                true => statement.bind(now_minute),
                false => statement,
            }
        };
        let dialect = self.dialect();
        if dialect == Dialect::Postgres {
            self.counters().statement();
            bound(delete_and_tally(doomed), true)
                .execute(self.on())
                .await?;
            return Ok(());
        }
        if self.deletes_return_rows() {
            // The delete returns the due times: a tally costs statements of its own only
            // when a reminder it deleted was due.
            self.counters().statement();
            let deleted = bound(delete_doomed(doomed, true), false)
                .fetch_all(self.on())
                .await?;
            let due = deleted
                .iter()
                // By position: MariaDB's prepared `DELETE .. RETURNING` names no column.
                .map(|row| get::<i64>(row, 0))
                .collect::<sqlx::Result<Vec<_>>>()?;
            add_tallies(self, &dropped_tallies(&due, now_minute)).await?;
            return Ok(());
        }
        self.counters().statement();
        bound(tally_doomed(dialect, doomed), true)
            .execute(self.on())
            .await?;
        self.counters().statement();
        bound(delete_doomed(doomed, false), false)
            .execute(self.on())
            .await?;
        Ok(())
    }

    async fn due_reminders(
        &mut self,
        now: i64,
        limit: i64,
        skip: &str,
    ) -> Result<Vec<Result<DueReminder>>> {
        self.counters().statement();
        let due = query(due_reminders(self.dialect()))
            .bind(skip)
            .bind(now)
            .bind(limit)
            .fetch_all(self.on())
            .await?;
        due.iter().map(rows::due_reminder).collect()
    }

    async fn settle_reminders(
        &mut self,
        finished: &[i64],
        moved: &[(i64, i64)],
        unfired: &[(i64, i64)],
    ) -> Result<()> {
        add_tallies(self, &unfired_tallies(unfired)).await?;
        let dialect = self.dialect();
        for ids in finished.chunks(ROWS_PER_SETTLE) {
            self.counters().statement();
            delete_reminders(dialect, ids).execute(self.on()).await?;
        }
        for moves in moved.chunks(ROWS_PER_SETTLE) {
            self.counters().statement();
            move_reminders(dialect, moves).execute(self.on()).await?;
        }
        Ok(())
    }
}
