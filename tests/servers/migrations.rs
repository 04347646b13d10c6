//! Schema migrations while turns run: an index migration on a table that grows never blocks
//! the table's writes (PostgreSQL builds the index `CONCURRENTLY`, MySQL in place with
//! `LOCK = NONE`), and a migration cut short by a crash resumes at the next start and leaves
//! the schema a fresh database gets. Written once for both server backends, through the
//! binary's `backend` module, on the first release's fixture (tests/fixtures/0.1.0), whose
//! schema predates migration 11 and its indexes on `solid_messages`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use solid_objects::prelude::*;
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

use crate::support::{migrating, numbered_placeholders, release_dumps, test_name};

/// The finished messages the mailbox holds while it migrates: enough that building migration
/// 11's indexes on them takes seconds (on PostgreSQL, applied in one transaction as the build
/// before this one did, a turn waited 1.1 s behind half as many).
const FILLER_MESSAGES: i64 = 1_000_000;

/// How often the earlier build's process starts a turn.
const TURN_EVERY: Duration = Duration::from_millis(20);

/// The actors those turns go round, one turn each at a time.
const ACTORS: usize = 50;

/// What the issue allows a turn to wait while a migration runs.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// Creates one of the earlier build's actors, `$1`.
const CREATE_ACTOR: &str =
    "INSERT INTO solid_instances (actor_type, actor_id, updated_at) VALUES ('Metronome', ?, 0)";

/// A turn's lock on its actor `$1`.
const LOCK_ACTOR: &str = "SELECT revision FROM solid_instances
     WHERE actor_type = 'Metronome' AND actor_id = ? FOR UPDATE";

/// A turn's message to actor `$1`, with request id `$2`, enqueued at `$3`.
const ENQUEUE: &str = "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments,
         request_id, status, available_at, created_at)
     VALUES ('Metronome', ?, 'tick', '[]', ?, 'ready', 0, ?)";

/// The turn's message, finished at `$1`, of request id `$2`.
const COMPLETE: &str = "UPDATE solid_messages SET status = 'completed', result = 'null',
         finished_at = ?
     WHERE request_id = ?";

/// The turn's state: the revision of actor `$2`, at `$1`.
const NEXT_REVISION: &str = "UPDATE solid_instances SET revision = revision + 1, updated_at = ?
     WHERE actor_type = 'Metronome' AND actor_id = ?";

/// The database of `url` loaded with the first release's fixture, on the binary's server.
fn load_first_release(url: &str) {
    let release = release_dumps::first_release();
    if url.starts_with("postgres://") {
        release_dumps::load_postgres(&release, url);
    } else {
        release_dumps::load_mariadb(&release, url);
    }
}

/// The schema a database this build created gets, on the server of `server`.
async fn fresh_schema(server: &crate::backend::Server) -> Vec<String> {
    migrating::fresh_schema(&crate::backend::another_database(server).await).await
}

/// The earlier build's process: a turn every [`TURN_EVERY`] on an application's pool, each
/// in a transaction that locks its actor's row, enqueues a message, completes it and bumps
/// the actor's revision, as a turn of the build before this one writes those tables.
struct EarlierBuildsTurns {
    running: Arc<AtomicBool>,
    ticking: tokio::task::JoinHandle<Vec<tokio::task::JoinHandle<TimedTurn>>>,
}

/// One turn of the earlier build's process: when it began, and how long until it committed.
#[derive(Debug, Clone, Copy)]
struct TimedTurn {
    began: Instant,
    waited: Duration,
}

impl EarlierBuildsTurns {
    /// Creates the actors, then starts the turns.
    async fn start(pool: &AnyPool, postgres: bool) -> Self {
        let spelled = |sql: &str| match postgres {
            true => numbered_placeholders(sql),
            false => sql.to_owned(),
        };
        for actor in 0..ACTORS {
            sqlx::query(&spelled(CREATE_ACTOR))
                .bind(format!("m-{actor}"))
                .execute(pool)
                .await
                .unwrap();
        }
        let statements = Arc::new([LOCK_ACTOR, ENQUEUE, COMPLETE, NEXT_REVISION].map(spelled));
        let running = Arc::new(AtomicBool::new(true));
        let ticking = tokio::spawn({
            let (pool, running) = (pool.clone(), Arc::clone(&running));
            async move {
                let mut every = tokio::time::interval(TURN_EVERY);
                let mut turns = Vec::new();
                for number in 0_i64.. {
                    every.tick().await;
                    if !running.load(Ordering::SeqCst) {
                        break;
                    }
                    let (pool, statements) = (pool.clone(), Arc::clone(&statements));
                    turns.push(tokio::spawn(async move {
                        let began = Instant::now();
                        run_turn(&pool, &statements, number).await;
                        TimedTurn {
                            began,
                            waited: began.elapsed(),
                        }
                    }));
                }
                turns
            }
        });
        Self { running, ticking }
    }

    /// Stops starting turns, and returns every turn once it has committed.
    async fn stop(self) -> Vec<TimedTurn> {
        self.running.store(false, Ordering::SeqCst);
        let mut turns = Vec::new();
        for turn in self.ticking.await.unwrap() {
            turns.push(turn.await.expect("a turn of the earlier build commits"));
        }
        turns
    }
}

