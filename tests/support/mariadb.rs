//! A throwaway MariaDB server: `mariadb-install-db` into a temp dir, `mariadbd` on a free
//! loopback port, killed when dropped (and, through a watchdog shell, when the test process
//! ends without dropping it). The binaries come from the machine (`mariadb-server`).
//!
//! [`MariaDb::shared`] is one server for every test of a process (each test takes a
//! database of its own); [`MariaDb::start`] is a server of the test's own, for tests that
//! restart or kill it ([`MariaDb::kill`], [`MariaDb::restart`]); [`MariaDb::start_with`]
//! gives it options of its own (a replication primary's binary log, say).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::postgres::free_port;

/// A running server; killed on drop.
pub struct MariaDb {
    dir: tempfile::TempDir,
    port: u16,
    /// The options this server runs with beyond every server's.
    options: Vec<String>,
    /// The shell that runs the server and kills it once this process is gone.
    watchdog: Option<Child>,
}

static DATABASES: AtomicU32 = AtomicU32::new(0);

impl MariaDb {
    /// Starts a server. Without MariaDB on the machine it returns `None` (the test then says
    /// it skipped), except under CI (`CI` set), where it panics.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// Starts a server with `options` after the ones every server here has; `None` as
    /// [`MariaDb::start`].
    pub fn start_with(options: &[&str]) -> Option<Self> {
        if binary("mariadbd").is_none() {
            let missing = missing().expect("no mariadbd");
            assert!(std::env::var_os("CI").is_none(), "{missing}");
            eprintln!("skipped: {missing}");
            return None;
        }
        let install = binary("mariadb-install-db").expect("mariadb-install-db beside mariadbd");
        let dir = tempfile::tempdir().expect("a temp dir");
        let data = dir.path().join("data");
        let installed = Command::new(install)
            .args(["--no-defaults", "--auth-root-authentication-method=normal"])
            .args(["--skip-test-db", "--user=root"])
            .arg(format!("--datadir={}", path(&data)))
            // Temporary tables of its own: bootstraps at once shared /tmp's and failed.
            .arg(format!("--tmpdir={}", path(dir.path())))
            .output()
            .expect("mariadb-install-db runs");
        assert!(
            installed.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let mut mariadb = Self {
            dir,
            port: free_port(),
            options: options.iter().map(|option| (*option).to_owned()).collect(),
            watchdog: None,
        };
        mariadb.launch();
        mariadb.wait_until_ready();
        Some(mariadb)
    }

    /// Runs `mariadbd` on this server's datadir and port under a watchdog shell that kills
    /// it once this process is gone (a shared server is never dropped).
    fn launch(&mut self) {
        let watchdog = format!(
            "\"$0\" \"$@\" & server=$!; echo $server > {pid}; \
             while kill -0 {parent} 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 1; done; \
             kill -9 $server 2>/dev/null",
            pid = path(&self.pid_file()),
            parent = std::process::id(),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &watchdog])
            .arg(binary("mariadbd").expect("mariadbd"))
            .args(["--no-defaults", "--user=root", "--skip-grant-tables"])
            .arg(format!("--datadir={}", path(&self.dir.path().join("data"))))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--tmpdir={}", path(self.dir.path())))
            .arg(format!("--socket={}", path(&self.dir.path().join("sock"))))
            .arg(format!(
                "--log-error={}",
                path(&self.dir.path().join("error.log"))
            ))
            .args([
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=32M",
                "--innodb-flush-log-at-trx-commit=2",
                "--skip-name-resolve",
                "--max-connections=400",
                "--max-allowed-packet=64M",
            ])
            .args(&self.options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        self.watchdog = Some(watchdog);
    }

    /// Kills the server with SIGKILL, as a crash would, and waits until it is gone.
    pub fn kill(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.pid_file()) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            let _ = std::fs::remove_file(self.pid_file());
        }
        // With the server gone, the watchdog's loop ends.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
    }

    /// Starts the killed server again on its datadir and port, and waits until it listens
    /// (it recovers what it had committed first).
    pub fn restart(&mut self) {
        self.launch();
        self.wait_until_ready();
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// One server for every test of this process.
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<MariaDb>> = OnceLock::new();
        SHARED.get_or_init(Self::start).as_ref()
    }

    /// A new, empty database on this server; returns its URL.
    pub async fn database(&self) -> String {
        let name = format!(
            "test_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        let admin = sqlx::MySqlPool::connect(&self.url(""))
            .await
            .expect("the server accepts connections");
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("CREATE DATABASE");
        admin.close().await;
        self.url(&name)
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("server.pid")
    }

    fn wait_until_ready(&self) {
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "mariadbd did not listen within a minute: {}",
                std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

/// Why no server can start here (`None` when `mariadbd` is on the machine).
pub fn missing() -> Option<&'static str> {
    binary("mariadbd")
        .is_none()
        .then_some("MariaDB not found (mariadbd); install mariadb-server to run this test")
}

/// A MariaDB program on the PATH or in /usr/sbin, /usr/bin.
fn binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.exists())
}
