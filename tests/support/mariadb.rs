//! A throwaway MariaDB server: `mariadb-install-db` into a temp dir, `mariadbd` on a free
//! loopback port, killed when dropped (and, through a watchdog shell, when the test process
//! ends without dropping it). The binaries come from the machine (`mariadb-server`).
//!
//! [`MariaDb::shared`] is one server for every test of a process (each test takes a
//! database of its own); [`MariaDb::start`] is a server of the test's own, for tests that
//! restart or kill it ([`MariaDb::kill`], [`MariaDb::restart`]); [`MariaDb::start_with`]
//! gives it options of its own (a replication primary's binary log, say). [`Mariadbd`] is
//! one server process, which a Galera cluster's nodes (tests/support/galera.rs) are too.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::servers::{create_database, database_name, free_port, path, skipped};

/// A running server; killed on drop.
pub struct MariaDb {
    server: Mariadbd,
    /// The options this server runs with beyond every server's.
    options: Vec<String>,
    /// Holds the server's directory; declared after the server, so dropped after it.
    _dir: tempfile::TempDir,
}

impl MariaDb {
    /// One server for every test of this process.
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<MariaDb>> = OnceLock::new();
        SHARED.get_or_init(Self::start).as_ref()
    }

    /// Starts a server. Without MariaDB on the machine it returns `None` (the test then says
    /// it skipped), except under CI (`CI` set), where it panics.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// Starts a server with `options` after the ones every server here has; `None` as
    /// [`MariaDb::start`].
    pub fn start_with(options: &[&str]) -> Option<Self> {
        if let Some(missing) = missing() {
            return skipped(missing);
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut server = Mariadbd::new(dir.path().join("server"), "root");
        let options: Vec<String> = options.iter().map(|option| (*option).to_owned()).collect();
        server.install();
        server.launch(&options);
        server.wait_until_listening();
        Some(Self {
            server,
            options,
            _dir: dir,
        })
    }

    /// Kills the server with SIGKILL, as a crash would, and waits until it is gone.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts the killed server again on its datadir and port, and waits until it listens
    /// (it recovers what it had committed first).
    pub fn restart(&mut self) {
        self.server.launch(&self.options);
        self.server.wait_until_listening();
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        self.server.url(database)
    }

    /// A new, empty database on this server; returns its URL.
    pub async fn database(&self) -> String {
        let name = database_name("test");
        self.server.create_database(&name).await;
        self.server.url(&name)
    }
}

/// One `mariadbd` in a directory of its own (its datadir `data`, its socket, `error.log`,
/// and `server.pid`, the process id its watchdog shell wrote), on a free loopback port; it
/// is killed on drop.
pub struct Mariadbd {
    dir: PathBuf,
    /// The client port.
    port: u16,
    /// The user the server runs as (`--user`).
    user: String,
    /// The shell that runs the server and kills it once this process is gone.
    watchdog: Option<Child>,
}

impl Mariadbd {
    /// A server to be in `dir` (created, with an empty datadir), run as `user`; nothing runs
    /// until [`Mariadbd::launch`].
    pub fn new(dir: PathBuf, user: &str) -> Self {
        std::fs::create_dir_all(dir.join("data")).expect("a server dir");
        Self {
            dir,
            port: free_port(),
            user: user.to_owned(),
            watchdog: None,
        }
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates the system tables in the datadir (`mariadb-install-db`).
    pub fn install(&self) {
        let install = binary("mariadb-install-db").expect("mariadb-install-db beside mariadbd");
        let installed = Command::new(install)
            .args(["--no-defaults", "--auth-root-authentication-method=normal"])
            .arg("--skip-test-db")
            .arg(format!("--user={}", self.user))
            .arg(format!("--datadir={}", path(&self.dir.join("data"))))
            // Temporary tables of its own: bootstraps at once shared /tmp's and failed.
            .arg(format!("--tmpdir={}", path(&self.dir)))
            .output()
            .expect("mariadb-install-db runs");
        assert!(
            installed.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
    }

    /// Runs `mariadbd` with `options` after the ones every server here has, under a watchdog
    /// shell that kills it once this process is gone (a shared server is never dropped) and
    /// then removes its directory (and the directory that held it, once that is empty).
    pub fn launch(&mut self, options: &[String]) {
        let server = binary("mariadbd").expect("mariadbd");
        let parent_dir = self.dir.parent().expect("a server dir in a temp dir");
        let watchdog = format!(
            "\"$0\" \"$@\" & server=$!; echo $server > {pid}; \
             while kill -0 {parent} 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 1; done; \
             kill -9 $server 2>/dev/null; \
             if ! kill -0 {parent} 2>/dev/null; then \
             sleep 1; rm -rf {dir}; rmdir {root} 2>/dev/null; fi",
            pid = path(&self.pid_file()),
            parent = std::process::id(),
            dir = path(&self.dir),
            root = path(parent_dir),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &watchdog])
            .arg(server)
            .args(["--no-defaults", "--skip-grant-tables"])
            .arg(format!("--user={}", self.user))
            .arg(format!("--datadir={}", path(&self.dir.join("data"))))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--tmpdir={}", path(&self.dir)))
            .arg(format!("--socket={}", path(&self.dir.join("sock"))))
            .arg(format!("--log-error={}", path(&self.dir.join("error.log"))))
            .arg(format!(
                "--pid-file={}",
                path(&self.dir.join("mariadbd.pid"))
            ))
            .args([
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=32M",
                "--innodb-flush-log-at-trx-commit=2",
                "--skip-name-resolve",
                "--max-connections=400",
                "--max-allowed-packet=64M",
            ])
            .args(options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        self.watchdog = Some(watchdog);
    }

    /// Waits until the server accepts connections on its port (a minute at most).
    pub fn wait_until_listening(&self) {
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "mariadbd did not listen within a minute: {}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Creates the empty database `name`.
    pub async fn create_database(&self, name: &str) {
        create_database(&self.url(""), name).await;
    }

    /// SIGKILLs the server and waits for its watchdog to end; whether there was a server to
    /// kill.
    pub fn kill(&mut self) -> bool {
        let killed = std::fs::read_to_string(self.pid_file()).is_ok_and(|pid| {
            Command::new("kill")
                .args(["-9", pid.trim()])
                .status()
                .is_ok_and(|status| status.success())
        });
        // With the server gone, the watchdog's loop ends.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.wait();
        }
        let _ = std::fs::remove_file(self.pid_file());
        killed
    }

    /// What the server logged, for a failing test's message.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("server.pid")
    }
}

impl Drop for Mariadbd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Why no server can start here (`None` when `mariadbd` is on the machine).
pub fn missing() -> Option<&'static str> {
    binary("mariadbd")
        .is_none()
        .then_some("MariaDB not found (mariadbd); install mariadb-server to run this test")
}

/// A MariaDB program (or another the servers need) on the PATH or in /usr/sbin, /usr/bin.
pub fn binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.exists())
}
