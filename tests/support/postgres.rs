//! A throwaway PostgreSQL server: `initdb` under a temp dir, listening on a free loopback
//! port, stopped (`-m immediate`) when dropped (and, through a watchdog shell, when the test
//! process ends without dropping it). The binaries come from the machine
//! (`/usr/lib/postgresql/*/bin`, or `PG_BIN`); as root they run as the `postgres` user, since
//! PostgreSQL refuses to run as root.
//!
//! [`PgServer::shared`] is one server for every test of a process (each test takes a
//! database of its own); [`PgServer::start`] is a server of the test's own, for tests that
//! restart or stop it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// A running server; stopped on drop.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    run_as_postgres: bool,
    /// The shell that stops a shared server once this process is gone.
    watchdog: Option<Child>,
}

static DATABASES: AtomicU32 = AtomicU32::new(0);

impl PgServer {
    /// Starts a server. Without PostgreSQL binaries on the machine it returns `None` (the
    /// test then says it skipped), except under CI (`CI` set), where it panics.
    pub fn start() -> Option<Self> {
        let Some(bin) = binaries() else {
            let missing = missing().expect("no binaries");
            assert!(std::env::var_os("CI").is_none(), "{missing}");
            eprintln!("skipped: {missing}");
            return None;
        };
        let run_as_postgres = is_root();
        let dir = tempfile::tempdir().expect("a temp dir");
        if run_as_postgres {
            chown_to_postgres(dir.path());
        }
        let port = free_port();
        let server = Self {
            dir,
            bin,
            port,
            run_as_postgres,
            watchdog: None,
        };
        let data = server.dir.path().join("data");
        server.run(
            "initdb",
            &[
                "-D",
                path(&data),
                "-A",
                "trust",
                "-U",
                "solid",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            server.dir.path().display()
        );
        let log = server.dir.path().join("server.log");
        server.run(
            "pg_ctl",
            &[
                "-D",
                path(&data),
                "-o",
                &options,
                "-l",
                path(&log),
                "-w",
                "start",
            ],
        );
        Some(server)
    }

    /// One server for every test of this process, stopped by a watchdog once the process is
    /// gone (a static is never dropped).
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let mut server = Self::start()?;
                server.stop_when_this_process_ends();
                Some(server)
            })
            .as_ref()
    }

    /// Starts a shell that waits for this process to end, then stops the server and removes
    /// its directory.
    fn stop_when_this_process_ends(&mut self) {
        let data = self.dir.path().join("data");
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = if self.run_as_postgres {
            "runuser -u postgres -- \"$1\" -D \"$2\" -m immediate stop"
        } else {
            "\"$1\" -D \"$2\" -m immediate stop"
        };
        let watchdog = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; {stop}; rm -rf \"$3\"",
            parent = std::process::id(),
        );
        let watchdog = Command::new("sh")
            .args(["-c", &watchdog, "watchdog"])
            .arg(&pg_ctl)
            .arg(&data)
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the watchdog shell starts");
        self.watchdog = Some(watchdog);
    }

    /// A new, empty database on this server; returns its URL.
    pub async fn database(&self) -> String {
        let name = format!(
            "test_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        let admin = sqlx::PgPool::connect(&self.url("postgres"))
            .await
            .expect("the server accepts connections");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("CREATE DATABASE");
        admin.close().await;
        self.url(&name)
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://solid@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs a PostgreSQL tool; panics with its error output if it fails.
    fn run(&self, program: &str, args: &[&str]) {
        if let Err(error) = self.try_run(program, args) {
            panic!("{error}");
        }
    }

    fn try_run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        run_tool(&self.bin, self.run_as_postgres, program, args)
    }
}

/// Runs the PostgreSQL tool `program` of `bin` (as the `postgres` user if
/// `run_as_postgres`); its error output if it fails.
pub fn run_tool(
    bin: &Path,
    run_as_postgres: bool,
    program: &str,
    args: &[&str],
) -> Result<(), String> {
    let program = bin.join(program);
    let mut command = if run_as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(&program);
        command
    } else {
        Command::new(&program)
    };
    let output = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("{} cannot run: {error}", program.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        // A server that never started has nothing to stop; a failure here must not panic
        // while a failed test is already unwinding.
        let _ = self.try_run("pg_ctl", &["-D", path(&data), "-m", "immediate", "stop"]);
    }
}

/// `path` as text (temp paths are UTF-8).
pub fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

/// Why no server can start here (`None` when the server binaries are on the machine).
pub fn missing() -> Option<&'static str> {
    binaries().is_none().then_some(
        "PostgreSQL server binaries not found (looked in PG_BIN and /usr/lib/postgresql/*/bin); \
         install postgresql to run this test",
    )
}

/// The directory of the machine's newest PostgreSQL server binaries (or `PG_BIN`).
pub fn binaries() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(bin));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// Whether this process runs as root (PostgreSQL's tools then run as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Hands `dir` to the `postgres` user.
pub fn chown_to_postgres(dir: &Path) {
    let status = Command::new("chown")
        .args(["postgres:postgres", path(dir)])
        .status()
        .expect("chown runs");
    assert!(
        status.success(),
        "cannot hand the temp dir to the postgres user"
    );
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}
