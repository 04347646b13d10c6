//! Where MySQL (MariaDB) differs from the other backends, each difference tried: how it
//! counts affected rows (a pause of a paused actor, an idempotent send whose key is taken),
//! session settings that must not outlive a turn on the pool, `NO_BACKSLASH_ESCAPES` and
//! `LIKE` wildcards in dead-letter filters, collations that would fold near-identical ids
//! and keys, dropped reads on a small pool, racing starts and a half-run migration, hostile
//! stored state, and payloads at the limits.

use std::time::Duration;

use solid_objects::admin::{ActorFilter, DeadLetterFilter};
use solid_objects::prelude::*;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::Executor;

use crate::support::actors::Ledger;
use crate::support::mariadb::MariaDb;
use crate::support::runtimes::{on_a_thread_of_its_own, scalar, start_at_once, state_of};
use crate::support::workers::run_workers;

const SOON: Duration = Duration::from_secs(20);

/// A fresh database on the process's MariaDB, and a clock for the runtimes on it; `None`,
/// and the test skips, on a machine without MariaDB outside CI.
async fn database() -> Option<(String, ManualClock)> {
    let server = MariaDb::shared()?;
    Some((server.database().await, ManualClock::starting_now()))
}

/// A runtime on `url` with four connections and `clock`, allowing every call.
async fn runtime(url: &str, clock: &ManualClock) -> Runtime {
    crate::support::runtimes::runtime(url, 4, clock).await
}

/// How long the application waits for a connection of its pool, unless a test says.
const ACQUIRE_WITHIN: Duration = Duration::from_secs(30);

