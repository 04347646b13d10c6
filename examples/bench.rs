//! Throughput, latency and cost of the framework beside the fastest honest hand-written
//! equivalent, measured in the same run, with its target beside each ratio.
//!
//! `cargo run --release --example bench [-- OPERATIONS [POSTGRES_URL]]`: OPERATIONS calls
//! per throughput row (default 2000); with a URL, the PostgreSQL rows too.
//!
//! The baseline ("raw") is the turn an application would write by hand: one transaction per
//! operation that reads the counter's row, writes it back and appends one log row (what a
//! durable turn writes), with the runtime's pragmas (WAL, the same `synchronous`,
//! `busy_timeout`, foreign keys). It holds its connections itself, outside any pool: sqlx's
//! pool costs about a third of a SQLite turn (its acquire and release), which made the old
//! baseline slow and the ratios look better than they were. On SQLite it has one connection,
//! so however many callers there are it runs one transaction at a time (callers take turns
//! through a mutex): that is the raw single-transaction rate the targets refer to. On
//! PostgreSQL each raw caller holds a connection of its own, as pgbench's clients do.
//!
//! Each throughput row prints the framework's rate, the baseline's, their ratio, the target
//! (a ratio, `x`, or a rate the framework's column must reach, `/s`), the p50 and p99
//! latency of the framework's calls, and its errors (failed calls are counted, not fatal;
//! the target is 0 in every row). Every caller first calls each of its actors once, untimed,
//! so the rows measure turns on actors that exist. The rows:
//!
//! 1. SQLite `synchronous = FULL`, 1 caller on 1 actor, against raw with 1 caller (target
//!    0.9x).
//! 2. FULL, 16 callers on 1 actor (a hot key), against the framework's own 1-caller rate
//!    (row 1; target 5,000 calls/s), and against raw with 16 callers on 1 row.
//! 3. FULL, 16 callers over 100 actors (call `i` goes to actor `i % 100`), against raw with
//!    1 caller (row 1's baseline; target 3x), and against raw with 16 callers over 100 rows.
//! 4. `synchronous = NORMAL`, 1 caller, and 16 callers over 100 actors, against raw NORMAL;
//!    the 1-caller row also against the raw turn on rusqlite (SQLite called on the caller's
//!    thread, no worker-thread hand-offs): the driver's limit.
//! 5. With a URL, PostgreSQL: 1 caller on 1 actor, 16 callers on 1 actor (a hot key), and 16
//!    callers over 100 actors (a runtime of 16 connections), against raw with as many
//!    connections as callers on as many rows as actors (`SELECT ... FOR UPDATE`, update, log
//!    row; 16 connections on 1 row is pgbench's hot turn); targets 0.9x for 1 caller, 2x on
//!    the hot key and 1.2x over 100 actors (the raw turn commits each call; calls that share
//!    one transaction need not). The note gives the share of turns that ran in another call's
//!    transaction.
//! 6. Drain: `BENCH_DRAIN_MESSAGES` (default 10,000) messages enqueued over 100 actors by a
//!    runtime with no workers; then a runtime on FULL runs 2 workers, timed from `run()`
//!    until the handlers have run them all; messages per second against row 1's raw rate,
//!    and the runtime's statements per message. The counters' sum is checked afterwards:
//!    each message missing from it is an error.
//! 7. Reminders: `BENCH_REMINDERS` (default 5,000) actors each arm one reminder due at
//!    once; a runtime on FULL that knows no actor fires them all (reminders per second and
//!    its statements per reminder fired; target: at most 2), then one with 2 workers rings
//!    them (turns per second and statements per turn).
//! 8. 1 MB state: one actor holding a 1,000,000-byte string takes `BENCH_LARGE_CALLS`
//!    (default 200) small commands from 1 caller, on SQLite FULL (target: 400 calls/s) and
//!    (with a URL) PostgreSQL (target: 200 calls/s).
//!
//! The enqueueing and arming of rows 6 and 7 run on `synchronous = NORMAL` and are not timed.
//! Then:
//!
//! - written per call, for rows 1 to 5, framework against raw: on SQLite the WAL frames
//!   (one page each) appended per call, counted after the timed run over 4 windows of 64
//!   calls with the same callers, each from a truncated WAL (`wal_checkpoint(TRUNCATE)`)
//!   and read from the WAL file's size; on PostgreSQL the growth of the server's WAL
//!   position (`pg_current_wal_lsn()`) during the timed run, which counts anything else the
//!   server logged meanwhile too.
//! - round trips per call, for rows 1 to 5, framework against raw. On PostgreSQL and MySQL
//!   the bench counts at the wire, so any server URL will do: after each timed run, a
//!   runtime of its own (the same 16 connections) and raw connections of their own reach
//!   the server through a proxy on loopback inside the bench, which relays TCP and counts
//!   round trips (a burst of bytes from a client after the server last spoke) and bytes each
//!   way. Each counts over 4 windows of 64 calls with the same callers, after one window
//!   uncounted (it opens the connections and prepares the statements), each window from a
//!   quiet wire to a quiet wire (nothing crossing for 50 ms), so that the pool's check of a
//!   connection it takes back, which runs after the call returned, is counted with it, as
//!   is its check of a connection it hands out. Connections opened while counting are
//!   named, since their start-up is in the count. Beside them, the statements per call the
//!   runtime counts (`Runtime::stats`: those in its write transactions, plus each one's
//!   BEGIN and COMMIT), and raw's 5. Targets: PostgreSQL at most 5 round trips for 1 caller
//!   and 6 for the hot key. The proxy is never in a timed run. On SQLite, which has no
//!   wire, the count is of statements handed to sqlx's worker thread, from the runtime's
//!   counters over the timed run: its statements (a turn's group BEGIN, or its SAVEPOINT
//!   when it joins a group commit, travels with its first, the lock) and a COMMIT per
//!   database commit (statements outside its write transactions are not in those
//!   counters); the raw turn hands over 5 (BEGIN, the read, the upsert, the log row,
//!   COMMIT).
//! - wake-up latency: runtime A runs 4 idle workers; runtime B, on a pool of its own and
//!   running no workers, enqueues a message; the time from B's enqueue returning (its
//!   commit done) to A's handler starting, p50 and p95 over `BENCH_WAKE_SAMPLES` (default
//!   20) messages sent at random moments. A and B share this OS process but nothing in
//!   memory: A learns of the message only through the database (PostgreSQL's
//!   `LISTEN`/`NOTIFY`, MySQL's wake-up bell, or its workers' poll). On SQLite, and on
//!   PostgreSQL with `Builder::listen(false)`, that is polling alone. MySQL's target: p50 at
//!   most 20 ms and p99 at most 100 ms (its listener is warm: the samples come within 10 s
//!   of each other).
//! - chains: 60 three-hop chains (Entry, then one Hub actor, then Finish) sent at once, on
//!   one runtime of 2 workers, then on two that share nothing in memory and send half each:
//!   a hop committed by one while the other holds the hub reaches the holder only through
//!   the database. Target: two within 1.5x of one (tests/processes/chains_across_processes.rs
//!   runs the same chains in two OS processes).
//! - idle cost: the CPU time (user + system, from /proc/self/stat) this process uses over
//!   `BENCH_IDLE_SECONDS` (default 20) while a runtime's 4 workers run with no work, as a
//!   percentage of one core (the database server's own CPU is not counted); on MySQL also
//!   the statements per second the server counted. MySQL's target: at most 1% and 20/s.
//!
//! And the process's peak resident memory at the end.
//!
//! With `BENCH_MYSQL_URL` (`mysql://...`, MySQL 8 or MariaDB), row 5's three workloads and
//! row 8 run on that server too, against the same raw turn in MySQL's form (`SELECT ... FOR
//! UPDATE`, `INSERT ... ON DUPLICATE KEY UPDATE`, log row), with row 5's targets and at most
//! 5 round trips per call; written per call is the growth of InnoDB's redo log sequence
//! number. Written per call, 1 caller, on PostgreSQL and MySQL: target at most 1.3x raw's.
//!
//! - charts: on SQLite and each server named, `BENCH_CHART_MESSAGES` (default 1,000,000)
//!   finished messages over the 23.5 hours before noon (with their failed attempts, fired
//!   reminders and done effects), loaded in one statement per table from a generated series
//!   and tallied by the workers' fold (its time printed); then the time to fetch every window
//!   of the overview and of an actor's page from the dashboard's router, and the overview's
//!   figures alone. Target: every page under 200 ms in the test profile (run the bench
//!   without `--release` for this row: `BENCH_ROWS=charts cargo run --example bench`). On
//!   MySQL the series is MariaDB's `seq_1_to_N`.
//!
//! `BENCH_ROWS` (a comma-separated list of `calls`, `postgres`, `mysql`, `drain`,
//! `reminders`, `large`, `wake`, `idle`, `charts`) runs only those rows; `drain` runs `calls` too, for
//! its baseline.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use solid_objects::SqliteFile;
use solid_objects::{Durability, Stats};
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::Connection;
use tokio::sync::Barrier;

/// The actor of the throughput and drain rows: one counter.
#[actor]
#[derive(Default)]
pub struct Counter {
    value: u64,
}

#[actor]
impl Counter {
    /// Adds one; returns the new value.
    #[command]
    pub fn increment(&mut self) -> u64 {
        self.value += 1;
        HANDLED.fetch_add(1, Ordering::Relaxed);
        self.value
    }
}

/// The actor of the reminder row: arms one reminder, due at once, and counts its rings.
#[actor]
#[derive(Default)]
pub struct Alarm {
    rung: u64,
}

#[actor]
impl Alarm {
    /// Schedules `ring` for now.
    #[command]
    pub fn arm(&mut self, turn: &mut Turn<Self>) {
        turn.schedule(turn.now(), "bench").ring();
    }

