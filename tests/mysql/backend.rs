//! How the cases written once for both server backends (tests/servers/) reach MySQL: a
//! database of its own per test on the process's throwaway MariaDB, and MySQL's spelling of
//! the few statements that differ.

use solid_objects::prelude::*;
use sqlx::{MySqlConnection, MySqlPool};

use crate::support::mariadb::MariaDb;
pub(crate) use crate::support::runtimes::{
    builder, row_is_free_while_this_thread_blocks, runtime as runtime_on, scalar_on as scalar,
};

/// A connection of the test's own, outside the runtime.
pub(crate) type Observer = MySqlPool;

/// A fresh database on the process's throwaway server; `None`, and the test skips, on a
/// machine without MariaDB outside CI.
pub(crate) async fn database() -> Option<((), String)> {
    let url = MariaDb::shared()?.database().await;
    Some(((), url))
}

/// Sessions of this database waiting for a lock. InnoDB does not always list such a
/// wait as 'LOCK WAIT' (MariaDB 10.11 left an UPDATE waiting for a READ COMMITTED turn's
/// row 'RUNNING'): a statement of this database still running after a second waits.
pub(crate) const SESSIONS_WAITING_FOR_A_LOCK: &str =
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST
     WHERE DB = DATABASE() AND ID <> CONNECTION_ID()
       AND COMMAND IN ('Query', 'Execute') AND TIME >= 1";

/// A pool of the test's own on the database `url`, outside the runtime.
pub(crate) async fn observer(url: &str) -> Observer {
    MySqlPool::connect(url).await.unwrap()
}

/// Nothing: InnoDB rolls back the smaller transaction, and the other application writes
/// more rows first.
pub(crate) const DEADLOCK_VICTIM: Option<&str> = None;

/// The other application's first writes: enough rows that InnoDB, breaking the
/// deadlock, rolls back the handler's turn rather than this transaction.
pub(crate) const OTHER_APPLICATION_FIRST: &str =
    "INSERT INTO audit VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10);
     UPDATE accounts SET balance = balance + 100 WHERE id = 1;";

/// Ends the turn's transaction behind the runtime's back: MySQL goes on after a failed
/// statement, so a swallowed error alone breaks nothing.
pub(crate) const BREAKS_THE_TRANSACTION: &str = "ROLLBACK";

/// A trigger that fails the first 20 completions of actor `hot`'s messages with a deadlock
/// (a sequence counts them: it is not rolled back with the turn).
pub(crate) const CONFLICTS_FOR_HOT: &[&str] = &[
    "CREATE SEQUENCE hot_conflicts",
    "CREATE TRIGGER conflict_for_hot BEFORE UPDATE ON solid_messages FOR EACH ROW
     BEGIN
         IF NEW.actor_id = 'hot' AND NEW.status = 'completed'
            AND NEXT VALUE FOR hot_conflicts <= 20 THEN
             SIGNAL SQLSTATE '40001'
                 SET MESSAGE_TEXT = 'forced conflict', MYSQL_ERRNO = 1213;
         END IF;
     END",
];

/// A trigger that fails every completion of actor `doomed`'s messages with a deadlock: an
/// application's trigger that is wrong for good, not a passing conflict.
pub(crate) const CONFLICTS_FOR_DOOMED_FOR_EVER: &[&str] = &[
    "CREATE TRIGGER conflict_for_doomed BEFORE UPDATE ON solid_messages FOR EACH ROW
     BEGIN
         IF NEW.actor_id = 'doomed' AND NEW.status = 'completed' THEN
             SIGNAL SQLSTATE '40001'
                 SET MESSAGE_TEXT = 'a trigger that always conflicts', MYSQL_ERRNO = 1213;
         END IF;
     END",
];

/// The ids of the running effects, oldest first (the column's binary collation reads as
/// bytes in sqlx; converted, as text).
pub(crate) const RUNNING_EFFECT_IDS: &str = "SELECT CONVERT(effect_id USING utf8mb4)
     FROM solid_effects WHERE status = 'running' ORDER BY id";

/// What keeps a test's databases alive: nothing, the process's server outlives them.
pub(crate) type Server = ();

/// Fills `solid_messages` with `$1` completed messages of 1000 actors, every other one a
/// fired reminder's (MariaDB's sequence engine counts them).
pub(crate) const FILL_MESSAGES: &str = "INSERT INTO solid_messages (actor_type, actor_id,
         operation, arguments, request_id, status, available_at, created_at, finished_at,
         result, scheduled_for)
     SELECT 'Filler', CONCAT('f-', seq MOD 1000), 'post', '[]', CONCAT('filler-', seq),
            'completed', 0, seq, seq, 'null', IF(seq MOD 2 = 0, seq, NULL)
     FROM seq_1_to_10000000 WHERE seq <= ?";

/// What a process that died just after migration 14's `ALTER TABLE` committed (MySQL commits
/// DDL by itself), before its record, leaves in a migrated database: the column there, the
/// migration not recorded, and its one step recorded as begun.
pub(crate) const CRASH_BEFORE_THE_LAST_STEPS_RECORD: &[&str] = &[
    "DELETE FROM solid_schema_migrations WHERE version = 14",
    "INSERT INTO solid_migration_steps (version, step, finished) VALUES (14, 0, FALSE)",
];

/// Another fresh database on the process's server.
pub(crate) async fn another_database(_: &Server) -> String {
    MariaDb::shared().expect("MariaDB runs").database().await
}

/// The turn's connection.
pub(crate) async fn connection<A: solid_objects::Actor>(
    turn: &mut Turn<A>,
) -> Result<&mut MySqlConnection, Error> {
    turn.mysql().await
}