/// The application's pool on `url`, of `connections` that it waits `acquire_within` for,
/// whose every new session runs `settings` first (if any).
async fn application_pool(
    url: &str,
    connections: u32,
    acquire_within: Duration,
    settings: Option<&'static str>,
) -> sqlx::MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(acquire_within)
        .after_connect(move |connection, _| {
            Box::pin(async move {
                if let Some(settings) = settings {
                    connection.execute(settings).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
        .unwrap()
}

/// A builder on the application's `pool` with `clock`, allowing every call.
fn on_pool(pool: &sqlx::MySqlPool, clock: &ManualClock) -> solid_objects::Builder {
    Runtime::builder()
        .mysql_pool(pool.clone())
        .clock(clock.clone())
        .policy(AllowAll)
}

/// A runtime on the application's `pool` with `clock`, allowing every call.
async fn runtime_on_pool(pool: &sqlx::MySqlPool, clock: &ManualClock) -> Runtime {
    on_pool(pool, clock).start().await.unwrap()
}

/// `Admin::pause` documents "False if it was paused already". MySQL with sqlx's
/// CLIENT_FOUND_ROWS counts a duplicate-key row set to its current value as 1 affected row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_paused_actor_reports_it_was_paused_already() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    runtime.reference::<Ledger>("p1").record("x").await.unwrap();
    let admin = runtime.admin();
    assert!(admin.pause("Ledger", "p1").await.unwrap(), "first pause");
    let again = admin.pause("Ledger", "p1").await.unwrap();
    assert!(admin.resume("Ledger", "p1").await.unwrap(), "first resume");
    assert!(
        !admin.resume("Ledger", "p1").await.unwrap(),
        "second resume"
    );
    // Never-ran actor: paused twice.
    assert!(admin.pause("Ledger", "fresh").await.unwrap());
    let fresh_again = admin.pause("Ledger", "fresh").await.unwrap();
    runtime.close().await;
    assert!(
        !again,
        "a second pause of a paused actor must report false (paused already)"
    );
    assert!(
        !fresh_again,
        "a second pause of a paused fresh actor must report false"
    );
}

/// An idempotent send whose key was used already must deliver nothing: on MySQL
/// `INSERT .. ON DUPLICATE KEY UPDATE id = id` reports 1 affected row under CLIENT_FOUND_ROWS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_send_whose_key_is_taken_is_not_counted_as_enqueued() {
    let Some((url, clock)) = database().await else {
        return;
    };
    // First: what the server reports for the backend's statement form.
    let pool = application_pool(&url, 1, ACQUIRE_WITHIN, None).await;
    pool.execute("CREATE TABLE dup (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(10) UNIQUE)")
        .await
        .unwrap();
    let first = sqlx::query("INSERT INTO dup (k) VALUES ('a') ON DUPLICATE KEY UPDATE id = id")
        .execute(&pool)
        .await
        .unwrap();
    let second = sqlx::query("INSERT INTO dup (k) VALUES ('a') ON DUPLICATE KEY UPDATE id = id")
        .execute(&pool)
        .await
        .unwrap();
    eprintln!(
        "first: affected {} id {}; duplicate: affected {} id {}",
        first.rows_affected(),
        first.last_insert_id(),
        second.rows_affected(),
        second.last_insert_id()
    );
    pool.close().await;

    let prometheus = crate::support::prometheus();
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("fwd");
    ledger.forward("k-1").await.unwrap();
    ledger.forward("k-1").await.unwrap();
    ledger.forward("k-1").await.unwrap();
    let stored = scalar(
        &url,
        "SELECT COUNT(*) FROM solid_messages WHERE actor_type = 'Sink'",
    )
    .await;
    let text = prometheus.render();
    runtime.close().await;
    assert_eq!(stored, 1, "one message stored for the key");
    let line = text
        .lines()
        .find(|line| {
            line.starts_with("solid_objects_messages_enqueued_total")
                && line.contains("actor_type=\"Sink\"")
        })
        .unwrap_or("<none>")
        .to_owned();
    assert!(
        line.ends_with(" 1"),
        "one delivered send counted; got {line:?} (second insert affected {})",
        second.rows_affected()
    );
}

/// The turn's `SET SESSION innodb_lock_wait_timeout / max_statement_time` outlive the turn:
/// the connection goes back to the pool (the application's, with `mysql_pool`) with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_statement_bounds_do_not_outlive_the_turn_on_the_pool() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 1, ACQUIRE_WITHIN, None).await;
    let before: (f64, i64) = sqlx::query_as(
        "SELECT CAST(@@session.max_statement_time AS DOUBLE), \
         CAST(@@session.innodb_lock_wait_timeout AS SIGNED)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let runtime = on_pool(&pool, &clock)
        .turn_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    runtime.reference::<Ledger>("b1").record("x").await.unwrap();
    let after: (f64, i64) = sqlx::query_as(
        "SELECT CAST(@@session.max_statement_time AS DOUBLE), \
         CAST(@@session.innodb_lock_wait_timeout AS SIGNED)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // The application's own (slow but legitimate) query on its pool.
    let slow = sqlx::query_scalar::<_, i64>("SELECT SLEEP(0.5)")
        .fetch_one(&pool)
        .await;
    runtime.close().await;
    pool.close().await;
    assert!(
        matches!(slow, Ok(0)),
        "the application's 0.5 s query on its pool after a turn: {slow:?}"
    );
    assert_eq!(
        after, before,
        "session bounds after a turn (max_statement_time, innodb_lock_wait_timeout)"
    );
}

/// The application's pool runs its sessions with `autocommit` off (its own transactions end
/// only at its `COMMIT`, a common setting, here by `SET autocommit = 0` on each new
/// connection): a turn on that pool leaves the session's `autocommit` as it found it, as it
/// does the session's statement bounds, so that the application's own write after the turn
/// is still undone by its `ROLLBACK`. Under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_autocommit_does_not_outlive_the_turn_on_the_applications_pool() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 1, ACQUIRE_WITHIN, Some("SET SESSION autocommit = 0")).await;
    pool.execute("CREATE TABLE app_autocommit (n INT NOT NULL PRIMARY KEY)")
        .await
        .unwrap();
    let runtime = runtime_on_pool(&pool, &clock).await;
    // A read first: on such a session it leaves a transaction open behind it.
    let ledger = runtime.reference::<Ledger>("autocommit");
    ledger.snapshot().await.unwrap();
    let called = ledger.record("x".to_owned()).await;
    let mut connection = pool.acquire().await.unwrap();
    let autocommit: i64 = sqlx::query_scalar("SELECT CAST(@@session.autocommit AS SIGNED)")
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    // The application's own write, then its ROLLBACK: with autocommit off, nothing stays.
    connection
        .execute("INSERT INTO app_autocommit VALUES (1)")
        .await
        .unwrap();
    connection.execute("ROLLBACK").await.unwrap();
    drop(connection);
    runtime.close().await;
    let kept = scalar(&url, "SELECT COUNT(*) FROM app_autocommit").await;
    pool.close().await;
    assert!(
        matches!(called, Ok(1)) && autocommit == 0 && kept == 0,
        "after a turn on an application pool that runs with autocommit off (the call heard \
         {called:?}, want Ok(1)), the session's autocommit is {autocommit} (want 0) and the application's rolled-back row is there \
         {kept} time(s) (want 0)"
    );
}

/// A turn ends its transaction in sqlx's own count of transactions too, whether it commits
/// or rolls back (its bounds are put back in the same round trip as its `COMMIT` or
/// `ROLLBACK`): on the application's pool, the connection the turns ran on begins the
/// application's transaction with `BEGIN`, not with a savepoint of a transaction that has
/// ended, so the application's rollback undoes its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_transaction_after_turns_on_its_pool_rolls_back() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 1, ACQUIRE_WITHIN, None).await;
    pool.execute("CREATE TABLE app_rows (n INT NOT NULL)")
        .await
        .unwrap();
    let runtime = runtime_on_pool(&pool, &clock).await;
    let ledger = runtime.reference::<Ledger>("b2").idempotency_key("once");
    // The first call commits its turn; the second finds the key's message and rolls back.
    assert_eq!(ledger.record("x").await.unwrap(), 1);
    assert_eq!(ledger.record("x").await.unwrap(), 1);

    let mut application = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO app_rows VALUES (1)")
        .execute(&mut *application)
        .await
        .unwrap();
    application.rollback().await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM app_rows")
        .fetch_one(&pool)
        .await
        .unwrap();
    runtime.close().await;
    pool.close().await;
    assert_eq!(rows, 0, "the application's rolled-back row stayed");
}

/// With a server whose sql_mode has NO_BACKSLASH_ESCAPES (a documented, common setting),
/// the dead-letter filter's `ESCAPE '\\'` is a two-character escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_filter_works_under_no_backslash_escapes() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(
        &url,
        2,
        ACQUIRE_WITHIN,
        Some("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"),
    )
    .await;
    let runtime = runtime_on_pool(&pool, &clock).await;
    let ledger = runtime.reference::<Ledger>("n1");
    let _ = ledger.fragile("card declined 100%_").await;
    let filter = DeadLetterFilter::new().error_contains("100%_");
    let found = runtime.admin().dead_letters(&filter).await;
    runtime.close().await;
    pool.close().await;
    assert_eq!(
        found.map(|found| found.len()).map_err(|e| e.to_string()),
        Ok(1)
    );
}