    /// Counts the ring.
    #[reminder]
    fn ring(&mut self) {
        self.rung += 1;
        HANDLED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The actor of the 1 MB state row.
#[actor]
#[derive(Default)]
pub struct Blob {
    data: String,
    touches: u64,
}

#[actor]
impl Blob {
    /// Replaces the data with `bytes` bytes.
    #[command]
    pub fn fill(&mut self, bytes: u64) {
        self.data = "x".repeat(usize::try_from(bytes).unwrap_or(usize::MAX));
    }

    /// A small change to a large state.
    #[command]
    pub fn touch(&mut self) -> u64 {
        self.touches += 1;
        self.touches
    }
}

/// Records when its handler starts, for the wake-up latency.
#[actor]
#[derive(Default)]
pub struct Stamp {}

#[actor]
impl Stamp {
    /// Tells the bench that a handler started, and when.
    #[command]
    pub fn stamp(&mut self) {
        let started = STARTED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(started) = &*started {
            let _ = started.send(Instant::now());
        }
    }
}

/// Where `Stamp::stamp` reports the moments its handler starts.
static STARTED: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Instant>>> = Mutex::new(None);

/// How many times `Counter::increment` and `Alarm::ring` have run, for the drain and
/// reminder rows (which run one at a time and read the growth).
static HANDLED: AtomicU64 = AtomicU64::new(0);

type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type Failed = Box<dyn std::error::Error + Send + Sync>;

/// Counters per row; the index of a call picks its actor, `index % actors`.
const SPREAD: usize = 100;
/// Callers of the concurrent rows.
const CALLERS: usize = 16;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Outcome {
    let operations: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(2000);
    let postgres = std::env::args().nth(2);
    println!(
        "{operations} calls per throughput row; rates per second, higher is better; \
         p50/p99: the framework's calls; target: the ratio (x) or the framework's rate (/s) \
         to reach; errors: 0 in every row"
    );
    let only = std::env::var("BENCH_ROWS").ok();
    let runs = |rows: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|r| r == rows))
    };
    print_header();
    let (mut written, mut trips) = (Vec::new(), Vec::new());
    // The drain row compares with the raw FULL rate that the SQLite call rows measure.
    let raw_full = if runs("calls") || runs("drain") {
        Some(sqlite_rows(operations, &mut written, &mut trips).await?)
    } else {
        None
    };
    if let Some(url) = postgres.as_deref().filter(|_| runs("postgres")) {
        // Row 5.
        let meter = Meter::Wal(PgConnection::connect(url).await?);
        let results = (&mut written, &mut trips);
        dialect_rows::<sqlx::Postgres>(&POSTGRES, meter, operations, url, results).await?;
    }
    let mysql = std::env::var("BENCH_MYSQL_URL").ok();
    if let Some(url) = mysql.as_deref().filter(|_| runs("mysql")) {
        let meter = Meter::Redo(MySqlConnection::connect(url).await?);
        let results = (&mut written, &mut trips);
        dialect_rows::<sqlx::MySql>(&MYSQL, meter, operations, url, results).await?;
    }
    if let Some(raw_full) = raw_full.filter(|_| runs("drain")) {
        drain_row(raw_full).await?;
    }
    if runs("reminders") {
        reminder_row().await?;
    }
    if runs("large") {
        large_state_rows(postgres.as_deref(), mysql.as_deref()).await?;
    }
    print_written(&written);
    print_round_trips(&trips);
    if runs("wake") {
        wake_up_rows(postgres.as_deref(), mysql.as_deref()).await?;
        chain_rows(postgres.as_deref(), mysql.as_deref()).await?;
    }
    if runs("idle") {
        idle_rows(postgres.as_deref(), mysql.as_deref()).await?;
    }
    if runs("charts") {
        chart_rows(postgres.as_deref(), mysql.as_deref()).await?;
    }
    println!("\npeak resident memory: {}", peak_memory());
    Ok(())
}

/// What a timed run did: successful calls per second, each call's latency (sorted; empty
/// where calls are not timed one by one) and the failed calls.
struct Measured {
    rate: f64,
    latencies: Vec<Duration>,
    errors: u64,
    /// For the framework: its write transactions per database commit (group commit).
    per_commit: Option<f64>,
    /// For the framework: what its runtime counted during the run.
    counted: Option<Counted>,
}

impl Measured {
    /// A row's figures that are a rate and its errors alone.
    fn rate_only(rate: f64, errors: u64) -> Self {
        Self {
            rate,
            latencies: Vec::new(),
            errors,
            per_commit: None,
            counted: None,
        }
    }
}

/// What a runtime's counters (`Runtime::stats`) grew by over some calls, with those calls.
#[derive(Clone, Copy)]
struct Counted {
    /// The calls that succeeded.
    calls: u64,
    /// Statements run inside write transactions (BEGIN and COMMIT not counted).
    statements: u64,
    /// Write transactions committed.
    transactions: u64,
    /// Database commits (on SQLite, one per group of transactions).
    commits: u64,
    /// Turns that ran in another call's transaction (calls that share one).
    grouped: u64,
}

impl Counted {
    /// The growth of `runtime`'s counters since `before`, over `calls` calls.
    fn since(runtime: &Runtime, before: Stats, calls: u64) -> Self {
        let after = runtime.stats();
        Self {
            calls,
            statements: after.statements.saturating_sub(before.statements),
            transactions: after.transactions.saturating_sub(before.transactions),
            commits: after.commits.saturating_sub(before.commits),
            grouped: after.grouped_turns.saturating_sub(before.grouped_turns),
        }
    }

    /// The share of turns that ran in another call's transaction, in percent.
    fn grouped_percent(&self) -> f64 {
        100.0 * self.grouped as f64 / (self.transactions + self.grouped).max(1) as f64
    }

    /// Write transactions per database commit.
    fn per_commit(&self) -> f64 {
        self.transactions as f64 / self.commits.max(1) as f64
    }

    /// Statements per call with each transaction's BEGIN and COMMIT.
    fn statements_per_call(&self) -> f64 {
        (self.statements + 2 * self.transactions) as f64 / self.calls.max(1) as f64
    }

    /// SQLite: the statements handed to sqlx's worker thread per call: the counted ones
    /// (a turn's group `BEGIN` or member `SAVEPOINT` travels with its lock, the first of
    /// them) and a COMMIT per group.
    fn hand_offs_per_call(&self) -> f64 {
        (self.statements + self.commits) as f64 / self.calls.max(1) as f64
    }
}

/// A framework run and the raw run it is compared with, with the bytes each wrote per call.
struct Pair {
    framework: Measured,
    raw: Measured,
    framework_written: f64,
    raw_written: f64,
}

/// A line of the "written per call" table.
struct Written {
    workload: String,
    framework: f64,
    raw: f64,
    target: &'static str,
}

/// A line of the "round trips per call" table.
struct RoundTrips {
    workload: String,
    framework: f64,
    raw: f64,
    target: &'static str,
    note: String,
}

/// The main table's column heads.
fn print_header() {
    println!(
        "\n{:<40} {:>9} {:>9} {:>7} {:>7} {:>8} {:>8} {:>6}  baseline",
        "workload", "framework", "baseline", "ratio", "target", "p50 ms", "p99 ms", "errors"
    );
}

/// Prints one line of the main table; `baseline` is `None` for the rows with an absolute
/// target.
fn print_line(
    workload: &str,
    measured: &Measured,
    baseline: Option<f64>,
    target: &str,
    note: &str,
) {
    let (base, ratio) = match baseline {
        Some(base) => (
            format!("{base:.0}"),
            format!("{:.2}x", measured.rate / base),
        ),
        None => ("-".to_owned(), "-".to_owned()),
    };
    let latency = |percent| {
        if measured.latencies.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.2}", millis(percentile(&measured.latencies, percent)))
        }
    };
    let mut grouped = measured
        .per_commit
        .map(|per_commit| format!("; {per_commit:.1} transactions per commit"))
        .unwrap_or_default();
    if let Some(counted) = measured.counted.filter(|counted| counted.grouped > 0) {
        grouped.push_str(&format!(
            "; {:.0}% of turns in another call's transaction",
            counted.grouped_percent()
        ));
    }
    println!(
        "{workload:<40} {:>9.0} {base:>9} {ratio:>7} {target:>7} {:>8} {:>8} {:>6}  {note}{grouped}",
        measured.rate,
        latency(50),
        latency(99),
        measured.errors,
    );
}

/// Rows 1 to 4; returns row 1's raw rate, the baseline of the drain row.
async fn sqlite_rows(
    operations: usize,
    written: &mut Vec<Written>,
    trips: &mut Vec<RoundTrips>,
) -> Result<f64, Failed> {
    let full = Durability::Full;
    let one = sqlite_pair(full, 1, 1, operations).await?;
    one.print_against_its_raw("SQLite FULL, 1 caller, 1 actor", ">=0.9x", "raw, 1 caller");
    let hot = sqlite_pair(full, CALLERS, 1, operations).await?;
    print_line(
        "SQLite FULL, 16 callers, 1 actor",
        &hot.framework,
        Some(one.framework.rate),
        "5000/s",
        "the framework's 1-caller rate (row above); the target is a rate",
    );
    hot.print_against_its_raw(
        "  the same, against raw",
        "",
        "raw, 16 callers on 1 row, 1 connection",
    );
    let spread = sqlite_pair(full, CALLERS, SPREAD, operations).await?;
    print_line(
        "SQLite FULL, 16 callers, 100 actors",
        &spread.framework,
        Some(one.raw.rate),
        ">=3x",
        "raw, 1 caller (row 1's baseline)",
    );
    spread.print_against_its_raw(
        "  the same, against raw",
        "",
        "raw, 16 callers over 100 rows, 1 connection",
    );
    let normal = Durability::Normal;
    let normal_one = sqlite_pair(normal, 1, 1, operations).await?;
    normal_one.print_against_its_raw(
        "SQLite NORMAL, 1 caller, 1 actor",
        ">=1.5x",
        "raw NORMAL, 1 caller",
    );
    let driver = rusqlite_rate(normal, operations).await?;
    print_line(
        "  the same, against rusqlite",
        &normal_one.framework,
        Some(driver),
        "",
        "raw NORMAL on rusqlite, 1 caller: the same turn without sqlx's worker thread",
    );
    let normal_spread = sqlite_pair(normal, CALLERS, SPREAD, operations).await?;
    normal_spread.print_against_its_raw(
        "SQLite NORMAL, 16 callers, 100 actors",
        "",
        "raw NORMAL, 16 callers over 100 rows, 1 connection",
    );
    for (workload, pair) in [
        ("SQLite FULL, 1 caller", &one),
        ("SQLite FULL, 16 callers, 1 actor", &hot),
        ("SQLite FULL, 16 callers, 100 actors", &spread),
        ("SQLite NORMAL, 1 caller", &normal_one),
        ("SQLite NORMAL, 16 callers, 100 actors", &normal_spread),
    ] {
        written.push(Written {
            workload: workload.to_owned(),
            framework: pair.framework_written,
            raw: pair.raw_written,
            target: "<=1.3x",
        });
        if let Some(counted) = pair.framework.counted {
            trips.push(RoundTrips {
                workload: workload.to_owned(),
                framework: counted.hand_offs_per_call(),
                raw: RAW_SQLITE_HAND_OFFS,
                target: "",
                note: format!(
                    "counted in the timed run: {:.2} statements and {:.2} commits per call",
                    counted.statements as f64 / counted.calls.max(1) as f64,
                    counted.commits as f64 / counted.calls.max(1) as f64,
                ),
            });
        }
    }
    Ok(one.raw.rate)
}

impl Pair {
    /// Prints the row `name` of the framework's run against its raw run (`raw` says which),
    /// with `target`.
    fn print_against_its_raw(&self, name: &str, target: &str, raw: &str) {
        print_line(
            name,
            &self.framework,
            Some(self.raw.rate),
            target,
            &raw_note(raw, &self.raw),
        );
    }
}