/// Turn `number`: on actor `m-<number % ACTORS>`, in one transaction.
async fn run_turn(pool: &AnyPool, statements: &[String; 4], number: i64) {
    let [lock, enqueue, complete, next_revision] = statements;
    let actor = format!("m-{}", number % ACTORS as i64);
    let request = format!("tick-{number}");
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(lock)
        .bind(&actor)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query(enqueue)
        .bind(&actor)
        .bind(&request)
        .bind(number)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(complete)
        .bind(number)
        .bind(&request)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(next_revision)
        .bind(number)
        .bind(&actor)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// A database of the first release with a million finished messages is migrated by
/// this build while a process of the earlier build runs a turn every 20 ms on it: no turn
/// waits a second, and the schema is a fresh database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn turns_go_on_while_migration_11_builds_its_indexes_on_a_large_mailbox() {
    let Some((server, url)) = crate::backend::database().await else {
        return;
    };
    load_first_release(&url);
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(32)
        .connect(&url)
        .await
        .unwrap();
    sqlx::query(crate::backend::FILL_MESSAGES)
        .bind(FILLER_MESSAGES)
        .execute(&pool)
        .await
        .unwrap();
    let turns = EarlierBuildsTurns::start(&pool, url.starts_with("postgres://")).await;

    let started = Instant::now();
    let runtime = crate::support::runtimes::builder(&url, 4)
        .policy(AllowAll)
        .start()
        .await
        .expect("this build migrates the earlier build's database");
    let migrated_in = started.elapsed();
    runtime.close().await;
    let turns = turns.stop().await;
    pool.close().await;

    let during: Vec<TimedTurn> = turns
        .iter()
        .copied()
        .filter(|turn| turn.began >= started && turn.began - started <= migrated_in)
        .collect();
    let longest = turns
        .iter()
        .map(|turn| turn.waited)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{FILLER_MESSAGES} messages migrated in {migrated_in:?}; {} turns, {} of them while it \
         ran; the longest waited {longest:?}",
        turns.len(),
        during.len()
    );
    assert!(
        during.len() >= 10,
        "the turns ran while the migration did: {} of {}",
        during.len(),
        turns.len()
    );
    assert!(
        longest < LONGEST_WAIT,
        "a turn waited {longest:?} while the migration ran ({migrated_in:?})"
    );
    assert_eq!(
        migrating::schema(&url).await,
        fresh_schema(&server).await,
        "the schema is a fresh database's"
    );
}

/// A process killed while it builds one of migration 11's indexes leaves the migration part
/// of the way (on PostgreSQL an invalid index under the new one's name); the next start
/// finishes it, and the schema is a fresh database's, every message still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_killed_mid_index_build_is_finished_by_the_next_start() {
    let Some((server, url)) = crate::backend::database().await else {
        return;
    };
    load_first_release(&url);
    let messages =
        crate::support::runtimes::scalar(&url, "SELECT COUNT(*) FROM solid_messages").await;
    migrating::kill_mid_index_build(&url, &test_name(module_path!(), "migrating_process")).await;
    let left: Vec<String> = migrating::indexes(&url)
        .await
        .into_iter()
        .filter(|index| index.ends_with("(INVALID)"))
        .collect();
    if url.starts_with("postgres://") {
        assert_eq!(left.len(), 1, "the killed build left its index: {left:?}");
        assert!(left[0].starts_with("solid_messages_finished_building: "));
    }

    let runtime = crate::support::runtimes::builder(&url, 4)
        .policy(AllowAll)
        .start()
        .await
        .expect("the next start finishes the migration");
    runtime.close().await;
    assert_eq!(
        migrating::schema(&url).await,
        fresh_schema(&server).await,
        "the schema is a fresh database's"
    );
    assert_eq!(
        crate::support::runtimes::scalar(&url, "SELECT COUNT(*) FROM solid_messages").await,
        messages
    );
}

/// A process that dies after a migration's last step changed the schema and before that step
/// was recorded (MySQL commits DDL by itself, and PostgreSQL an index built concurrently)
/// leaves the change in place and the migration unrecorded; the next start finds the step
/// done, records the migration, and the schema is a fresh database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_applied_but_not_recorded_before_a_crash_is_found_done_at_the_next_start() {
    let Some((_server, url)) = crate::backend::database().await else {
        return;
    };
    let fresh = migrating::fresh_schema(&url).await;
    let pool = crate::support::runtimes::pool(&url).await;
    let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM solid_schema_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    for statement in crate::backend::CRASH_BEFORE_THE_LAST_STEPS_RECORD {
        sqlx::raw_sql(statement).execute(&pool).await.unwrap();
    }

    let runtime = crate::support::runtimes::builder(&url, 4)
        .policy(AllowAll)
        .start()
        .await
        .expect("the next start finishes the migration");
    runtime.close().await;
    assert_eq!(
        migrating::schema(&url).await,
        fresh,
        "the schema is a fresh database's"
    );
    let migrations: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM solid_schema_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(migrations, recorded, "every migration is recorded");
    let steps: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM solid_migration_steps")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(steps, 0, "a recorded migration's steps are forgotten");
    pool.close().await;
}

/// The child of [`a_migration_killed_mid_index_build_is_finished_by_the_next_start`]: a
/// runtime that migrates the database its parent names (nothing in a normal run).
#[tokio::test]
async fn migrating_process() {
    migrating::migrate_if_asked().await;
}