/// Ids, keys differing by trailing spaces, case, normalisation or ignorable characters are
/// distinct; hostile characters are kept as bound values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_identical_ids_and_keys_stay_distinct() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ids = [
        "a",
        "a ",
        "A",
        "a\t",
        "\u{e9}",
        "e\u{301}",
        "a\u{200b}",
        "ß",
        "ss",
        "'",
        "\\",
        "$1",
        "?",
        "%",
        "_",
        "\"x\"",
        "`",
        "a\\%",
        "😀",
        "ﬁ",
        "fi",
    ];
    for id in ids {
        let got = tokio::time::timeout(SOON, runtime.reference::<Ledger>(id).record(id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, 1, "actor {id:?} is its own");
    }
    for id in ids {
        assert_eq!(
            state_of::<Ledger>(&runtime, id).await.entries,
            vec![id.to_owned()]
        );
    }
    // Idempotency keys.
    let ledger = runtime.reference::<Ledger>("keys");
    for key in ["k", "k ", "K", "\u{e9}", "e\u{301}"] {
        ledger
            .clone()
            .idempotency_key(key)
            .record(key)
            .await
            .unwrap();
    }
    assert_eq!(ledger.count().await.unwrap(), 5);
    // Multibyte limits: 255 bytes work, 256 are a typed error with nothing written.
    let at_limit = format!("{}a", "\u{e9}".repeat(127));
    assert_eq!(at_limit.len(), 255);
    runtime
        .reference::<Ledger>(at_limit.clone())
        .record("x")
        .await
        .unwrap();
    let over = format!("{}ab", "\u{e9}".repeat(127));
    let error = runtime
        .reference::<Ledger>(over)
        .record("x")
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidActorId { .. }), "{error:?}");
    let emoji_limit = format!("{}abc", "😀".repeat(63));
    assert_eq!(emoji_limit.len(), 255);
    runtime
        .reference::<Ledger>(emoji_limit.clone())
        .record("x")
        .await
        .unwrap();

    // Admin's prefix filter: multibyte, wildcard characters are text.
    let admin = runtime.admin();
    let prefix = |p: &str| ActorFilter::new().actor_type("Ledger").id_prefix(p);
    let page = admin.actors(&prefix("\u{e9}")).await.unwrap();
    let found: Vec<_> = page.actors.iter().map(|a| a.actor_id.clone()).collect();
    assert_eq!(
        found,
        vec!["\u{e9}".to_owned(), at_limit.clone()],
        "prefix é"
    );
    let page = admin.actors(&prefix("%")).await.unwrap();
    assert_eq!(page.actors.len(), 1, "prefix %");
    let page = admin.actors(&prefix("a")).await.unwrap();
    let found: Vec<_> = page.actors.iter().map(|a| a.actor_id.clone()).collect();
    assert_eq!(
        found,
        vec!["a", "a\t", "a ", "a\\%", "a\u{200b}"],
        "prefix a"
    );
    let page = admin.actors(&prefix("😀")).await.unwrap();
    assert_eq!(page.actors.len(), 2, "prefix emoji");
    runtime.close().await;
}

