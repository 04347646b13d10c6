//! A throwaway PostgreSQL server: `initdb` under a temp dir, listening on a free loopback
//! port, stopped (`-m immediate`) when dropped (and, through a watchdog shell, when the test
//! process ends without dropping it). The binaries come from the machine
//! (`/usr/lib/postgresql/*/bin`, or `PG_BIN`); as root they run as the `postgres` user, since
//! PostgreSQL refuses to run as root.
//!
//! [`PgServer::shared`] is one server for every test of a process (each test takes a
//! database of its own); [`PgServer::start`] is a server of the test's own, for tests that
//! restart or stop it. [`PgTools`] runs the tools for it and for a primary with its standby
//! (tests/support/postgres_cluster.rs).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

pub use super::servers::free_port;
use super::servers::{create_database, database_name, path, skipped};

/// The user every server is created with (a superuser, trusted on loopback).
pub const USER: &str = "solid";

/// A running server; stopped on drop.
pub struct PgServer {
    tools: PgTools,
    dir: tempfile::TempDir,
    port: u16,
    /// The shell that stops a shared server once this process is gone.
    watchdog: Option<Child>,
}

impl PgServer {
    /// Starts a server. Without PostgreSQL binaries on the machine it returns `None` (the
    /// test then says it skipped), except under CI (`CI` set), where it panics.
    pub fn start() -> Option<Self> {
        let tools = PgTools::find()?;
        let dir = tools.temp_dir();
        let port = free_port();
        let server = Self {
            tools,
            dir,
            port,
            watchdog: None,
        };
        let data = server.data();
        server.tools.initdb(&data);
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            server.dir.path().display()
        );
        server
            .tools
            .start(&data, &options, &server.dir.path().join("server.log"));
        Some(server)
    }

    /// One server for every test of this process, stopped by a watchdog once the process is
    /// gone (a static is never dropped).
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let mut server = Self::start()?;
                let watchdog = server
                    .tools
                    .stop_when_this_process_ends(server.dir.path(), &[server.data()]);
                server.watchdog = Some(watchdog);
                Some(server)
            })
            .as_ref()
    }

    /// A new, empty database on this server; returns its URL.
    pub async fn database(&self) -> String {
        self.database_named(&database_name("test")).await
    }

    /// A new, empty database called `name` on this server; returns its URL.
    pub async fn database_named(&self, name: &str) -> String {
        create_database(&self.url("postgres"), name).await;
        self.url(name)
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A server that never started has nothing to stop; a failure here must not panic
        // while a failed test is already unwinding.
        let _ = self.tools.stop(&self.data());
    }
}

/// The machine's PostgreSQL server tools, run as the `postgres` user when this process is
/// root.
pub struct PgTools {
    bin: PathBuf,
    run_as_postgres: bool,
}

impl PgTools {
    /// The tools of the machine's newest PostgreSQL (or `PG_BIN`'s). Without them it returns
    /// `None` (the test then says it skipped), except under CI (`CI` set), where it panics.
    pub fn find() -> Option<Self> {
        let Some(bin) = binaries() else {
            return skipped(missing().expect("no binaries"));
        };
        Some(Self {
            bin,
            run_as_postgres: is_root(),
        })
    }

    /// A new temp dir the tools may write in (handed to the `postgres` user when they run
    /// as it).
    pub fn temp_dir(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temp dir");
        if self.run_as_postgres {
            let status = Command::new("chown")
                .args(["postgres:postgres", path(dir.path())])
                .status()
                .expect("chown runs");
            assert!(
                status.success(),
                "cannot hand the temp dir to the postgres user"
            );
        }
        dir
    }

    /// `initdb` of a new cluster in `data`, whose user [`USER`] is trusted.
    pub fn initdb(&self, data: &Path) {
        let args = ["-D", path(data), "-A", "trust", "-U", USER, "-E", "UTF8"];
        self.run("initdb", &[&args[..], &["--no-sync"]].concat());
    }

    /// Starts the server of `data` with the server `options`, logging to `log`, and waits
    /// until it accepts connections (`pg_ctl -w start`).
    pub fn start(&self, data: &Path, options: &str, log: &Path) {
        let args = ["-D", path(data), "-o", options, "-l", path(log)];
        self.run("pg_ctl", &[&args[..], &["-w", "start"]].concat());
    }

    /// Stops the server of `data` at once, as a crash would (`pg_ctl -m immediate stop`);
    /// its error output if it fails.
    pub fn stop(&self, data: &Path) -> Result<(), String> {
        self.try_run("pg_ctl", &["-D", path(data), "-m", "immediate", "stop"])
    }

    /// Runs the tool `program`; panics with its output if it fails.
    pub fn run(&self, program: &str, args: &[&str]) {
        if let Err(error) = self.try_run(program, args) {
            panic!("{error}");
        }
    }

    /// Runs the tool `program`; its output if it fails.
    pub fn try_run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(program);
        let mut command = if self.run_as_postgres {
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

    /// Starts a shell, in a process group of its own (so that whatever ends this process's
    /// group leaves it to do its work), that waits for this process to end, then stops the
    /// servers of `data` and removes `dir`.
    pub fn stop_when_this_process_ends(&self, dir: &Path, data: &[PathBuf]) -> Child {
        let stop = if self.run_as_postgres {
            "runuser -u postgres -- \"$pg_ctl\" -D \"$data\" -m immediate stop"
        } else {
            "\"$pg_ctl\" -D \"$data\" -m immediate stop"
        };
        let watchdog = format!(
            "pg_ctl=$1; dir=$2; shift 2; \
             while kill -0 {parent} 2>/dev/null; do sleep 1; done; \
             for data in \"$@\"; do {stop}; done; rm -rf \"$dir\"",
            parent = std::process::id(),
        );
        Command::new("sh")
            .process_group(0)
            .args(["-c", &watchdog, "watchdog"])
            .arg(self.bin.join("pg_ctl"))
            .arg(dir)
            .args(data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the watchdog shell starts")
    }
}

/// Why no server can start here (`None` when the server binaries are on the machine).
pub fn missing() -> Option<&'static str> {
    binaries().is_none().then_some(
        "PostgreSQL server binaries not found (looked in PG_BIN and /usr/lib/postgresql/*/bin); \
         install postgresql to run this test",
    )
}

/// The directory of the machine's newest PostgreSQL server binaries (or `PG_BIN`).
fn binaries() -> Option<PathBuf> {
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
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
        .unwrap_or(false)
}
