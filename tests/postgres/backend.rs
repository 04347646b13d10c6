//! How the cases written once for both server backends (tests/servers/) reach PostgreSQL:
//! a throwaway server of its own per test, `pg_stat_activity` to see a session waiting for
//! a lock, and PostgreSQL's spelling of the few statements that differ.

use solid_objects::prelude::*;
use sqlx::{PgConnection, PgPool};

use crate::support::postgres::PgServer;
pub(crate) use crate::support::runtimes::{
    builder, row_is_free_while_this_thread_blocks, runtime as runtime_on, scalar_on as scalar,
};

/// A connection of the test's own, outside the runtime.
pub(crate) type Observer = PgPool;

/// A fresh database on its own throwaway server (keep the server alive while the test
/// runs); `None`, and the test skips, on a machine without PostgreSQL outside CI.
pub(crate) async fn database() -> Option<(PgServer, String)> {
    let server = PgServer::start()?;
    let url = server.database().await;
    Some((server, url))
}

/// Sessions of this database waiting for a lock.
pub(crate) const SESSIONS_WAITING_FOR_A_LOCK: &str = "SELECT COUNT(*) FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock'";

/// A pool of the test's own on the database `url`, outside the runtime.
pub(crate) async fn observer(url: &str) -> Observer {
    PgPool::connect(url).await.unwrap()
}

/// Run in the handler before its first write, so that its session is the one
/// PostgreSQL picks to break the deadlock.
pub(crate) const DEADLOCK_VICTIM: Option<&str> = Some("SET LOCAL deadlock_timeout = '50ms'");

/// The other application's first write, whose session PostgreSQL does not pick.
pub(crate) const OTHER_APPLICATION_FIRST: &str = "SET LOCAL deadlock_timeout = '60s';
     UPDATE accounts SET balance = balance + 100 WHERE id = 1;";

/// A statement that fails and aborts the transaction (PostgreSQL commits none after an
/// error).
pub(crate) const BREAKS_THE_TRANSACTION: &str = "SELECT 1/0";

/// A trigger that fails the first 20 completions of actor `hot`'s messages with a
/// serialization failure (a sequence counts them: it is not rolled back with the turn).
pub(crate) const CONFLICTS_FOR_HOT: &[&str] = &[
    "CREATE SEQUENCE hot_conflicts",
    "CREATE FUNCTION conflict_for_hot() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         IF NEW.actor_id = 'hot' AND NEW.status = 'completed'
            AND nextval('hot_conflicts') <= 20 THEN
             RAISE EXCEPTION 'forced conflict' USING ERRCODE = '40001';
         END IF;
         RETURN NEW;
     END $$",
    "CREATE TRIGGER conflict_for_hot BEFORE UPDATE ON solid_messages
     FOR EACH ROW EXECUTE FUNCTION conflict_for_hot()",
];

/// A trigger that fails every completion of actor `doomed`'s messages with a serialization
/// failure: an application's trigger that is wrong for good, not a passing conflict.
pub(crate) const CONFLICTS_FOR_DOOMED_FOR_EVER: &[&str] = &[
    "CREATE FUNCTION conflict_for_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         IF NEW.actor_id = 'doomed' AND NEW.status = 'completed' THEN
             RAISE EXCEPTION 'a trigger that always conflicts' USING ERRCODE = '40001';
         END IF;
         RETURN NEW;
     END $$",
    "CREATE TRIGGER conflict_for_doomed BEFORE UPDATE ON solid_messages
     FOR EACH ROW EXECUTE FUNCTION conflict_for_doomed()",
];

/// The ids of the running effects, oldest first.
pub(crate) const RUNNING_EFFECT_IDS: &str =
    "SELECT effect_id FROM solid_effects WHERE status = 'running' ORDER BY id";

/// What keeps a test's databases alive: its throwaway server.
pub(crate) type Server = PgServer;

/// Fills `solid_messages` with `$1` completed messages of 1000 actors, every other one a
/// fired reminder's.
pub(crate) const FILL_MESSAGES: &str = "INSERT INTO solid_messages (actor_type, actor_id,
         operation, arguments, request_id, status, available_at, created_at, finished_at,
         result, scheduled_for)
     SELECT 'Filler', 'f-' || (g % 1000), 'post', '[]', 'filler-' || g, 'completed', 0, g, g,
            'null', CASE WHEN g % 2 = 0 THEN g END
     FROM generate_series(1, $1) AS g";

/// What a process that died just after migration 11's last index was built, before it was
/// recorded, leaves in a migrated database: the index there, the migration not recorded, and
/// its five actions before (the table, the replaced index built, the old one dropped, the new
/// one renamed, the reminders' index) recorded. The later migrations stay recorded.
pub(crate) const CRASH_BEFORE_THE_LAST_STEPS_RECORD: &[&str] = &[
    "DELETE FROM solid_schema_migrations WHERE version = 11",
    "INSERT INTO solid_migration_steps (version, step)
     VALUES (11, 0), (11, 1), (11, 2), (11, 3), (11, 4)",
];

/// Another fresh database on the test's server.
pub(crate) async fn another_database(server: &PgServer) -> String {
    server.database().await
}

/// The turn's connection.
pub(crate) async fn connection<A: solid_objects::Actor>(
    turn: &mut Turn<A>,
) -> Result<&mut PgConnection, Error> {
    turn.postgres().await
}