/// Dead-letter text filters: `%`, `_` and `\` are text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_text_filters_treat_wildcards_and_backslashes_as_text() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("d");
    for why in [
        "50% off_now",
        "50x offanow",
        "path C:\\temp\\x",
        "path C:temp",
        "it's \"$1\" ?",
    ] {
        let _ = ledger.fragile(why).await;
    }
    let admin = runtime.admin();
    let count = |text: &str| {
        let filter = DeadLetterFilter::new().error_contains(text);
        let admin = admin.clone();
        async move { admin.dead_letters(&filter).await.unwrap().len() }
    };
    assert_eq!(count("50%").await, 1);
    assert_eq!(count("f_n").await, 1);
    assert_eq!(count("C:\\temp").await, 1);
    assert_eq!(count("\\").await, 1);
    assert_eq!(count("\"$1\" ?").await, 1);
    assert_eq!(count("'").await, 1);
    runtime.close().await;
}

/// Reads dropped mid-flight on a small pool, then calls still work within bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_reads_never_wedge_a_small_pool() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = Runtime::builder()
        .mysql(&url, 2)
        .clock(clock.clone())
        .policy(AllowAll)
        .start()
        .await
        .unwrap();
    let ledger = runtime.reference::<Ledger>("r");
    ledger.record("x").await.unwrap();
    let admin = runtime.admin();
    for round in 0..60u64 {
        let budget = Duration::from_micros(50 + (round * 137) % 3000);
        let _ = tokio::time::timeout(budget, ledger.snapshot()).await;
        let _ = tokio::time::timeout(budget, admin.actors(&ActorFilter::new())).await;
        let _ = tokio::time::timeout(budget, admin.status()).await;
        let _ = tokio::time::timeout(budget, ledger.count()).await;
        let _ = tokio::time::timeout(budget, ledger.record(format!("c{round}"))).await;
        let _ = tokio::time::timeout(budget, admin.pause("Ledger", "other")).await;
        let _ = tokio::time::timeout(budget, admin.resume("Ledger", "other")).await;
    }
    let next = tokio::time::timeout(SOON, ledger.record("after")).await;
    assert!(
        matches!(next, Ok(Ok(_))),
        "a call after dropped reads: {next:?}"
    );
    let read = tokio::time::timeout(SOON, admin.actors(&ActorFilter::new())).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "an admin read after dropped reads: {read:?}"
    );
    runtime.close().await;
}

/// Several processes start at once on an empty database (GET_LOCK), and one starts on a
/// database where the migration half ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_starts_and_a_half_run_migration() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let started = start_at_once(&vec![url.clone(); 4], 2, &clock, SOON).await;
    for runtime in started {
        let runtime = runtime.expect("starts in time").expect("starts");
        runtime.reference::<Ledger>("m").record("x").await.unwrap();
        runtime.close().await;
    }
    // Each of this build's migrations (1, 11, 13, 14, 15, 16: the files in migrations/mysql) once.
    let migrations = crate::support::Backend::MariaDb.migrations().len();
    assert_eq!(
        scalar(&url, "SELECT COUNT(*) FROM solid_schema_migrations").await,
        i64::try_from(migrations).unwrap()
    );

    // Half-run: the bookkeeping table and two of the schema's tables, no version row.
    let (half, clock) = database().await.unwrap();
    let pool = sqlx::MySqlPool::connect(&half).await.unwrap();
    let schema = include_str!("../../migrations/mysql/0001_schema.sql");
    let statements: Vec<&str> = schema
        .split(";\n")
        .filter(|s| s.contains("CREATE"))
        .collect();
    for statement in &statements[..2] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    pool.close().await;
    let runtime = tokio::time::timeout(SOON, runtime(&half, &clock))
        .await
        .expect("starts in time");
    runtime.reference::<Ledger>("h").record("x").await.unwrap();
    runtime.close().await;
}