/// The statements the raw SQLite turn hands to sqlx's worker thread: BEGIN, the read, the
/// upsert, the log row, COMMIT.
const RAW_SQLITE_HAND_OFFS: f64 = 5.0;

/// What the baseline column holds, with the raw run's errors if it had any.
fn raw_note(what: &str, raw: &Measured) -> String {
    match raw.errors {
        0 => what.to_owned(),
        errors => format!("{what} ({errors} raw errors)"),
    }
}

/// The framework and raw runs of one SQLite workload, each on a new file in one directory.
async fn sqlite_pair(
    durability: Durability,
    callers: usize,
    actors: usize,
    operations: usize,
) -> Result<Pair, Failed> {
    let dir = tempfile::tempdir()?;
    let runtime = Runtime::builder()
        .sqlite(SqliteFile::new(dir.path().join("framework.db")).durability(durability))
        .policy(AllowAll)
        .start()
        .await?;
    let (framework, framework_written) = framework_run(
        &runtime,
        &mut Meter::WalFile(dir.path().join("framework.db")),
        "c",
        callers,
        actors,
        operations,
    )
    .await?;
    runtime.close().await;

    let raw = raw_sqlite(&dir.path().join("raw.db"), durability).await?;
    let (raw, raw_written) = raw_run(
        vec![raw],
        &mut Meter::WalFile(dir.path().join("raw.db")),
        "c",
        callers,
        actors,
        operations,
        |connection, id| async move {
            sqlx::Sqlite::raw_turn(&mut *connection.lock().await, RAW_SQLITE_TURN, &id).await
        },
    )
    .await?;
    Ok(Pair {
        framework,
        raw,
        framework_written,
        raw_written,
    })
}

/// The raw SQLite connection: the runtime's pragmas, and the counters and their log.
async fn raw_sqlite(
    path: &std::path::Path,
    durability: Durability,
) -> Result<SqliteConnection, Failed> {
    let synchronous = match durability {
        Durability::Normal => SqliteSynchronous::Normal,
        _ => SqliteSynchronous::Full,
    };
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    let mut connection = SqliteConnection::connect_with(&options).await?;
    sqlx::raw_sql(RAW_SQLITE_TABLES)
        .execute(&mut connection)
        .await?;
    Ok(connection)
}

/// The raw turn's rate on rusqlite, which calls SQLite on the caller's own thread (here a
/// blocking one): what a driver without sqlx's worker-thread hand-offs reaches.
async fn rusqlite_rate(durability: Durability, operations: usize) -> Result<f64, Failed> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rusqlite.db");
    let synchronous = match durability {
        Durability::Normal => "NORMAL",
        _ => "FULL",
    };
    let elapsed = tokio::task::spawn_blocking(move || -> Result<Duration, rusqlite::Error> {
        let mut connection = rusqlite::Connection::open(&path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", synchronous)?;
        connection.pragma_update(None, "foreign_keys", true)?;
        connection.execute_batch(RAW_SQLITE_TABLES)?;
        let mut turn = || -> Result<(), rusqlite::Error> {
            let tx =
                connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let value: Option<i64> = tx
                .prepare_cached(RAW_SQLITE_TURN.read)?
                .query_row(["c-0"], |row| row.get(0))
                .map(Some)
                .or_else(|error| match error {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    error => Err(error),
                })?;
            let value = value.unwrap_or(0) + 1;
            tx.prepare_cached(RAW_SQLITE_TURN.write)?
                .execute(rusqlite::params!["c-0", value])?;
            tx.prepare_cached(RAW_SQLITE_TURN.log)?
                .execute(rusqlite::params![
                    "c-0",
                    chrono::Utc::now().timestamp_millis(),
                    value
                ])?;
            tx.commit()
        };
        turn()?;
        let started = Instant::now();
        for _ in 0..operations {
            turn()?;
        }
        Ok(started.elapsed())
    })
    .await??;
    Ok(operations as f64 / elapsed.as_secs_f64())
}

/// The raw SQLite turn's tables: the counters and their log.
const RAW_SQLITE_TABLES: &str =
    "CREATE TABLE raw_counters (id TEXT PRIMARY KEY, value INTEGER NOT NULL);
     CREATE TABLE raw_log (id INTEGER PRIMARY KEY, counter_id TEXT NOT NULL,
                           at INTEGER NOT NULL, value INTEGER NOT NULL);";

/// The raw SQLite turn's statements: its transaction takes the write lock at once.
const RAW_SQLITE_TURN: RawTurn = RawTurn {
    begin: Some("BEGIN IMMEDIATE"),
    logs_its_time: true,
    read: "SELECT value FROM raw_counters WHERE id = ?1",
    write: "INSERT INTO raw_counters (id, value) VALUES (?1, ?2)
            ON CONFLICT (id) DO UPDATE SET value = excluded.value",
    log: "INSERT INTO raw_log (counter_id, at, value) VALUES (?1, ?2, ?3)",
};

/// What the rows of PostgreSQL and MySQL do not share: names, targets and the raw turn's
/// SQL.
struct Dialect {
    name: &'static str,
    prefix: &'static str,
    default_port: u16,
    /// The round-trip targets of the hot key's workload and of the 100 actors' one.
    round_trips_targets: [&'static str; 2],
    /// Creates the raw turn's tables, if they are not there.
    raw_tables: &'static str,
    /// The raw turn: read the counter locked, write it back, log it.
    raw_turn: RawTurn,
    /// A runtime of 16 connections on a URL.
    builder: fn(&str) -> solid_objects::Builder,
}

/// The statements of one hand-written durable turn, in a backend's dialect.
#[derive(Clone, Copy)]
struct RawTurn {
    /// What begins the transaction, if not the driver's `BEGIN`.
    begin: Option<&'static str>,
    /// Whether the log row takes the time (in milliseconds) as its second parameter, rather
    /// than the server's clock.
    logs_its_time: bool,
    /// Reads the counter, locking its row.
    read: &'static str,
    /// Writes the counter back.
    write: &'static str,
    /// Appends the log row.
    log: &'static str,
}

const POSTGRES: Dialect = Dialect {
    name: "PostgreSQL",
    prefix: "pg",
    default_port: 5432,
    round_trips_targets: ["<=6", ""],
    raw_tables:
        "CREATE TABLE IF NOT EXISTS bench_raw_counters (id TEXT PRIMARY KEY, value BIGINT NOT NULL);
         CREATE TABLE IF NOT EXISTS bench_raw_log (id BIGSERIAL PRIMARY KEY,
             counter_id TEXT NOT NULL, at TIMESTAMPTZ NOT NULL, value BIGINT NOT NULL);",
    raw_turn: RawTurn {
        begin: None,
        logs_its_time: false,
        read: "SELECT value FROM bench_raw_counters WHERE id = $1 FOR UPDATE",
        write: "INSERT INTO bench_raw_counters (id, value) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET value = excluded.value",
        log: "INSERT INTO bench_raw_log (counter_id, at, value) VALUES ($1, now(), $2)",
    },
    builder: |url| Runtime::builder().postgres(url, 16),
};

const MYSQL: Dialect = Dialect {
    name: "MySQL",
    prefix: "my",
    default_port: 3306,
    round_trips_targets: ["<=5", "<=5"],
    raw_tables: "CREATE TABLE IF NOT EXISTS bench_raw_counters (id VARCHAR(255) PRIMARY KEY,
             value BIGINT NOT NULL) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
         CREATE TABLE IF NOT EXISTS bench_raw_log (id BIGINT AUTO_INCREMENT PRIMARY KEY,
             counter_id VARCHAR(255) NOT NULL, at TIMESTAMP(6) NOT NULL, value BIGINT NOT NULL)
             DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;",
    raw_turn: RawTurn {
        begin: None,
        logs_its_time: false,
        read: "SELECT value FROM bench_raw_counters WHERE id = ? FOR UPDATE",
        write: "INSERT INTO bench_raw_counters (id, value) VALUES (?, ?)
         ON DUPLICATE KEY UPDATE value = VALUES(value)",
        log: "INSERT INTO bench_raw_log (counter_id, at, value) VALUES (?, NOW(6), ?)",
    },
    builder: |url| Runtime::builder().mysql(url, 16),
};

/// The rows of the server of `url` (1 caller, 16 callers on 1 actor, 16 callers over 100
/// actors), in `dialect`, its writes measured by `meter`: row 5 on PostgreSQL, the MySQL
/// rows (with `BENCH_MYSQL_URL`) on MySQL or MariaDB.
async fn dialect_rows<DB>(
    dialect: &'static Dialect,
    mut meter: Meter,
    operations: usize,
    url: &str,
    results: (&mut Vec<Written>, &mut Vec<RoundTrips>),
) -> Outcome
where
    DB: RawTurnDatabase,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let mut setup = DB::Connection::connect(url).await?;
    sqlx::raw_sql(dialect.raw_tables)
        .execute(&mut setup)
        .await?;
    setup.close().await?;
    let [hot_key_round_trips, spread_round_trips] = dialect.round_trips_targets;
    let server = Server {
        name: dialect.name,
        prefix: dialect.prefix,
        url,
        default_port: dialect.default_port,
        workloads: vec![
            Workload {
                callers: 1,
                actors: 1,
                target: ">=0.9x",
                round_trips_target: "<=5",
                written_target: "<=1.3x",
            },
            Workload {
                callers: CALLERS,
                actors: 1,
                target: ">=2x",
                round_trips_target: hot_key_round_trips,
                written_target: "",
            },
            Workload {
                callers: CALLERS,
                actors: SPREAD,
                target: ">=1.2x",
                round_trips_target: spread_round_trips,
                written_target: "",
            },
        ],
        builder: Box::new(dialect.builder),
    };
    let statements = dialect.raw_turn;
    server_rows(
        server,
        &mut meter,
        operations,
        results,
        DB::Connection::connect,
        move |connection: Arc<tokio::sync::Mutex<DB::Connection>>, id| async move {
            DB::raw_turn(&mut *connection.lock().await, statements, &id).await
        },
    )
    .await
}

/// A database server's rows: its name, the prefix of its actors' ids, its URL and default
/// port, its workloads, and a builder of a runtime on a URL.
struct Server<'u> {
    name: &'static str,
    prefix: &'static str,
    url: &'u str,
    default_port: u16,
    workloads: Vec<Workload>,
    builder: Box<dyn Fn(&str) -> solid_objects::Builder + 'u>,
}

/// One workload of a server's rows, with its targets.
struct Workload {
    callers: usize,
    actors: usize,
    /// The framework's rate against raw's.
    target: &'static str,
    /// The framework's round trips per call.
    round_trips_target: &'static str,
    /// The framework's bytes written per call against raw's.
    written_target: &'static str,
}

