//! A throwaway PostgreSQL primary with one streaming standby, on two free loopback ports
//! under one temp dir, that a test fails over: the primary killed (`pg_ctl -m immediate
//! stop`), the standby promoted (`pg_ctl promote`), the old primary rewound (`pg_rewind`)
//! and rejoined as the new primary's standby, and over again.
//!
//! The standby comes from `pg_basebackup -R -X stream`. With [`Replication::Synchronous`]
//! the primary waits for the standby to apply every commit (`synchronous_standby_names =
//! '*'`, `synchronous_commit = remote_apply`), so a commit the primary acknowledged is on
//! the standby; with [`Replication::Asynchronous`] (`synchronous_commit = local`) it does
//! not wait, and a failover can lose what the standby had not received yet. Both servers
//! are stopped (`-m immediate`) and their directory removed when the cluster is dropped,
//! and by a watchdog shell when the test process ends without dropping it. As root the
//! tools run as the `postgres` user, as [`PgServer`](super::postgres::PgServer)'s do.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

use super::postgres::{PgTools, USER};
use super::servers::{free_port, path};

/// How long a server may take to stream to its primary, or a primary to accept commits.
const READY_WAIT: Duration = Duration::from_secs(60);
/// How often the cluster looks at a server while waiting for it.
const POLL: Duration = Duration::from_millis(50);

/// Whether the primary waits for its standby to apply a commit before acknowledging it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = '*'` and `synchronous_commit = remote_apply`.
    Synchronous,
    /// `synchronous_commit = local`: the standby follows, and may lag.
    Asynchronous,
}

/// A primary and its standby; stopped and removed on drop.
pub struct PgCluster {
    dir: tempfile::TempDir,
    tools: PgTools,
    replication: Replication,
    /// Each server's port; its data directory is `dir/node-<index>`.
    ports: [u16; 2],
    /// The server that accepts writes.
    primary: usize,
    /// Whether the other server is running (as a standby, or promoted until the cluster
    /// is told which is primary).
    standby_running: bool,
    /// The shell that stops both servers once this process is gone.
    watchdog: Option<Child>,
}

impl PgCluster {
    /// Starts a primary and a standby streaming from it (a synchronous one with
    /// [`Replication::Synchronous`]), returning once the standby streams (and is the
    /// primary's synchronous standby). Without PostgreSQL binaries on the machine it returns
    /// `None` (the test then says it skipped), except under CI (`CI` set), where it panics.
    pub async fn start(replication: Replication) -> Option<Self> {
        let tools = PgTools::find()?;
        let mut cluster = Self {
            dir: tools.temp_dir(),
            tools,
            replication,
            ports: [free_port(), free_port()],
            primary: 0,
            standby_running: false,
            watchdog: None,
        };
        let data = [cluster.data(0), cluster.data(1)];
        cluster.watchdog = Some(
            cluster
                .tools
                .stop_when_this_process_ends(cluster.dir.path(), &data),
        );
        cluster.create_primary();
        cluster.start_server(0);
        cluster.tools.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &cluster.ports[0].to_string(),
                "-U",
                USER,
                "-D",
                path(&cluster.data(1)),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        cluster.start_server(1);
        cluster.standby_running = true;
        cluster.wait_for_standby().await;
        Some(cluster)
    }

    /// `initdb` for server 0, configured as a primary that streams to standbys (and, being
    /// copied by `pg_basebackup`, the standbys' configuration too), keeping little WAL.
    fn create_primary(&self) {
        let data = self.data(0);
        self.tools.initdb(&data);
        let (synchronous_standby_names, synchronous_commit) = match self.replication {
            Replication::Synchronous => ("*", "remote_apply"),
            Replication::Asynchronous => ("", "local"),
        };
        let settings = format!(
            "\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{sockets}'\n\
             fsync = off\n\
             max_connections = 200\n\
             wal_level = replica\n\
             max_wal_senders = 10\n\
             wal_keep_size = '64MB'\n\
             min_wal_size = '32MB'\n\
             max_wal_size = '128MB'\n\
             wal_log_hints = on\n\
             hot_standby = on\n\
             wal_receiver_status_interval = '1s'\n\
             synchronous_standby_names = '{synchronous_standby_names}'\n\
             synchronous_commit = {synchronous_commit}\n",
            sockets = self.dir.path().display(),
        );
        append(&data.join("postgresql.conf"), &settings);
        append(
            &data.join("pg_hba.conf"),
            "\nhost replication all 127.0.0.1/32 trust\n",
        );
    }

    /// A new, empty database on the primary (and so on the standby); returns its name.
    pub async fn database(&self) -> String {
        let name = super::servers::database_name("test");
        let mut admin = self.connect(self.primary, "postgres").await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("CREATE DATABASE");
        name
    }