/// A stored row the runtime cannot read: a clear error, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_stored_state_is_a_clear_error_and_changes_nothing() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("h");
    ledger.record("x").await.unwrap();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    sqlx::query("UPDATE solid_instances SET state = '{not json' WHERE actor_id = 'h'")
        .execute(&pool)
        .await
        .unwrap();
    let revision_before: i64 =
        sqlx::query_scalar("SELECT revision FROM solid_instances WHERE actor_id = 'h'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let error = tokio::time::timeout(SOON, ledger.record("y"))
        .await
        .unwrap();
    eprintln!("hostile state: {error:?}");
    assert!(error.is_err());
    let snapshot = tokio::time::timeout(SOON, ledger.snapshot()).await.unwrap();
    assert!(snapshot.is_err());
    let (state, revision): (String, i64) = sqlx::query_as(
        "SELECT CAST(state AS CHAR), revision FROM solid_instances WHERE actor_id = 'h'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), revision), ("{not json", revision_before));
    // Another actor is unaffected.
    tokio::time::timeout(SOON, runtime.reference::<Ledger>("ok").record("x"))
        .await
        .unwrap()
        .unwrap();
    pool.close().await;
    runtime.close().await;
}

/// Payloads at the limits: 1 MiB arguments just under the cap work; state near 5 MiB works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_at_the_limits() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("big");
    // Each entry ~1 MiB of multibyte text (JSON-encoded size under the cap).
    let entry = "\u{e9}".repeat((1 << 20) / 2 - 64);
    for _ in 0..4 {
        tokio::time::timeout(SOON, ledger.record(entry.clone()))
            .await
            .unwrap()
            .unwrap();
    }
    let over = "\u{e9}".repeat((1 << 20) / 2 + 64);
    let error = tokio::time::timeout(SOON, ledger.record(over))
        .await
        .unwrap()
        .unwrap_err();
    eprintln!("over: {error}");
    // A 5th entry still fits 5 MiB; a 6th pushes state past it: refused, nothing written.
    tokio::time::timeout(SOON, ledger.record(entry.clone()))
        .await
        .unwrap()
        .unwrap();
    let result = tokio::time::timeout(SOON, ledger.record(entry.clone()))
        .await
        .unwrap();
    eprintln!("state past limit: {result:?}");
    assert!(result.is_err());
    assert_eq!(ledger.count().await.unwrap(), 5);
    runtime.close().await;
}

/// The pool no longer pings a connection used a moment ago: a read outside any transaction
/// (an actor's snapshot) right after the server ended every session of the runtime (a
/// restart, a failover, an operator's `KILL`) meets a closed connection, and must not hand
/// the caller a database error for a read that could run on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_the_server_ended_the_pools_sessions_reads_on_a_new_connection() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("restarted-read");
    ledger.record("one".to_owned()).await.unwrap();
    let warm: Vec<_> = (0..4).map(|_| ledger.snapshot()).collect();
    for read in futures_util::future::join_all(warm).await {
        read.unwrap();
    }
    end_the_runtimes_sessions(&url).await;

    let snapshot = ledger.snapshot().await.map(|state| state.entries.len());
    runtime.close().await;

    assert!(
        matches!(snapshot, Ok(1)),
        "after the server ended the pool's sessions, a snapshot read {snapshot:?}"
    );
}

/// A call made while the server is away began no transaction there, so nothing of it can
/// have committed: the caller hears an error that names no message (a `DatabaseUnavailable`
/// or a database error), within its deadline, not a timeout "waiting to learn whether its
/// turn committed" that names a request id as if its turn might have been kept. About 2 s
/// (the call's deadline); 20 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_while_the_server_is_away_names_no_message_it_never_wrote() {
    let Some(server) = MariaDb::start() else {
        return;
    };
    let url = server.database().await;
    let clock = ManualClock::starting_now();
    let runtime = Runtime::builder()
        .mysql(&url, 4)
        .clock(clock.clone())
        .sync_timeout(Duration::from_secs(2))
        .policy(AllowAll)
        .start()
        .await
        .expect("the runtime starts on MariaDB");
    let ledger = runtime.reference::<Ledger>("away");
    assert_eq!(ledger.record("before".to_owned()).await.unwrap(), 1);

    drop(server);
    let started = std::time::Instant::now();
    let called = tokio::time::timeout(SOON, ledger.record("while away".to_owned())).await;
    let took = started.elapsed();
    tokio::time::timeout(SOON, runtime.close()).await.ok();
    let names_a_message = match &called {
        Ok(Err(Error::SyncTimeout { request_id, .. })) => request_id.is_some(),
        Ok(Err(Error::DatabaseUnavailable { request_id, .. })) => request_id.is_some(),
        _ => false,
    };
    assert!(
        matches!(called, Ok(Err(_))) && !names_a_message && took < Duration::from_secs(5),
        "a call while the server was away heard, after {took:?}: {called:?}; want an error \
         naming no message, within its 2 s deadline"
    );
}

/// Releases a savepoint of its own that it never took: the server's 1305, the handler's
/// own mistake.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Misnamer {}

/// How often [`Misnamer::release_unknown`] ran.
static MISNAMED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[actor]
impl Misnamer {
    #[command]
    async fn release_unknown(&mut self, turn: &mut Turn<Self>) -> Result<(), TurnError> {
        MISNAMED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        turn.mysql()
            .await?
            .execute("RELEASE SAVEPOINT no_such_savepoint")
            .await?;
        Ok(())
    }
}