/// A server's workloads: the framework (a runtime of 16 connections) against raw turns on as
/// many connections as callers, timed; then each again through a counting proxy, for its
/// round trips.
async fn server_rows<C, Connect, ConnectFut, T, Fut>(
    server: Server<'_>,
    meter: &mut Meter,
    operations: usize,
    (written, trips): (&mut Vec<Written>, &mut Vec<RoundTrips>),
    connect: Connect,
    turn: T,
) -> Outcome
where
    C: Send + 'static,
    Connect: Fn(&str) -> ConnectFut,
    ConnectFut: Future<Output = Result<C, sqlx::Error>>,
    T: Fn(Arc<tokio::sync::Mutex<C>>, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    // The actors and raw rows of earlier runs stay in the database: this run's have ids of
    // their own.
    let run = format!("{}", chrono::Utc::now().timestamp_millis());
    for workload in &server.workloads {
        let Workload {
            callers, actors, ..
        } = *workload;
        let name = match (callers, actors) {
            (1, _) => format!("{}, 1 caller, 1 actor", server.name),
            (_, 1) => format!("{}, {callers} callers, 1 actor", server.name),
            _ => format!("{}, {callers} callers, {actors} actors", server.name),
        };
        let prefix = format!("{}-{run}-{callers}-{actors}", server.prefix);
        let runtime = (server.builder)(server.url)
            .policy(AllowAll)
            .start()
            .await?;
        let (framework, framework_written) =
            framework_run(&runtime, meter, &prefix, callers, actors, operations).await?;
        runtime.close().await;
        // The baseline holds one connection per caller, as pgbench does, outside any pool
        // (the runtime's pool checks a connection on each acquire; that is its own cost).
        let mut connections = Vec::with_capacity(callers);
        for _ in 0..callers {
            connections.push(connect(server.url).await?);
        }
        let (raw, raw_written) = raw_run(
            connections,
            meter,
            &prefix,
            callers,
            actors,
            operations,
            turn.clone(),
        )
        .await?;
        let rows = if actors == 1 { "1 row" } else { "100 rows" };
        print_line(
            &name,
            &framework,
            Some(raw.rate),
            workload.target,
            &raw_note(&format!("raw, {callers} connection(s) on {rows}"), &raw),
        );
        written.push(Written {
            workload: name.clone(),
            framework: framework_written,
            raw: raw_written,
            target: workload.written_target,
        });

        // The same calls through the counting proxy, after the timed runs.
        let proxy = CountingProxy::start(server.url, server.default_port).await?;
        let runtime = (server.builder)(proxy.url())
            .policy(AllowAll)
            .start()
            .await?;
        let call = counter_calls(&runtime, &prefix, actors);
        measure(callers, WINDOW_CALLS, call.clone()).await?;
        let before = runtime.stats();
        let (framework_wire, calls) = wire_per_call(&proxy, callers, call).await?;
        let counted = Counted::since(&runtime, before, calls);
        runtime.close().await;
        let mut connections = Vec::with_capacity(callers);
        for _ in 0..callers {
            connections.push(connect(proxy.url()).await?);
        }
        let call = raw_calls(connections, &prefix, callers, actors, turn.clone());
        measure(callers, WINDOW_CALLS, call.clone()).await?;
        let (raw_wire, raw_calls) = wire_per_call(&proxy, callers, call).await?;
        let (framework_trips, raw_trips) =
            (framework_wire.per_call(calls), raw_wire.per_call(raw_calls));
        trips.push(RoundTrips {
            workload: name,
            framework: framework_trips.round_trips,
            raw: raw_trips.round_trips,
            target: workload.round_trips_target,
            note: format!(
                "counted statements {:.2} (raw 5); bytes to/from the server {:.0}/{:.0} (raw {:.0}/{:.0}){}",
                counted.statements_per_call(),
                framework_trips.to_server,
                framework_trips.to_client,
                raw_trips.to_server,
                raw_trips.to_client,
                connections_opened(framework_wire.connections + raw_wire.connections),
            ),
        });
    }
    Ok(())
}

/// The note of a round-trip line for connections opened while it counted (their start-up
/// round trips are in its count).
fn connections_opened(connections: u64) -> String {
    match connections {
        0 => String::new(),
        opened => format!("; {opened} connection(s) opened while counting"),
    }
}

/// A database the hand-written turn runs on.
trait RawTurnDatabase: sqlx::Database {
    /// One hand-written durable turn with `turn`'s statements: read the counter (locked),
    /// write it back, log it.
    fn raw_turn<'a>(
        connection: &'a mut Self::Connection,
        turn: RawTurn,
        id: &'a str,
    ) -> impl Future<Output = Outcome> + Send + 'a;
}

impl<DB> RawTurnDatabase for DB
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Decode<'q, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    async fn raw_turn(connection: &mut Self::Connection, turn: RawTurn, id: &str) -> Outcome {
        let mut tx = match turn.begin {
            Some(begin) => connection.begin_with(begin).await?,
            None => connection.begin().await?,
        };
        let value: Option<i64> = sqlx::query_scalar(turn.read)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        let value = value.unwrap_or(0) + 1;
        sqlx::query(turn.write)
            .bind(id)
            .bind(value)
            .execute(&mut *tx)
            .await?;
        let log = sqlx::query(turn.log).bind(id);
        let log = match turn.logs_its_time {
            true => log.bind(chrono::Utc::now().timestamp_millis()),
            false => log,
        };
        log.bind(value).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// How a run's writes are measured.
enum Meter {
    /// SQLite: the WAL frames (pages) that short runs after the timed one append to the
    /// database's WAL, truncated before each.
    WalFile(std::path::PathBuf),
    /// PostgreSQL: the bytes the server's WAL position moves during the timed run, read on a
    /// connection of its own.
    Wal(PgConnection),
    /// MySQL: the bytes InnoDB's redo log sequence number moves during the timed run.
    Redo(MySqlConnection),
}

impl Meter {
    /// Where the server's log of writes stands, in bytes: PostgreSQL's WAL position or
    /// InnoDB's redo log sequence number.
    async fn log_position(&mut self) -> Result<u64, Failed> {
        match self {
            Meter::WalFile(_) => Err("a SQLite file's writes are counted in WAL frames".into()),
            Meter::Wal(connection) => wal_position(connection).await,
            Meter::Redo(connection) => redo_position(connection).await,
        }
    }
}

/// Calls in each counting window (WAL frames, round trips): few enough that a window's WAL
/// frames stay below SQLite's automatic checkpoint (1,000 pages), which would restart the WAL
/// mid-count.
const WINDOW_CALLS: usize = 64;
/// Counting windows after each timed run.
const WINDOWS: usize = 4;

/// The position of the server's WAL, in bytes.
async fn wal_position(connection: &mut PgConnection) -> Result<u64, Failed> {
    let position: i64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
            .fetch_one(connection)
            .await?;
    Ok(u64::try_from(position)?)
}

/// InnoDB's redo log sequence number, in bytes (`Innodb_lsn_current` on MariaDB,
/// `Innodb_redo_log_current_lsn` on MySQL 8).
async fn redo_position(connection: &mut MySqlConnection) -> Result<u64, Failed> {
    let rows = sqlx::raw_sql(
        "SHOW GLOBAL STATUS
         WHERE Variable_name IN ('Innodb_lsn_current', 'Innodb_redo_log_current_lsn')",
    )
    .fetch_all(connection)
    .await?;
    let row = rows
        .first()
        .ok_or("the server shows no redo log position")?;
    let value: String = sqlx::Row::try_get(row, 1)?;
    Ok(value.parse()?)
}

/// The WAL frames per call that `call` appends to the SQLite database at `path`: the WAL is
/// truncated, `WINDOW_CALLS` calls run from `callers` callers, and the WAL file's frames
/// are counted, `WINDOWS` times.
async fn wal_frames_per_call<F, Fut>(
    path: &std::path::Path,
    callers: usize,
    call: F,
) -> Result<f64, Failed>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let mut connection =
        SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path)).await?;
    let page_size: u64 = sqlx::query_scalar::<_, i64>("PRAGMA page_size")
        .fetch_one(&mut connection)
        .await?
        .try_into()?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let (mut frames, mut calls) = (0, 0);
    for _ in 0..WINDOWS {
        let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut connection)
            .await?;
        if busy != 0 {
            return Err("the WAL could not be truncated: a reader or writer is active".into());
        }
        let measured = measure(callers, WINDOW_CALLS, call.clone()).await?;
        // A WAL file: a 32-byte header, then frames of a 24-byte header and one page.
        let size = std::fs::metadata(&wal).map_or(0, |metadata| metadata.len());
        let window = size.saturating_sub(32) / (page_size + 24);
        if window >= 1_000 {
            return Err("a WAL window reached the automatic checkpoint; use fewer calls".into());
        }
        frames += window;
        calls += succeeded(&measured);
    }
    connection.close().await?;
    Ok(frames as f64 / calls.max(1) as f64)
}

/// What crossed a counting proxy: round trips, bytes each way, and connections opened.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Wire {
    /// Bursts of bytes from a client after its server last spoke (or, on a new connection,
    /// its first).
    round_trips: u64,
    /// Bytes from the clients to the server.
    to_server: u64,
    /// Bytes from the server to the clients.
    to_client: u64,
    /// Connections the clients opened.
    connections: u64,
}

impl Wire {
    /// What crossed since `before`.
    fn since(self, before: Self) -> Self {
        Self {
            round_trips: self.round_trips - before.round_trips,
            to_server: self.to_server - before.to_server,
            to_client: self.to_client - before.to_client,
            connections: self.connections - before.connections,
        }
    }

    /// This and `other` together.
    fn plus(self, other: Self) -> Self {
        Self {
            round_trips: self.round_trips + other.round_trips,
            to_server: self.to_server + other.to_server,
            to_client: self.to_client + other.to_client,
            connections: self.connections + other.connections,
        }
    }

    /// Round trips and bytes per call, over `calls` calls.
    fn per_call(self, calls: u64) -> WirePerCall {
        let calls = calls.max(1) as f64;
        WirePerCall {
            round_trips: self.round_trips as f64 / calls,
            to_server: self.to_server as f64 / calls,
            to_client: self.to_client as f64 / calls,
        }
    }
}

/// Round trips and bytes each way per call.
struct WirePerCall {
    round_trips: f64,
    to_server: f64,
    to_client: f64,
}

/// The counters behind a proxy's [`Wire`].
#[derive(Default)]
struct WireCounters {
    round_trips: AtomicU64,
    to_server: AtomicU64,
    to_client: AtomicU64,
    connections: AtomicU64,
}

impl WireCounters {
    fn read(&self) -> Wire {
        Wire {
            round_trips: self.round_trips.load(Ordering::Acquire),
            to_server: self.to_server.load(Ordering::Acquire),
            to_client: self.to_client.load(Ordering::Acquire),
            connections: self.connections.load(Ordering::Acquire),
        }
    }
}

