//! The charts read a window's minutes, not its rows, on the servers too: every statement of
//! the overview's and an actor page's charts reads its tally by the tally's key, and no table
//! of messages, effects or failed attempts whole; of those, a tally statement reads only a
//! range of an index from the fold mark on. The database holds a day of finished rows folded
//! into tallies and a month of older tallies (what retention keeps).

use solid_objects::prelude::*;

use crate::backend::{self, database};
use crate::support::actors::Tally;
use crate::support::Backend;

/// `rows` numbers from 1, as the server generates them.
fn series(rows: i64) -> String {
    match crate::BACKEND {
        Backend::Postgres => {
            format!("SELECT n FROM generate_series(CAST(1 AS BIGINT), {rows}) AS n")
        }
        Backend::MariaDb | Backend::Sqlite => format!("SELECT seq AS n FROM seq_1_to_{rows}"),
    }
}

/// `'a'` and `b` joined as text.
fn concat(a: &str, b: &str) -> String {
    match crate::BACKEND {
        Backend::Postgres => format!("'{a}' || {b}"),
        Backend::MariaDb | Backend::Sqlite => format!("CONCAT('{a}', {b})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_window_reads_its_tallies_by_their_key_and_no_table_of_rows_whole() {
    let Some((_server, url)) = database().await else {
        return;
    };
    let noon: DateTime<Utc> = "2026-03-02T12:00:00Z".parse().unwrap();
    let clock = ManualClock::new(noon + TimeDelta::seconds(10));
    let runtime = backend::builder(&url, 4)
        .clock(clock.clone())
        .policy(AllowAll)
        .actor::<Tally>()
        .start()
        .await
        .unwrap();
    runtime.reference::<Tally>("t-0").add().await.unwrap();
    // A day of finished rows over 100 actors, and the 29 days of tallies before it.
    let rows = 20_000;
    let from = (noon - TimeDelta::minutes(23 * 60 + 30)).timestamp_micros();
    let step = (noon.timestamp_micros() - from) / rows;
    let at = format!("{from} + n * {step}");
    let actor = concat("t-", "n % 100");
    let month = from - 29 * 24 * 60 * 60_000_000;
    let statements = [
        format!(
            "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
                 status, attempts, available_at, result, created_at, finished_at, scheduled_for)
             SELECT 'Tally', {actor}, 'add', '[]', {request},
                    CASE WHEN n % 1000 = 0 THEN 'dead' ELSE 'completed' END, 1,
                    {at}, 'null', {at} - 2000000, {at},
                    CASE WHEN n % 100 = 1 THEN {at} - 5000000 END
             FROM ({series}) AS numbers",
            request = concat("plan-", "n"),
            series = series(rows),
        ),
        format!(
            "INSERT INTO solid_failed_attempts (message_id, actor_type, actor_id, failed_at)
             SELECT n, 'Tally', {actor}, {at} - 1000000 FROM ({series}) AS numbers
             WHERE n % 10 = 0",
            series = series(rows),
        ),
        format!(
            "INSERT INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
                 attempts, available_at, created_at, finished_at)
             SELECT {effect}, 'Tally', {actor}, 'post', '{{}}', 'done', 1,
                    {at}, {at} - 1000000, {at}
             FROM ({series}) AS numbers",
            effect = concat("plan-effect-", "n"),
            series = series(rows),
        ),
        format!(
            "INSERT INTO solid_activity (minute, kind, bucket, count)
             SELECT {month} + n * 60000000, 'completed', 0, 10 FROM ({series}) AS numbers",
            series = series(29 * 24 * 60),
        ),
        format!(
            "INSERT INTO solid_actor_activity (actor_type, actor_id, minute, kind, count)
             SELECT 'Tally', {actor}, {month} + n * 60000000, 'completed', 1
             FROM ({series}) AS numbers",
            series = series(29 * 24 * 60),
        ),
    ];
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    for statement in &statements {
        sqlx::raw_sql(statement)
            .execute(&pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    // The workers' fold tallies the day, then the statistics a server's own upkeep gathers.
    runtime.testing().upkeep().await.unwrap();
    let analyze = match crate::BACKEND {
        Backend::Postgres => "ANALYZE",
        Backend::MariaDb | Backend::Sqlite => {
            "ANALYZE TABLE solid_messages, solid_failed_attempts, solid_effects, solid_activity,
             solid_actor_activity"
        }
    };
    sqlx::raw_sql(analyze).execute(&pool).await.unwrap();
    pool.close().await;

    let plans = runtime
        .testing()
        .activity_plans("Tally", "t-0")
        .await
        .unwrap();
    assert_eq!(plans.len(), 15, "five statements for each of three windows");
    // What each table of rows holds: a tally statement reads the rows since the fold mark,
    // a few minutes of them, never a tenth.
    let loaded = [
        ("solid_messages", rows),
        ("solid_effects", rows),
        ("solid_failed_attempts", rows / 10),
    ];
    for (statement, steps) in &plans {
        let plan = steps.join("\n");
        let tally = match statement.split(' ').nth(1) {
            Some("activity_tallies") => Some("solid_activity"),
            Some("actor_tallies") => Some("solid_actor_activity"),
            _ => None,
        };
        match crate::BACKEND {
            Backend::Postgres => {
                if let Some(tally) = tally {
                    assert!(
                        plan.contains(&format!("{tally}_pkey on {tally}"))
                            || plan.contains(&format!("Bitmap Index Scan on {tally}_pkey")),
                        "{statement} reads {tally} by its key:\n{plan}"
                    );
                    for (index, condition) in index_reads(steps) {
                        let first = FIRST_COLUMNS
                            .iter()
                            .find(|(known, _)| *known == index)
                            .map(|(_, first)| *first)
                            .unwrap_or_else(|| panic!("{statement} reads {index}:\n{plan}"));
                        assert!(
                            condition.starts_with(&format!("(({first} "))
                                && (condition.contains("(finished_at >= ")
                                    || condition.contains("(failed_at >= ")),
                            "{statement} reads {index} from the fold mark on, not whole:\n{plan}"
                        );
                    }
                }
                for table in loaded.map(|(table, _)| table) {
                    assert!(
                        !plan.contains(&format!("Seq Scan on {table} ")),
                        "{statement} reads {table} whole:\n{plan}"
                    );
                }
            }
            Backend::MariaDb | Backend::Sqlite => {
                if let Some(tally) = tally {
                    assert!(
                        steps
                            .iter()
                            .any(|step| step.starts_with(&format!("{tally} range PRIMARY"))),
                        "{statement} reads a range of {tally}'s key:\n{plan}"
                    );
                }
                for (table, loaded) in loaded {
                    assert!(
                        !steps
                            .iter()
                            .any(|step| step.starts_with(&format!("{table} ALL"))),
                        "{statement} reads {table} whole:\n{plan}"
                    );
                    if tally.is_none() {
                        continue;
                    }
                    for step in steps
                        .iter()
                        .filter(|step| step.starts_with(&format!("{table} ")))
                    {
                        let estimate = step
                            .rsplit_once("rows=")
                            .and_then(|(_, rows)| rows.parse::<i64>().ok());
                        assert!(
                            step.starts_with(&format!("{table} range "))
                                && estimate.is_some_and(|rows| rows <= loaded / 10),
                            "{statement} reads a range of {table} from the fold mark on:\n{plan}"
                        );
                    }
                }
            }
        }
    }
    runtime.close().await;
}

/// The indexes of the tables of rows that the tally statements read on PostgreSQL, and the
/// column each begins with: a read of one is a range only with a condition on that column.
const FIRST_COLUMNS: [(&str, &str); 5] = [
    ("solid_messages_finished", "status"),
    ("solid_messages_reminders", "finished_at"),
    ("solid_failed_attempts_at", "failed_at"),
    ("solid_failed_attempts_actor", "actor_type"),
    ("solid_effects_finished", "status"),
];

/// Each read of an index of a table of rows in a PostgreSQL plan: the index, and the
/// condition its range is read by (empty without one: the whole index).
fn index_reads(steps: &[String]) -> Vec<(&str, &str)> {
    let mut reads = Vec::new();
    for (at, step) in steps.iter().enumerate() {
        let Some(index) = step
            .split_once(" using ")
            .or_else(|| step.split_once("Bitmap Index Scan on "))
            .and_then(|(_, rest)| rest.split(' ').next())
        else {
            continue;
        };
        let of_rows = [
            "solid_messages_",
            "solid_effects_",
            "solid_failed_attempts_",
        ];
        if !of_rows.iter().any(|table| index.starts_with(table)) {
            continue;
        }
        let condition = steps
            .get(at + 1)
            .and_then(|next| next.trim_start().strip_prefix("Index Cond: "))
            .unwrap_or("");
        reads.push((index, condition));
    }
    reads
}