/// A handler's own SQL that fails with 1305 (a savepoint it never took) is the handler's
/// failure, heard by its caller after one run, as any other SQL error of a handler: not a
/// conflict (which 1305 is only for the runtime's own savepoint on a Galera node) run again
/// until the caller's deadline and then answered with a timeout. About a second on a
/// working runtime; 5 s deadline, 20 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_own_missing_savepoint_is_its_failure_not_a_conflict() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let called = tokio::time::timeout(
        SOON,
        runtime
            .reference::<Misnamer>("misnamed")
            .timeout(Duration::from_secs(5))
            .release_unknown(),
    )
    .await;
    let runs = MISNAMED.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::timeout(SOON, runtime.close()).await.ok();
    assert!(
        runs == 1 && matches!(called, Ok(Err(Error::HandlerFailed { .. }))),
        "a handler whose own SQL failed with 1305 ran {runs} times and its caller heard \
         {called:?}; want one run and HandlerFailed"
    );
}

// ---------------------------------------------------------------------------------------
// Connections parked between turns
// ---------------------------------------------------------------------------------------

/// Ends every session on the case's database (`KILL`), as a restart, a failover or an
/// operator does; asserts that the runtime had one.
async fn end_the_runtimes_sessions(url: &str) {
    let observer = sqlx::MySqlPool::connect(url).await.unwrap();
    let sessions: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
    )
    .fetch_all(&observer)
    .await
    .unwrap();
    assert!(!sessions.is_empty(), "the runtime had no session to end");
    for id in &sessions {
        observer
            .execute(format!("KILL {id}").as_str())
            .await
            .unwrap();
    }
    observer.close().await;
}

/// A call right after the server ended every session of the runtime (a restart, a failover,
/// an operator's `KILL`) while connections sat parked between turns begins on a new
/// connection, as a read does: it must not hand the caller the error of a `BEGIN` on a
/// session that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_the_server_ended_the_parked_sessions_runs_on_a_new_connection() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let runtime = runtime(&url, &clock).await;
    let ledger = runtime.reference::<Ledger>("restarted-call");
    // Two concurrent callers of two actors leave two connections parked (half of 4).
    let other = runtime.reference::<Ledger>("restarted-other");
    let (a, b) = tokio::join!(
        ledger.record("one".to_owned()),
        other.record("one".to_owned())
    );
    a.unwrap();
    b.unwrap();
    end_the_runtimes_sessions(&url).await;

    let called = tokio::time::timeout(SOON, ledger.record("two".to_owned())).await;
    let other_called = tokio::time::timeout(SOON, other.record("two".to_owned())).await;
    runtime.close().await;
    assert!(
        matches!(called, Ok(Ok(2))) && matches!(other_called, Ok(Ok(2))),
        "after the server ended the parked sessions, the calls heard {called:?} and \
         {other_called:?}; want Ok(2) each"
    );
}

/// The application's pool is the application's: a runtime on it holds a connection while a
/// turn runs ("Each turn holds one of its connections while it runs"), not while it is idle.
/// After a call, with no turn running, the application takes every connection of its pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_holds_none_of_the_applications_pool() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 2, Duration::from_secs(3), None).await;
    let runtime = runtime_on_pool(&pool, &clock).await;
    runtime
        .reference::<Ledger>("idle")
        .record("x".to_owned())
        .await
        .unwrap();
    // The runtime is idle now: the application takes both of its pool's connections.
    assert_the_application_takes_both_connections(runtime, pool).await;
}

/// Asserts that the application takes both connections of its `pool` of two while
/// `runtime`, on that pool, is idle; closes both.
async fn assert_the_application_takes_both_connections(runtime: Runtime, pool: sqlx::MySqlPool) {
    let first = pool.acquire().await;
    let second = pool.acquire().await;
    let (first, second) = (first.map(drop), second.map(drop));
    runtime.close().await;
    pool.close().await;
    assert!(
        first.is_ok() && second.is_ok(),
        "with the runtime idle, the application's two acquires on its pool of two heard \
         {first:?} and {second:?}"
    );
}

/// Records `entry` on the ledger `id` through `runtime`, on a Tokio runtime of its own that
/// ends right after the call.
fn record_on_a_tokio_runtime_of_its_own(runtime: &Runtime, id: &'static str, entry: &str) {
    let ledger = runtime.reference::<Ledger>(id);
    let entry = entry.to_owned();
    on_a_thread_of_its_own(async move {
        ledger.record(entry).await.unwrap();
    });
}