/// A TCP proxy on loopback between clients and a database server, which counts what crosses
/// it: the bench routes its counting windows through one, never its timed runs.
struct CountingProxy {
    /// The server's URL with the proxy's address in place of the server's.
    url: String,
    counters: Arc<WireCounters>,
    accepting: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Starts a proxy to the server of `url` (`default_port` when the URL names none).
    async fn start(url: &str, default_port: u16) -> Result<Self, Failed> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (server, url) = route_through(url, default_port, listener.local_addr()?)?;
        let counters = Arc::new(WireCounters::default());
        let accepting = tokio::spawn({
            let counters = Arc::clone(&counters);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    counters.connections.fetch_add(1, Ordering::AcqRel);
                    tokio::spawn(relay(client, server.clone(), Arc::clone(&counters)));
                }
            }
        });
        Ok(Self {
            url,
            counters,
            accepting,
        })
    }

    /// The URL that reaches the server through the proxy.
    fn url(&self) -> &str {
        &self.url
    }

    /// What has crossed the proxy once nothing has for 50 ms (a pool checks a connection it
    /// takes back after the call that used it returned), waiting 2 s at most.
    async fn settled(&self) -> Wire {
        let mut last = self.counters.read();
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = self.counters.read();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// The `host:port` of the server that `url` names (with `default_port` if it names none),
/// and `url` with `proxy` in their place; user, password, database and options are kept.
fn route_through(
    url: &str,
    default_port: u16,
    proxy: std::net::SocketAddr,
) -> Result<(String, String), Failed> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("the round-trip count needs a URL of the form scheme://host[:port]/...")?;
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((user, host_port)) => (format!("{user}@"), host_port),
        None => (String::new(), authority),
    };
    if host_port.is_empty() || host_port.starts_with('/') {
        return Err(
            "the round-trip count needs a server reached over TCP (a host in the URL)".into(),
        );
    }
    let has_port = match host_port.rsplit_once(']') {
        Some((_, after)) => after.starts_with(':'),
        None => host_port.contains(':'),
    };
    let server = if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    };
    Ok((server, format!("{scheme}://{user}{proxy}{tail}")))
}

/// Relays one client connection to `server` and back, counting round trips and bytes: a
/// round trip is a burst of client bytes after the server last spoke.
async fn relay(client: tokio::net::TcpStream, server: String, counters: Arc<WireCounters>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let Ok(upstream) = tokio::net::TcpStream::connect(&server).await else {
        return;
    };
    // The proxy forwards each burst at once, as the client and server sent it.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_reads, mut client_writes) = client.into_split();
    let (mut server_reads, mut server_writes) = upstream.into_split();
    // Set before the server's bytes are passed on, so that the client's answer to them,
    // which cannot come earlier, starts a new round trip.
    let server_spoke = AtomicBool::new(true);
    let to_server = async {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = client_reads.read(&mut buffer).await {
            if server_spoke.swap(false, Ordering::AcqRel) {
                counters.round_trips.fetch_add(1, Ordering::AcqRel);
            }
            counters.to_server.fetch_add(read as u64, Ordering::AcqRel);
            if server_writes.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = server_writes.shutdown().await;
    };
    let to_client = async {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = server_reads.read(&mut buffer).await {
            server_spoke.store(true, Ordering::Release);
            counters.to_client.fetch_add(read as u64, Ordering::AcqRel);
            if client_writes.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = client_writes.shutdown().await;
    };
    tokio::join!(to_server, to_client);
}

/// What `call` sends over `proxy`: `WINDOWS` windows of `WINDOW_CALLS` calls from `callers`
/// callers, each counted from and to a quiet wire. Returns what crossed and the calls that
/// succeeded.
async fn wire_per_call<F, Fut>(
    proxy: &CountingProxy,
    callers: usize,
    call: F,
) -> Result<(Wire, u64), Failed>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let (mut crossed, mut calls) = (Wire::default(), 0);
    for _ in 0..WINDOWS {
        let before = proxy.settled().await;
        let measured = measure(callers, WINDOW_CALLS, call.clone()).await?;
        crossed = crossed.plus(proxy.settled().await.since(before));
        calls += succeeded(&measured);
    }
    if calls > 0 && crossed.round_trips == 0 {
        return Err(
            "no call crossed the counting proxy: the URL reaches its server some other \
                    way (a host option?); give the host in the URL's address"
                .into(),
        );
    }
    Ok((crossed, calls))
}

/// Times `operations` increments from `callers` callers over `actors` counters of
/// `runtime` (ids `{prefix}-{n}`); returns them and the bytes written per call.
async fn framework_run(
    runtime: &Runtime,
    meter: &mut Meter,
    prefix: &str,
    callers: usize,
    actors: usize,
    operations: usize,
) -> Result<(Measured, f64), Failed> {
    let call = counter_calls(runtime, prefix, actors);
    for actor in 0..actors {
        call(actor).await?;
    }
    metered(meter, callers, operations, Some(runtime), call).await
}

/// Call `index` increments the counter `{prefix}-{index % actors}` of `runtime`.
fn counter_calls(
    runtime: &Runtime,
    prefix: &str,
    actors: usize,
) -> impl Fn(usize) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>
       + Clone
       + Send
       + Sync
       + 'static {
    let runtime = runtime.clone();
    let prefix = prefix.to_owned();
    move |index: usize| {
        let counter = runtime.reference::<Counter>(format!("{prefix}-{}", index % actors));
        Box::pin(async move {
            counter.increment().await?;
            Ok(())
        })
    }
}

/// Times `operations` hand-written turns from `callers` callers over `actors` rows (ids
/// `{prefix}-{n}`); caller `c` uses connection `c % connections.len()`. Returns them and
/// the bytes written per call.
async fn raw_run<C, T, Fut>(
    connections: Vec<C>,
    meter: &mut Meter,
    prefix: &str,
    callers: usize,
    actors: usize,
    operations: usize,
    turn: T,
) -> Result<(Measured, f64), Failed>
where
    C: Send + 'static,
    T: Fn(Arc<tokio::sync::Mutex<C>>, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let call = raw_calls(connections, prefix, callers, actors, turn);
    for actor in 0..actors {
        call(actor).await?;
    }
    metered(meter, callers, operations, None, call).await
}

/// Call `index` runs `turn` on the row `{prefix}-{index % actors}`, on the connection of
/// its caller: caller `c` uses connection `c % connections.len()`.
fn raw_calls<C, T, Fut>(
    connections: Vec<C>,
    prefix: &str,
    callers: usize,
    actors: usize,
    turn: T,
) -> impl Fn(usize) -> Fut + Clone + Send + Sync + 'static
where
    C: Send + 'static,
    T: Fn(Arc<tokio::sync::Mutex<C>>, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let connections: Vec<_> = connections
        .into_iter()
        .map(|connection| Arc::new(tokio::sync::Mutex::new(connection)))
        .collect();
    let prefix = prefix.to_owned();
    move |index: usize| {
        // `measure` hands caller `c` the indexes `c`, `c + callers`, ...
        let caller = index % callers;
        let connection = Arc::clone(&connections[caller % connections.len()]);
        turn(connection, format!("{prefix}-{}", index % actors))
    }
}

/// Times `operations` calls of `call` from `callers` callers, with what the counters of
/// `runtime` (the framework's) counted meanwhile; returns them and what each successful call
/// wrote, as `meter` measures it.
async fn metered<F, Fut>(
    meter: &mut Meter,
    callers: usize,
    operations: usize,
    runtime: Option<&Runtime>,
    call: F,
) -> Result<(Measured, f64), Failed>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    match meter {
        Meter::WalFile(path) => {
            let measured = counted(callers, operations, runtime, call.clone()).await?;
            let frames = wal_frames_per_call(path, callers, call).await?;
            Ok((measured, frames))
        }
        server => {
            let before = server.log_position().await?;
            let measured = counted(callers, operations, runtime, call).await?;
            let written = server.log_position().await?.saturating_sub(before);
            let per_call = written as f64 / succeeded(&measured).max(1) as f64;
            Ok((measured, per_call))
        }
    }
}

/// Runs `operations` calls as `measure` does, with what the counters of `runtime` (if any)
/// counted meanwhile.
async fn counted<F, Fut>(
    callers: usize,
    operations: usize,
    runtime: Option<&Runtime>,
    call: F,
) -> Result<Measured, Failed>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let before = runtime.map(Runtime::stats);
    let mut measured = measure(callers, operations, call).await?;
    if let (Some(runtime), Some(before)) = (runtime, before) {
        let counted = Counted::since(runtime, before, succeeded(&measured));
        measured.per_commit = Some(counted.per_commit());
        measured.counted = Some(counted);
    }
    Ok(measured)
}

