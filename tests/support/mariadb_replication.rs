//! A MariaDB primary and its semi-synchronous replica behind one [`Endpoint`], as a managed
//! MySQL endpoint or a proxy in front of replicas is: clients know only the endpoint.
//!
//! The primary writes a binary log and acknowledges a commit once the replica has it
//! (`rpl_semi_sync_master_wait_point = AFTER_SYNC`, with a timeout long enough that it
//! never falls back to asynchronous replication in a test), so every acknowledged turn
//! outlives the primary. The primary can be killed (SIGKILL) and restarted on its datadir,
//! or replaced: the replica applies all it received, stops replicating, accepts writes, and
//! the endpoint points at it.

use std::time::{Duration, Instant};

use sqlx::{Connection, MySqlConnection, Row};

use super::endpoint::Endpoint;
use super::mariadb::MariaDb;

/// How long the primary waits for the replica's acknowledgement before it would fall back
/// to asynchronous replication (milliseconds): longer than any test.
const SEMI_SYNC_TIMEOUT_MS: &str = "600000";
/// How long replication may take to start, or the replica to apply what it received.
const REPLICATION_WAIT: Duration = Duration::from_secs(60);

/// A primary, its replica, and the endpoint that points at whichever accepts writes.
pub struct MariaDbReplication {
    primary: MariaDb,
    replica: MariaDb,
    endpoint: Endpoint,
    /// Whether the replica was promoted and the endpoint points at it.
    replaced: bool,
}

impl MariaDbReplication {
    /// Starts both servers, the replica replicating from the primary, and the endpoint in
    /// front of the primary; `None` (the test skips) without MariaDB outside CI.
    pub async fn start() -> Option<Self> {
        let timeout = format!("--rpl-semi-sync-master-timeout={SEMI_SYNC_TIMEOUT_MS}");
        let primary = MariaDb::start_with(&[
            "--server-id=1",
            "--log-bin=primary-bin",
            "--binlog-format=ROW",
            "--rpl-semi-sync-master-enabled=ON",
            "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
            &timeout,
        ])?;
        let replica = MariaDb::start_with(&[
            "--server-id=2",
            "--relay-log=replica-relay",
            "--rpl-semi-sync-slave-enabled=ON",
            "--read-only=ON",
        ])?;
        let endpoint = Endpoint::in_front_of(primary.port()).await;
        let replication = Self {
            primary,
            replica,
            endpoint,
            replaced: false,
        };
        replication.replicate().await;
        Some(replication)
    }

    /// Points the replica at the primary and waits until the primary counts it as a
    /// semi-synchronous replica.
    async fn replicate(&self) {
        let mut replica = MySqlConnection::connect(&self.replica.url(""))
            .await
            .unwrap();
        let change = format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos",
            self.primary.port()
        );
        sqlx::raw_sql(&change).execute(&mut replica).await.unwrap();
        sqlx::raw_sql("START SLAVE")
            .execute(&mut replica)
            .await
            .unwrap();
        replica.close().await.unwrap();
        let mut primary = MySqlConnection::connect(&self.primary.url(""))
            .await
            .unwrap();
        let started = Instant::now();
        loop {
            let clients: (String, String) =
                sqlx::query_as("SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'")
                    .fetch_one(&mut primary)
                    .await
                    .unwrap();
            if clients.1 == "1" {
                break;
            }
            assert!(
                started.elapsed() < REPLICATION_WAIT,
                "the replica did not connect as semi-synchronous"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        primary.close().await.unwrap();
    }

    /// A new, empty database (created on the primary, so on both); returns its URL through
    /// the endpoint.
    pub async fn database(&self) -> String {
        let direct = self.primary.database().await;
        let name = direct.rsplit('/').next().expect("a database name");
        self.url(name)
    }

    /// The URL of `database` through the endpoint.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.endpoint.port())
    }

    /// Kills the primary with SIGKILL; the endpoint refuses until it is back or replaced.
    pub fn kill_primary(&mut self) {
        assert!(!self.replaced, "the primary was replaced already");
        self.primary.kill();
    }

    /// Starts the killed primary again on its datadir; the replica reconnects to it.
    pub fn restart_primary(&mut self) {
        self.primary.restart();
    }

    /// Replaces the killed primary by the replica: it applies everything it received,
    /// stops replicating and accepts writes, and the endpoint points at it (cutting every
    /// connection it relayed to the old primary).
    pub async fn promote_replica(&mut self) {
        let mut replica = MySqlConnection::connect(&self.replica.url(""))
            .await
            .unwrap();
        sqlx::raw_sql("STOP SLAVE IO_THREAD")
            .execute(&mut replica)
            .await
            .unwrap();
        let status = sqlx::query("SHOW SLAVE STATUS")
            .fetch_one(&mut replica)
            .await
            .unwrap();
        let file: String = status.try_get("Master_Log_File").unwrap();
        let position: u64 = status.try_get("Read_Master_Log_Pos").unwrap();
        let applied: Option<i64> = sqlx::query_scalar("SELECT MASTER_POS_WAIT(?, ?, ?)")
            .bind(file)
            .bind(position)
            .bind(REPLICATION_WAIT.as_secs())
            .fetch_one(&mut replica)
            .await
            .unwrap();
        assert!(
            applied.is_some_and(|events| events >= 0),
            "the replica applied what it received (MASTER_POS_WAIT gave {applied:?})"
        );
        sqlx::raw_sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF")
            .execute(&mut replica)
            .await
            .unwrap();
        replica.close().await.unwrap();
        self.endpoint.switch_to(self.replica.port());
        self.replaced = true;
    }
}