/// A runtime dropped without `close` (a test that panicked, an application that forgot)
/// gives the application's pool back its connections as it found them: the application's
/// `begin()` then begins a transaction, whose rollback undoes its rows, not a savepoint of a
/// transaction sqlx still counts from the runtime's last turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_transaction_after_a_dropped_runtime_rolls_back() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 4, ACQUIRE_WITHIN, None).await;
    pool.execute("CREATE TABLE app_rows_dropped (n INT NOT NULL)")
        .await
        .unwrap();
    {
        let runtime = runtime_on_pool(&pool, &clock).await;
        let (d1, d2) = (
            runtime.reference::<Ledger>("d1"),
            runtime.reference::<Ledger>("d2"),
        );
        let (a, b) = tokio::join!(d1.record("x"), d2.record("x"));
        a.unwrap();
        b.unwrap();
        drop(runtime);
    }
    // Every connection of the pool, each in a transaction of the application's.
    let mut begun = Vec::new();
    let mut held = Vec::new();
    for _ in 0..4 {
        match pool.begin().await {
            Ok(mut application) => {
                sqlx::query("INSERT INTO app_rows_dropped VALUES (1)")
                    .execute(&mut *application)
                    .await
                    .unwrap();
                held.push(application);
                begun.push(Ok(()));
            }
            Err(error) => begun.push(Err(error.to_string())),
        }
    }
    let mut rolled_back = Vec::new();
    for application in held {
        rolled_back.push(application.rollback().await.map_err(|e| e.to_string()));
    }
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM app_rows_dropped")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert!(
        rows == 0 && begun.iter().all(Result::is_ok) && rolled_back.iter().all(Result::is_ok),
        "after a runtime on the application's pool was dropped, the application's four \
         begin() heard {begun:?}, their rollbacks {rolled_back:?}, and {rows} rolled-back \
         row(s) stayed (want four Ok begins and rollbacks, 0 rows)"
    );
}

/// The sweep that hands idle parked connections back to the pool runs on the Tokio runtime
/// of the turn that parked first; a runtime whose first turns ran on a Tokio runtime that has
/// since ended (a test's, a request's `block_on`) still gives its pool back once idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_holds_none_of_the_pool_after_its_first_tokio_runtime_ended() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 2, Duration::from_secs(3), None).await;
    let runtime = runtime_on_pool(&pool, &clock).await;
    // A first call on a Tokio runtime of its own, which ends right after it.
    record_on_a_tokio_runtime_of_its_own(&runtime, "first", "x");
    runtime
        .reference::<Ledger>("first")
        .record("y".to_owned())
        .await
        .unwrap();
    // Idle now: the application takes both of its pool's connections.
    assert_the_application_takes_both_connections(runtime, pool).await;
}

/// A runtime whose calls ran on a Tokio runtime that has since ended (a request's own
/// `block_on`, a CLI command's) gives its pool back once idle too, with no later call to
/// start its sweep again: the connection its last call parked is not kept for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_holds_none_of_the_pool_after_the_tokio_runtime_of_its_last_call_ended() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let pool = application_pool(&url, 2, Duration::from_secs(3), None).await;
    let runtime = runtime_on_pool(&pool, &clock).await;
    // The one call, on a Tokio runtime of its own, which ends right after it.
    record_on_a_tokio_runtime_of_its_own(&runtime, "first", "y");
    // Idle now: the application takes both of its pool's connections.
    assert_the_application_takes_both_connections(runtime, pool).await;
}

/// A pool that chooses its database in its `after_connect` hook (`USE`), as an application's
/// pool may, carries wake-ups too: the bell's connections are made as the pool makes its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wake_ups_reach_a_runtime_whose_pool_picks_its_database_after_connecting() {
    let Some((url, clock)) = database().await else {
        return;
    };
    let (server, name) = url.rsplit_once('/').unwrap();
    let name = name.to_owned();
    let pool = MySqlPoolOptions::new()
        .max_connections(4)
        .after_connect(move |connection, _| {
            let name = name.clone();
            Box::pin(async move {
                connection.execute(format!("USE {name}").as_str()).await?;
                Ok(())
            })
        })
        .connect(&format!("{server}/mysql"))
        .await
        .unwrap();
    let workers = on_pool(&pool, &clock)
        .actor::<Ledger>()
        .workers(1)
        .start()
        .await
        .unwrap();
    let running = run_workers(&workers);
    let caller = runtime(&url, &clock).await;
    let ledger = caller.reference::<Ledger>("woken");
    let mut heard = false;
    // The listener's first read only learns where the bell stands: enqueue until one is heard.
    for n in 0..20 {
        let before = workers.stats().work_notices;
        ledger.enqueue().record(format!("e{n}")).await.unwrap();
        if crate::support::eventually(Duration::from_secs(1), || async {
            workers.stats().work_notices > before
        })
        .await
        {
            heard = true;
            break;
        }
    }
    workers.shutdown();
    let _ = tokio::time::timeout(SOON, running).await;
    workers.close().await;
    caller.close().await;
    pool.close().await;
    assert!(
        heard,
        "a runtime on a pool that picks its database after connecting heard no wake-up"
    );
}