/// Runs `operations` calls spread over `callers` tasks released together: caller `c` makes
/// the calls `call(c)`, `call(c + callers)`, ... below `operations`, one after another.
/// Failed calls are counted, and the first one's error printed.
async fn measure<F, Fut>(callers: usize, operations: usize, call: F) -> Result<Measured, Failed>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let call = Arc::new(call);
    let barrier = Arc::new(Barrier::new(callers + 1));
    let mut tasks = Vec::with_capacity(callers);
    for caller in 0..callers {
        let (call, barrier) = (Arc::clone(&call), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut latencies = Vec::with_capacity(operations / callers + 1);
            let mut errors = Vec::new();
            for index in (caller..operations).step_by(callers) {
                let started = Instant::now();
                let result = call(index).await;
                latencies.push(started.elapsed());
                if let Err(error) = result {
                    errors.push(error.to_string());
                }
            }
            (latencies, errors)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut latencies = Vec::with_capacity(operations);
    let mut errors = Vec::new();
    for task in tasks {
        let (caller_latencies, caller_errors) = task.await?;
        latencies.extend(caller_latencies);
        errors.extend(caller_errors);
    }
    let elapsed = start.elapsed();
    if let Some(first) = errors.first() {
        eprintln!("{} failed calls; the first: {first}", errors.len());
    }
    latencies.sort();
    let succeeded = latencies.len() - errors.len();
    Ok(Measured {
        rate: succeeded as f64 / elapsed.as_secs_f64(),
        latencies,
        errors: errors.len() as u64,
        per_commit: None,
        counted: None,
    })
}

/// A runtime on the SQLite file at `path`.
fn sqlite_builder(path: &std::path::Path, durability: Durability) -> solid_objects::Builder {
    Runtime::builder()
        .sqlite(SqliteFile::new(path).durability(durability))
        .policy(AllowAll)
}

/// Runs `each` (given a runtime of actor `A` on the SQLite file at `path`, `synchronous =
/// NORMAL`, and a call's index) `count` times from 16 callers, untimed: the setup of a
/// row; how many calls succeeded.
async fn set_up<A, F, Fut>(path: &std::path::Path, count: usize, each: F) -> Result<u64, Failed>
where
    A: solid_objects::Actor,
    F: Fn(&Runtime, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let setup = sqlite_builder(path, Durability::Normal)
        .actor::<A>()
        .start()
        .await?;
    let done = measure(CALLERS, count, {
        let setup = setup.clone();
        move |index| each(&setup, index)
    })
    .await?;
    setup.close().await;
    Ok(succeeded(&done))
}

/// Row 6: queued messages drained by 2 workers on SQLite FULL, against `raw_rate` (row 1's
/// raw rate).
async fn drain_row(raw_rate: f64) -> Outcome {
    let messages = usize::try_from(setting("BENCH_DRAIN_MESSAGES", 10_000)?)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("drain.db");
    let queued = set_up::<Counter, _, _>(&path, messages, |setup, index| {
        let counter = setup.reference::<Counter>(format!("c-{}", index % SPREAD));
        async move {
            counter.enqueue().increment().await?;
            Ok(())
        }
    })
    .await?;
    let builder = sqlite_builder(&path, Durability::Full)
        .actor::<Counter>()
        .workers(2);
    let worked = work_off(builder, queued).await?;

    let check = sqlite_builder(&path, Durability::Full).start().await?;
    let mut total = 0;
    for actor in 0..SPREAD {
        let counter = check.reference::<Counter>(format!("c-{actor}"));
        total += counter.snapshot().await?.value;
    }
    check.close().await;
    print_line(
        &format!("drain, 2 workers, {queued} msgs, 100 actors"),
        &worked.measured(queued.saturating_sub(total)),
        Some(raw_rate),
        ">=3x",
        &format!(
            "raw FULL, 1 caller (row 1); messages/s; {:.2} statements per message",
            worked.statements_per_run()
        ),
    );
    Ok(())
}

/// Row 7: due reminders on SQLite FULL: fired by a runtime that knows no actor (so its
/// passes only fire, and its statements are the firing's alone), then rung by 2 workers.
async fn reminder_row() -> Outcome {
    let reminders = usize::try_from(setting("BENCH_REMINDERS", 5_000)?)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("reminders.db");
    let armed = set_up::<Alarm, _, _>(&path, reminders, |setup, index| {
        let alarm = setup.reference::<Alarm>(format!("a-{index}"));
        async move {
            alarm.arm().await?;
            Ok(())
        }
    })
    .await?;

    let firing = sqlite_builder(&path, Durability::Full).start().await?;
    let before = firing.stats();
    let started = Instant::now();
    let fired = u64::try_from(
        firing
            .testing()
            .run_due_reminders()
            .await?
            .occurrences_fired,
    )?;
    let elapsed = started.elapsed();
    let after = firing.stats();
    firing.close().await;
    print_line(
        &format!("reminders fired, {armed} due"),
        &Measured::rate_only(
            fired as f64 / elapsed.as_secs_f64(),
            armed.saturating_sub(fired),
        ),
        None,
        "<=2 st",
        &format!(
            "reminders/s; {:.3} statements per reminder fired",
            after.statements.saturating_sub(before.statements) as f64 / fired.max(1) as f64
        ),
    );

    let builder = sqlite_builder(&path, Durability::Full)
        .actor::<Alarm>()
        .workers(2);
    let worked = work_off(builder, fired).await?;
    print_line(
        &format!("reminders rung, 2 workers, {fired} fired"),
        &worked.measured(fired.saturating_sub(worked.handled)),
        None,
        "",
        &format!(
            "turns/s; {:.2} statements per turn",
            worked.statements_per_run()
        ),
    );
    Ok(())
}

/// The calls of a run that succeeded.
fn succeeded(measured: &Measured) -> u64 {
    measured.latencies.len() as u64 - measured.errors
}

/// What the workers of `work_off` did.
struct Worked {
    /// From `run()` until the last handler ran.
    elapsed: Duration,
    /// Handler runs counted.
    handled: u64,
    /// Statements the runtime ran from `run()` until it shut down.
    statements: u64,
    /// Its write transactions per database commit.
    per_commit: f64,
}

impl Worked {
    fn rate(&self) -> f64 {
        self.handled as f64 / self.elapsed.as_secs_f64()
    }

    /// The statements per handler run.
    fn statements_per_run(&self) -> f64 {
        self.statements as f64 / self.handled.max(1) as f64
    }

    /// Their rate and commits as a row's figures, with `errors`.
    fn measured(&self, errors: u64) -> Measured {
        Measured {
            per_commit: Some(self.per_commit),
            ..Measured::rate_only(self.rate(), errors)
        }
    }
}

/// Starts `builder`'s runtime and runs its workers in a task of their own.
async fn start_running(
    builder: solid_objects::Builder,
) -> Result<
    (
        Runtime,
        tokio::task::JoinHandle<Result<(), solid_objects::Error>>,
    ),
    Failed,
> {
    let runtime = builder.start().await?;
    let running = run_workers(&runtime);
    Ok((runtime, running))
}

/// Runs the workers of `runtime` in a task of their own, until its shutdown.
fn run_workers(runtime: &Runtime) -> tokio::task::JoinHandle<Result<(), solid_objects::Error>> {
    let runtime = runtime.clone();
    tokio::spawn(async move { runtime.run().await })
}

/// Shuts `runtime` down, its turns given 5 s, and waits for the task `running` its workers.
async fn shut_down(
    runtime: &Runtime,
    running: tokio::task::JoinHandle<Result<(), solid_objects::Error>>,
) -> Outcome {
    runtime.shutdown_with_deadline(Duration::from_secs(5)).await;
    running.await??;
    Ok(())
}

/// How long `work_off` waits for a handler to run before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// Starts `builder`'s runtime and runs its workers until the handlers have run `expected`
/// more times (or none has run for 30 s), then shuts it down.
async fn work_off(builder: solid_objects::Builder, expected: u64) -> Result<Worked, Failed> {
    let runtime = builder.start().await?;
    let before = runtime.stats();
    let first = HANDLED.load(Ordering::Relaxed);
    let started = Instant::now();
    let running = run_workers(&runtime);
    let (mut seen, mut progressed) = (first, Instant::now());
    while seen < first + expected && progressed.elapsed() < STALL {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now = HANDLED.load(Ordering::Relaxed);
        if now != seen {
            (seen, progressed) = (now, Instant::now());
        }
    }
    let elapsed = started.elapsed();
    shut_down(&runtime, running).await?;
    let after = runtime.stats();
    runtime.close().await;
    let commits = after.commits.saturating_sub(before.commits).max(1);
    Ok(Worked {
        elapsed,
        handled: seen - first,
        statements: after.statements - before.statements,
        per_commit: after.transactions.saturating_sub(before.transactions) as f64 / commits as f64,
    })
}

/// Row 8: small commands to an actor whose state holds 1 MB.
async fn large_state_rows(postgres: Option<&str>, mysql: Option<&str>) -> Outcome {
    let calls = usize::try_from(setting("BENCH_LARGE_CALLS", 200)?)?;
    let dir = tempfile::tempdir()?;
    let mut rows = vec![(
        "SQLite FULL, 1 MB state, 1 caller",
        sqlite_builder(&dir.path().join("large.db"), Durability::Full),
        ">=400/s",
    )];
    if let Some(url) = postgres {
        let builder = Runtime::builder().postgres(url, 16).policy(AllowAll);
        rows.push(("PostgreSQL, 1 MB state, 1 caller", builder, ">=200/s"));
    }
    if let Some(url) = mysql {
        let builder = Runtime::builder().mysql(url, 16).policy(AllowAll);
        rows.push(("MySQL, 1 MB state, 1 caller", builder, ""));
    }
    for (workload, builder, target) in rows {
        let runtime = builder.start().await?;
        let blob = runtime.reference::<Blob>("bench-blob");
        blob.fill(1_000_000).await?;
        let measured = measure(1, calls, {
            let runtime = runtime.clone();
            move |_| {
                let blob = runtime.reference::<Blob>("bench-blob");
                async move {
                    blob.touch().await?;
                    Ok(())
                }
            }
        })
        .await?;
        runtime.close().await;
        print_line(workload, &measured, None, target, "calls/s");
    }
    Ok(())
}

/// The bytes written per call by rows 1 to 5 and the MySQL rows.
fn print_written(written: &[Written]) {
    let heading = format!(
        "written per call: SQLite, WAL frames (pages) appended, counted over {} calls after \
         the timed run; PostgreSQL, bytes of the server's WAL position; MySQL, bytes of \
         InnoDB's redo log sequence number",
        WINDOWS * WINDOW_CALLS
    );
    let lines = written.iter().map(|line| {
        let note = String::new();
        (&*line.workload, line.framework, line.raw, line.target, note)
    });
    print_against_raw(&heading, lines);
}

/// The round trips per call of the call rows, framework against raw.
fn print_round_trips(trips: &[RoundTrips]) {
    if trips.is_empty() {
        return;
    }
    let heading = format!(
        "round trips per call: SQLite, statements handed to sqlx's worker thread (the \
         runtime's counted statements, a turn's BEGIN or SAVEPOINT travelling with its lock, \
         and a COMMIT per commit; raw: BEGIN, SELECT, upsert, log row, COMMIT); PostgreSQL and \
         MySQL, round trips through a counting proxy over {} calls after the timed run (pool \
         checks included); statements: the runtime's, BEGIN and COMMIT included",
        WINDOWS * WINDOW_CALLS
    );
    let lines = trips.iter().map(|line| {
        let note = format!("  {}", line.note);
        (&*line.workload, line.framework, line.raw, line.target, note)
    });
    print_against_raw(&heading, lines);
}

/// Prints `heading` after a blank line, then a line per workload: the framework's figure,
/// raw's, their ratio, the target, and the line's note.
fn print_against_raw<'a>(
    heading: &str,
    lines: impl IntoIterator<Item = (&'a str, f64, f64, &'a str, String)>,
) {
    println!("\n{heading}");
    println!(
        "{:<40} {:>9} {:>9} {:>7} {:>7}",
        "workload", "framework", "raw", "ratio", "target"
    );
    for (workload, framework, raw, target, note) in lines {
        println!(
            "{:<40} {:>9.2} {:>9.2} {:>6.2}x {:>7}{note}",
            workload,
            framework,
            raw,
            framework / raw,
            target
        );
    }
}

