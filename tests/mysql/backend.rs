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

/// The ids of the running effects, oldest first (the column's binary collation reads as
/// bytes in sqlx; converted, as text).
pub(crate) const RUNNING_EFFECT_IDS: &str = "SELECT CONVERT(effect_id USING utf8mb4)
     FROM solid_effects WHERE status = 'running' ORDER BY id";

/// The turn's connection.
pub(crate) async fn connection<A: solid_objects::Actor>(
    turn: &mut Turn<A>,
) -> Result<&mut MySqlConnection, Error> {
    turn.mysql().await
}