/// A test database is a copy of a template this build migrated: its tables, columns,
/// indexes and applied migrations are those a runtime's own migrations make, and a runtime
/// starts on it without migrating anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_database_has_the_schema_the_migrations_make() {
    let Some((migrated, clock)) = database().await else {
        return;
    };
    runtime(&migrated, &clock).await.close().await;
    let server = format!("{}/mysql", migrated.rsplit_once('/').unwrap().0);
    let copy = solid_objects::TestDatabase::create(&server).await.unwrap();
    let schema = |url: String| async move {
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        let mut described = Vec::new();
        for sql in [
            "SELECT CONCAT_WS(' ', table_name, column_name, column_type, is_nullable,
                              COALESCE(column_default, '-'), COALESCE(collation_name, '-'), extra)
             FROM information_schema.columns WHERE table_schema = DATABASE()
             ORDER BY table_name, ordinal_position",
            "SELECT CONCAT_WS(' ', table_name, index_name, seq_in_index, column_name, non_unique,
                              COALESCE(sub_part, '-'))
             FROM information_schema.statistics WHERE table_schema = DATABASE()
             ORDER BY table_name, index_name, seq_in_index",
            "SELECT CONCAT_WS(' ', table_name, engine, table_collation, COALESCE(create_options, ''))
             FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name",
            "SELECT CONCAT('migration ', version, ' ', description) FROM solid_schema_migrations
             ORDER BY version",
            "SELECT CONCAT('bell ', id) FROM solid_wake_ups ORDER BY id",
        ] {
            let rows: Vec<Vec<u8>> = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
            described.extend(rows.into_iter().map(|row| String::from_utf8(row).unwrap()));
        }
        pool.close().await;
        described
    };
    let (expected, copied) = (
        schema(migrated.clone()).await,
        schema(copy.url().to_owned()).await,
    );
    assert!(expected.len() > 40, "{expected:#?}");
    assert_eq!(
        copied, expected,
        "the copy's schema differs from the migrated one"
    );
    let started = copy
        .builder(2)
        .clock(clock.clone())
        .policy(AllowAll)
        .apply_migrations(false)
        .start()
        .await;
    let started = started.expect("a runtime that migrates nothing starts on the copy");
    started
        .reference::<Ledger>("l")
        .record("x".to_owned())
        .await
        .unwrap();
    started.close().await;
    copy.drop_database().await.unwrap();
}

/// Every process that makes test databases checks the template under its migration lock
/// once (each test binary, each test under a runner that starts a process per test); a
/// database copied from the template while another process holds that lock is still a
/// database of its own: a runtime starts on it at once, waiting for no lock of another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_database_copied_while_another_process_checks_the_template_starts_at_once() {
    let Some((some_database, clock)) = database().await else {
        return;
    };
    let server = format!("{}/mysql", some_database.rsplit_once('/').unwrap().0);
    // This process's template, migrated and known.
    solid_objects::TestDatabase::create(&server)
        .await
        .unwrap()
        .drop_database()
        .await
        .unwrap();
    let admin = sqlx::MySqlPool::connect(&server).await.unwrap();
    let templates: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
         WHERE SCHEMA_NAME LIKE 'solid\\_template\\_%'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(templates.len(), 1, "one template on this server");
    let template = String::from_utf8(templates[0].clone()).unwrap();

    // Another process checks the template: its migrator holds the lock, as it takes it.
    sqlx::raw_sql(&format!(
        "INSERT INTO `{template}`.solid_migration_lock (id, holder, expires_at)
         VALUES (1, 'another-process', CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
                                       + 30000000)"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let copied = solid_objects::TestDatabase::create(&server).await;
    // ... and gives it back.
    sqlx::raw_sql(&format!("DELETE FROM `{template}`.solid_migration_lock"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let copy = copied.unwrap();

    let started = tokio::time::timeout(
        Duration::from_secs(10),
        copy.builder(2)
            .clock(clock.clone())
            .policy(AllowAll)
            .start(),
    )
    .await;
    let runtime = started
        .expect("the runtime on the copy waited for the migration lock of another process")
        .unwrap();
    runtime.close().await;
    copy.drop_database().await.unwrap();
}