/// A runtime's database, for the wake-up and idle rows.
#[derive(Clone, Copy)]
enum Backend<'a> {
    Sqlite(&'a std::path::Path),
    Postgres { url: &'a str, listen: bool },
    MySql(&'a str),
}

impl<'a> Backend<'a> {
    /// The SQLite file at `sqlite`, PostgreSQL (listening, and without listening too when
    /// `polling_too`) and MySQL, those that are given, in that order.
    fn all(
        sqlite: Option<&'a std::path::Path>,
        postgres: Option<&'a str>,
        mysql: Option<&'a str>,
        polling_too: bool,
    ) -> Vec<Self> {
        let mut backends: Vec<Self> = sqlite.map(Self::Sqlite).into_iter().collect();
        if let Some(url) = postgres {
            backends.push(Self::Postgres { url, listen: true });
            if polling_too {
                backends.push(Self::Postgres { url, listen: false });
            }
        }
        backends.extend(mysql.map(Self::MySql));
        backends
    }

    fn builder(self) -> solid_objects::Builder {
        let builder = match self {
            Self::Sqlite(path) => Runtime::builder().sqlite(path),
            Self::Postgres { url, listen } => Runtime::builder().postgres(url, 8).listen(listen),
            Self::MySql(url) => Runtime::builder().mysql(url, 8),
        };
        builder.policy(AllowAll)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Sqlite(_) => "SQLite (polling)",
            Self::Postgres { listen: true, .. } => "PostgreSQL, LISTEN/NOTIFY",
            Self::Postgres { listen: false, .. } => "PostgreSQL, polling only (listen(false))",
            Self::MySql(_) => "MySQL, wake-up bell",
        }
    }
}

/// A setting from the environment, or its default.
fn setting(name: &str, default: u64) -> Result<u64, Failed> {
    match std::env::var(name) {
        Ok(value) => Ok(value.parse()?),
        Err(_) => Ok(default),
    }
}

/// The wake-up latency rows: SQLite, with a URL PostgreSQL with and without `LISTEN`, and
/// with `BENCH_MYSQL_URL` MySQL's bell.
async fn wake_up_rows(postgres: Option<&str>, mysql: Option<&str>) -> Outcome {
    let samples = usize::try_from(setting("BENCH_WAKE_SAMPLES", 20)?)?.max(1);
    println!(
        "\nwake-up latency, {samples} messages: runtime B (own pool, no workers) enqueues; \
         runtime A (4 idle workers, idle_poll 1 s) learns of it only through the database; \
         from B's commit to A's handler starting (one OS process, two runtimes)"
    );
    println!(
        "{:<44} {:>12} {:>12} {:>12}",
        "backend", "p50", "p95", "p99"
    );
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("wake.db");
    let backends = Backend::all(Some(&path), postgres, mysql, true);
    for backend in backends {
        let mut latencies = wake_up(backend, samples).await?;
        latencies.sort();
        let target = match backend {
            Backend::MySql(_) => "  target p50 <= 20 ms, p99 <= 100 ms",
            _ => "",
        };
        println!(
            "{:<44} {:>12} {:>12} {:>12}{target}",
            backend.name(),
            format!("{:.1} ms", millis(percentile(&latencies, 50))),
            format!("{:.1} ms", millis(percentile(&latencies, 95))),
            format!("{:.1} ms", millis(percentile(&latencies, 99))),
        );
    }
    Ok(())
}

/// The chains the chain row sends at once.
const CHAINS: u64 = 60;

/// A chain's first hop: it sends to the hub.
#[actor]
#[derive(Default)]
pub struct Entry {}

#[actor]
impl Entry {
    /// Passes the chain to the hub.
    #[command]
    pub fn start(&mut self, turn: &mut Turn<Self>) {
        let chain = turn.actor_id().to_owned();
        turn.send::<Hub>("hub").pass(chain);
    }
}

/// The hop every chain goes through, run by whichever runtime's worker takes it.
#[actor]
#[derive(Default)]
pub struct Hub {
    passed: u64,
}

#[actor]
impl Hub {
    /// Passes the chain on to its last hop.
    #[command]
    pub fn pass(&mut self, turn: &mut Turn<Self>, chain: String) {
        self.passed += 1;
        turn.send::<Finish>(chain).finish();
    }
}

/// A chain's last hop.
#[actor]
#[derive(Default)]
pub struct Finish {}

#[actor]
impl Finish {
    /// Counts a finished chain.
    #[command]
    pub fn finish(&mut self) {
        FINISHED_CHAINS.fetch_add(1, Ordering::AcqRel);
    }
}

/// How many chains have finished, in any runtime of this process.
static FINISHED_CHAINS: AtomicU64 = AtomicU64::new(0);

/// The chain row: 60 three-hop chains through one hub actor, sent at once, on one runtime,
/// then on two runtimes (pools of their own, nothing shared in memory, so each learns of
/// the other's commits through the database only) that send half each.
async fn chain_rows(postgres: Option<&str>, mysql: Option<&str>) -> Outcome {
    let servers = Backend::all(None, postgres, mysql, false);
    if servers.is_empty() {
        return Ok(());
    }
    println!(
        "\nchains: {CHAINS} three-hop chains (Entry -> Hub -> Finish, one hub) sent at once; \
         one runtime, then two that share nothing in memory and send half each"
    );
    println!(
        "{:<44} {:>12} {:>12} {:>8}",
        "backend", "one", "two", "ratio"
    );
    for backend in servers {
        let one = chains(backend, 1).await?;
        let two = chains(backend, 2).await?;
        println!(
            "{:<44} {:>12} {:>12} {:>7.2}x  target <= 1.5x",
            backend.name(),
            format!("{:.0} ms", millis(one)),
            format!("{:.0} ms", millis(two)),
            two.as_secs_f64() / one.as_secs_f64()
        );
    }
    Ok(())
}

/// Runs the chains on `runtimes` runtimes of `backend`, each with 2 workers; how long they
/// took.
async fn chains(backend: Backend<'_>, runtimes: u64) -> Result<Duration, Failed> {
    let mut started = Vec::new();
    for _ in 0..runtimes {
        let (runtime, running) = start_running(
            backend
                .builder()
                .workers(2)
                .actor::<Entry>()
                .actor::<Hub>()
                .actor::<Finish>(),
        )
        .await?;
        started.push((runtime, running));
    }
    let run = RUN.fetch_add(1, Ordering::AcqRel);
    let before = FINISHED_CHAINS.load(Ordering::Acquire);
    let began = Instant::now();
    let sends = started.iter().enumerate().map(|(index, (runtime, _))| {
        let runtime = runtime.clone();
        async move {
            let index = index as u64;
            for chain in (index..CHAINS).step_by(usize::try_from(runtimes)?) {
                runtime
                    .reference::<Entry>(format!("chain-{run}-{chain}"))
                    .enqueue()
                    .start()
                    .await?;
            }
            Ok::<(), Failed>(())
        }
    });
    for sent in futures_util::future::join_all(sends).await {
        sent?;
    }
    while FINISHED_CHAINS.load(Ordering::Acquire) - before < CHAINS {
        if began.elapsed() > Duration::from_secs(120) {
            return Err("the chains did not finish within 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = began.elapsed();
    for (runtime, running) in started {
        shut_down(&runtime, running).await?;
        runtime.close().await;
    }
    Ok(took)
}

/// A number of its own for each chain run, so that no run's actors are another's.
static RUN: AtomicU64 = AtomicU64::new(0);

/// Sends `samples` messages (after one to warm up) from B to A at random moments; returns
/// each one's time from B's commit to A's handler starting.
async fn wake_up(backend: Backend<'_>, samples: usize) -> Result<Vec<Duration>, Failed> {
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    *STARTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
    let (workers, running) = start_running(backend.builder().actor::<Stamp>().workers(4)).await?;
    let sender = backend.builder().start().await?;
    let stamp = sender.reference::<Stamp>("wake-up");
    let mut gaps = Gaps(0x9e37_79b9_7f4a_7c15);
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..=samples {
        // A random moment in A's idle cycle: its poll backs off from 100 ms to 1 s.
        tokio::time::sleep(gaps.next()).await;
        stamp.enqueue().stamp().await?;
        let committed = Instant::now();
        let handled = starts.recv().await.ok_or("the handler's channel closed")?;
        if sample > 0 {
            latencies.push(handled.saturating_duration_since(committed));
        }
    }
    shut_down(&workers, running).await?;
    workers.close().await;
    sender.close().await;
    Ok(latencies)
}

/// Pseudo-random pauses between 0 and 1.5 s (xorshift), the same in every run.
struct Gaps(u64);

impl Gaps {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(self.0 % 1500)
    }
}

/// The `percent`th percentile of sorted `values` (nearest rank).
fn percentile(values: &[Duration], percent: usize) -> Duration {
    let rank = (values.len() * percent).div_ceil(100).max(1);
    values[rank - 1]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The idle cost rows: a runtime with 4 workers and no work, on SQLite and (with their URLs)
/// on PostgreSQL and MySQL.
async fn idle_rows(postgres: Option<&str>, mysql: Option<&str>) -> Outcome {
    let seconds = setting("BENCH_IDLE_SECONDS", 20)?.max(1);
    println!(
        "\nidle cost: this process's CPU time while a runtime's 4 workers run with no work, \
         over {seconds} s (after 2 s to settle, and on MySQL after its wake-up listener's 10 s \
         of warmth), % of one core; on MySQL also the statements per second the server \
         counted (its Questions status, less the bench's own two reads of it)"
    );
    println!("{:<44} {:>12} {:>12}", "backend", "CPU", "queries/s");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("idle.db");
    let backends = Backend::all(Some(&path), postgres, mysql, false);
    for backend in backends {
        let (runtime, running) =
            start_running(backend.builder().actor::<Counter>().workers(4)).await?;
        let settle = match backend {
            Backend::MySql(_) => 12,
            _ => 2,
        };
        tokio::time::sleep(Duration::from_secs(settle)).await;
        let questions_before = questions(backend).await?;
        let (cpu_before, before) = (cpu_time()?, Instant::now());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let used = cpu_time()?.saturating_sub(cpu_before);
        let elapsed = before.elapsed().as_secs_f64();
        let share = used.as_secs_f64() / elapsed * 100.0;
        let queries = match (questions_before, questions(backend).await?) {
            (Some(before), Some(after)) => {
                format!("{:.1}", after.saturating_sub(before + 2) as f64 / elapsed)
            }
            _ => "-".to_owned(),
        };
        shut_down(&runtime, running).await?;
        runtime.close().await;
        let (name, target) = match backend {
            Backend::Sqlite(_) => ("SQLite", ""),
            Backend::Postgres { .. } => ("PostgreSQL (listening)", ""),
            Backend::MySql(_) => ("MySQL (listening to the bell)", "  target <= 1%, <= 20/s"),
        };
        println!("{name:<44} {:>11.3}% {queries:>12}{target}", share);
    }
    Ok(())
}

/// The statements a MySQL server has counted since it started (`Questions`), or `None` on
/// another backend.
async fn questions(backend: Backend<'_>) -> Result<Option<u64>, Failed> {
    let Backend::MySql(url) = backend else {
        return Ok(None);
    };
    let mut connection = MySqlConnection::connect(url).await?;
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(&mut connection)
        .await?;
    connection.close().await?;
    Ok(Some(value.parse()?))
}

/// The CPU time (user and system) this process has used, from /proc/self/stat (Linux), in
/// clock ticks of 10 ms.
fn cpu_time() -> Result<Duration, Failed> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name, which is in parentheses: the state is field 3,
    // utime field 14 and stime field 15.
    let after_name = stat
        .rsplit_once(')')
        .ok_or("an unexpected /proc/self/stat")?
        .1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .ok_or("an unexpected /proc/self/stat")?
        .iter()
        .map(|field| field.parse::<u64>())
        .sum::<Result<u64, _>>()?;
    // Linux reports these in USER_HZ, 100 per second.
    Ok(Duration::from_millis(ticks * 10))
}

/// The process's peak resident memory, from /proc (Linux), or "unknown".
fn peak_memory() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .map(|line| line.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The finished messages the charts row loads unless `BENCH_CHART_MESSAGES` says otherwise.
const CHART_MESSAGES: u64 = 1_000_000;

/// The charts row: on each backend, `BENCH_CHART_MESSAGES` (default 1,000,000) finished
/// messages spread over the 23.5 hours before noon are loaded in one statement each, with
/// their failed attempts and done effects; the workers' fold tallies them (timed); then every
/// window of the overview and of an actor's page is fetched from the dashboard's router, as
/// a browser would, at 12:00:10 by a manual clock (so the last two minutes are read from
/// their rows, as the workers' fold leaves them).
async fn chart_rows(postgres: Option<&str>, mysql: Option<&str>) -> Outcome {
    let messages = i64::try_from(setting("BENCH_CHART_MESSAGES", CHART_MESSAGES)?)?.max(1000);
    println!(
        "\ncharts: {messages} finished messages over the 23.5 h before noon (a fired reminder \
         in 100, a dead letter and a failed attempt in 1,000, an effect in 10, over 1,000 \
         actors), tallied by the workers' fold; each window's page fetched from the dashboard's \
         router, median of 5 after one unmeasured; target: every page under 200 ms in the \
         test profile (`cargo run --example bench`, not --release)"
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>14} {:>14} {:>14}",
        "backend", "load", "fold", "window", "overview", "its figures", "actor's page"
    );
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("charts.db");
    let mut backends = vec![Backend::Sqlite(&path)];
    if let Some(url) = postgres {
        backends.push(Backend::Postgres { url, listen: true });
    }
    if let Some(url) = mysql {
        backends.push(Backend::MySql(url));
    }
    for backend in backends {
        chart_row(backend, messages).await?;
    }
    Ok(())
}

/// Noon on a Monday, `minutes` and `seconds` after it: the charts row's now.
fn chart_noon(minutes: i64, seconds: i64) -> DateTime<Utc> {
    let noon = DateTime::from_timestamp(1_772_452_800, 0).unwrap_or_default();
    noon + TimeDelta::minutes(minutes) + TimeDelta::seconds(seconds)
}

/// One backend's charts row.
async fn chart_row(backend: Backend<'_>, messages: i64) -> Outcome {
    let clock = ManualClock::new(chart_noon(0, 10));
    // The runtime migrates the database first; the rows go into its tables.
    let runtime = backend
        .builder()
        .actor::<Counter>()
        .clock(clock.clone())
        .start()
        .await?;
    let history = (
        chart_noon(30 - 24 * 60, 0).timestamp_micros(),
        chart_noon(0, 0).timestamp_micros(),
    );
    let started = Instant::now();
    run_statements(backend, &chart_history(backend, messages, history)).await?;
    let loaded = started.elapsed();
    // The actor whose page is fetched exists: a turn at 12:00:10.
    runtime
        .reference::<Counter>("chart-b-0")
        .increment()
        .await?;
    let started = Instant::now();
    runtime.testing().upkeep().await?;
    let folded = started.elapsed();
    let day = runtime
        .admin()
        .activity(solid_objects::admin::Window::Day)
        .await?;
    let completed: i64 = day
        .points
        .iter()
        .map(|point| point.finished.completed)
        .sum();
    if completed != messages - messages / 1000 + 1 {
        return Err(format!("the day's chart counts {completed} completed messages").into());
    }
    for window in solid_objects::admin::Window::ALL {
        let overview = page_time(&runtime, "/", window).await?;
        let figures = median_time(|| async {
            runtime.admin().activity(window).await?;
            Ok(())
        })
        .await?;
        let actor = page_time(&runtime, "/actors/Counter/chart-b-0", window).await?;
        println!(
            "{:<12} {:>8} {:>8} {:>8} {:>14} {:>14} {:>14}",
            match backend {
                Backend::Sqlite(_) => "SQLite",
                Backend::Postgres { .. } => "PostgreSQL",
                Backend::MySql(_) => "MySQL",
            },
            format!("{:.0} s", loaded.as_secs_f64()),
            format!("{:.1} s", folded.as_secs_f64()),
            window.as_str(),
            format!("{:.1} ms", millis(overview)),
            format!("{:.1} ms", millis(figures)),
            format!("{:.1} ms", millis(actor)),
        );
    }
    runtime.close().await;
    Ok(())
}

/// The median time of 5 runs of `run`, after one unmeasured.
async fn median_time<F, Fut>(run: F) -> Result<Duration, Failed>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), Failed>>,
{
    run().await?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        run().await?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[2])
}

/// The median time to fetch a page of the dashboard over `window` from its router.
async fn page_time(
    runtime: &Runtime,
    page: &str,
    window: solid_objects::admin::Window,
) -> Result<Duration, Failed> {
    use tower::ServiceExt;
    median_time(|| async {
        let router = solid_objects::dashboard::router(runtime.clone());
        let request = axum::http::Request::get(format!("{page}?window={window}"))
            .body(axum::body::Body::empty())?;
        let response = router.oneshot(request).await?;
        if response.status() != axum::http::StatusCode::OK {
            return Err(format!("{page}: {}", response.status()).into());
        }
        let body = axum::body::to_bytes(response.into_body(), 1 << 24).await?;
        let body = String::from_utf8_lossy(&body);
        if !body.contains("<svg") {
            return Err(format!("{page} {window}: no chart in {body}").into());
        }
        Ok(())
    })
    .await
}

/// The statements that load the charts row's history into a migrated database: the rows a
/// bench run before left are deleted, with every tally; then `rows` finished messages of
/// `Counter` actors `chart-b-0` to `chart-b-999` spread evenly over `(from, until]` (one in a
/// hundred a fired reminder, one in a thousand a dead letter), a failed attempt for every thousandth, and an effect done for every tenth, each
/// table in one statement from a generated series (SQLite's recursive CTE, PostgreSQL's
/// `generate_series`, MariaDB's `seq_1_to_N`).
fn chart_history(backend: Backend<'_>, rows: i64, (from, until): (i64, i64)) -> Vec<String> {
    let series = match backend {
        Backend::Sqlite(_) => format!(
            "WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers \
             WHERE n < {rows}) SELECT n FROM numbers"
        ),
        Backend::Postgres { .. } => {
            format!("SELECT n FROM generate_series(CAST(1 AS BIGINT), {rows}) AS n")
        }
        Backend::MySql(_) => format!("SELECT seq AS n FROM seq_1_to_{rows}"),
    };
    let concat = |a: &str, b: &str| match backend {
        Backend::Sqlite(_) | Backend::Postgres { .. } => format!("'{a}' || {b}"),
        Backend::MySql(_) => format!("CONCAT('{a}', {b})"),
    };
    let step = (until - from) / rows;
    let at = format!("{from} + n * {step}");
    let mut statements: Vec<String> = [
        "DELETE FROM solid_messages WHERE actor_type = 'Counter' AND actor_id LIKE 'chart-b-%'",
        "DELETE FROM solid_failed_attempts
         WHERE actor_type = 'Counter' AND actor_id LIKE 'chart-b-%'",
        "DELETE FROM solid_effects WHERE actor_type = 'Counter' AND actor_id LIKE 'chart-b-%'",
        "DELETE FROM solid_activity",
        "DELETE FROM solid_actor_activity",
        "UPDATE solid_activity_folded SET folded_until = 0",
    ]
    .map(str::to_owned)
    .to_vec();
    statements.push(format!(
        "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments, request_id,
             status, attempts, available_at, result, created_at, finished_at, scheduled_for)
         SELECT 'Counter', {actor}, 'work', '[]', {request},
                CASE WHEN n % 1000 = 0 THEN 'dead' ELSE 'completed' END,
                CASE WHEN n % 1000 = 0 THEN 1 ELSE 0 END,
                {at}, 'null', {at} - 2000000, {at},
                CASE WHEN n % 100 = 1 THEN {at} - 5000000 END
         FROM ({series}) AS numbers",
        actor = concat("chart-b-", "n % 1000"),
        request = concat("chart-", "n"),
    ));
    statements.push(format!(
        "INSERT INTO solid_failed_attempts (message_id, actor_type, actor_id, failed_at)
         SELECT n, 'Counter', {actor}, {at} - 1000000
         FROM ({series}) AS numbers WHERE n % 1000 = 0",
        actor = concat("chart-b-", "n % 1000"),
    ));
    statements.push(format!(
        "INSERT INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
             attempts, available_at, created_at, finished_at)
         SELECT {effect}, 'Counter', {actor}, 'post', '{{}}', 'done', 1,
                {at}, {at} - 1000000, {at}
         FROM ({series}) AS numbers WHERE n % 10 = 0",
        effect = concat("chart-effect-", "n"),
        actor = concat("chart-b-", "n % 1000"),
    ));
    // The statistics a server's own upkeep gathers after such a load (autovacuum's analyze,
    // InnoDB's own). SQLite keeps none unless asked, and the runtime does not ask.
    match backend {
        Backend::Sqlite(_) => {}
        Backend::Postgres { .. } => statements.push("ANALYZE".to_owned()),
        Backend::MySql(_) => statements
            .push("ANALYZE TABLE solid_messages, solid_failed_attempts, solid_effects".to_owned()),
    }
    statements
}

/// Runs `statements` one by one on a connection of their own to `backend`'s database.
async fn run_statements(backend: Backend<'_>, statements: &[String]) -> Outcome {
    match backend {
        Backend::Sqlite(path) => {
            let mut connection =
                SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path)).await?;
            for statement in statements {
                sqlx::raw_sql(statement).execute(&mut connection).await?;
            }
            connection.close().await?;
        }
        Backend::Postgres { url, .. } => {
            let mut connection = PgConnection::connect(url).await?;
            for statement in statements {
                sqlx::raw_sql(statement).execute(&mut connection).await?;
            }
            connection.close().await?;
        }
        Backend::MySql(url) => {
            let mut connection = MySqlConnection::connect(url).await?;
            for statement in statements {
                sqlx::raw_sql(statement).execute(&mut connection).await?;
            }
            connection.close().await?;
        }
    }
    Ok(())
}