    /// libpq's multi-host URL of `database`, on the writable one of both servers:
    /// `postgres://solid@127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=read-write`.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.ports[0], self.ports[1]
        )
    }

    /// The URL of `database` on the current primary alone.
    pub fn primary_url(&self, database: &str) -> String {
        self.server_url(self.primary, database)
    }

    /// The URL of `database` on the current standby alone (the server promoted by
    /// [`PgCluster::promote_standby`]).
    pub fn standby_url(&self, database: &str) -> String {
        self.server_url(1 - self.primary, database)
    }

    fn server_url(&self, server: usize, database: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{}/{database}",
            self.ports[server]
        )
    }

    /// Stops the primary at once, as a crash would (`pg_ctl -m immediate stop`): its
    /// connections break and nothing more commits until a standby is promoted.
    pub fn kill_primary(&self) {
        if let Err(error) = self.tools.stop(&self.data(self.primary)) {
            panic!("{error}");
        }
    }

    /// Promotes the standby (`pg_ctl promote -w`) and lets it commit alone (its
    /// `synchronous_standby_names` cleared): it is the primary from now on.
    pub async fn promote_standby(&mut self) {
        assert!(self.standby_running, "there is no standby to promote");
        let standby = 1 - self.primary;
        self.tools.run(
            "pg_ctl",
            &["-D", path(&self.data(standby)), "-w", "promote"],
        );
        self.primary = standby;
        self.standby_running = false;
        self.set_synchronous_standby_names("").await;
    }

    /// Rewinds the old primary (killed, so stopped) to the new primary's history
    /// (`pg_rewind`, which also writes its `standby.signal` and `primary_conninfo`), starts it
    /// as the new primary's standby, and returns once it streams (and, with
    /// [`Replication::Synchronous`], is the new primary's synchronous standby again).
    pub async fn rejoin_old_primary_as_standby(&mut self) {
        assert!(!self.standby_running, "the old primary is still running");
        let mut primary = self.connect(self.primary, "postgres").await;
        // pg_rewind reads the new timeline from the control file, which the promotion's
        // checkpoint writes.
        sqlx::query("CHECKPOINT")
            .execute(&mut primary)
            .await
            .expect("CHECKPOINT on the new primary");
        let old = 1 - self.primary;
        let source = format!(
            "host=127.0.0.1 port={} user={USER} dbname=postgres",
            self.ports[self.primary]
        );
        self.tools.run(
            "pg_rewind",
            &[
                "--target-pgdata",
                path(&self.data(old)),
                "--source-server",
                &source,
                "--write-recovery-conf",
                "--no-sync",
            ],
        );
        self.start_server(old);
        self.standby_running = true;
        if self.replication == Replication::Synchronous {
            self.set_synchronous_standby_names("*").await;
        }
        self.wait_for_standby().await;
    }

    /// Sets the primary's `synchronous_standby_names` (`ALTER SYSTEM`, then a reload).
    async fn set_synchronous_standby_names(&self, names: &str) {
        let mut primary = self.connect(self.primary, "postgres").await;
        sqlx::query(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ))
        .execute(&mut primary)
        .await
        .expect("ALTER SYSTEM SET synchronous_standby_names");
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut primary)
            .await
            .expect("the primary reloads its configuration");
    }

    /// Waits until the primary streams to the standby (as its synchronous standby with
    /// [`Replication::Synchronous`]).
    async fn wait_for_standby(&self) {
        let state = match self.replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + READY_WAIT;
        let mut primary = self.connect(self.primary, "postgres").await;
        loop {
            let streaming: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_replication \
                 WHERE state = 'streaming' AND sync_state = $1",
            )
            .bind(state)
            .fetch_one(&mut primary)
            .await
            .expect("pg_stat_replication reads");
            if streaming > 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby did not stream ({state}) within {READY_WAIT:?}; its log:\n{}",
                self.log(1 - self.primary)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// A connection to `database` on server `server`, waiting for it to accept one.
    async fn connect(&self, server: usize, database: &str) -> PgConnection {
        let url = self.server_url(server, database);
        let deadline = Instant::now() + READY_WAIT;
        loop {
            match PgConnection::connect(&url).await {
                Ok(connection) => return connection,
                Err(error) => assert!(
                    Instant::now() < deadline,
                    "{url} accepts no connection within {READY_WAIT:?}: {error}"
                ),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Starts server `server` on its port (`pg_ctl -w start`).
    fn start_server(&self, server: usize) {
        let options = format!("-p {}", self.ports[server]);
        self.tools
            .start(&self.data(server), &options, &self.log_path(server));
    }

    fn data(&self, server: usize) -> PathBuf {
        self.dir.path().join(format!("node-{server}"))
    }

    fn log_path(&self, server: usize) -> PathBuf {
        self.dir.path().join(format!("node-{server}.log"))
    }

    /// What server `server` logged.
    pub fn log(&self, server: usize) -> String {
        std::fs::read_to_string(self.log_path(server)).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // A server that is not running has nothing to stop; a failure here must not panic
        // while a failed test is already unwinding.
        for server in 0..2 {
            let _ = self.tools.stop(&self.data(server));
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Appends `text` to the file at `file`.
fn append(file: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .unwrap_or_else(|error| panic!("cannot append to {}: {error}", file.display()));
}
