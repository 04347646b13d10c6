//! The databases earlier releases wrote (`tests/fixtures/<release>/`, see its README), and
//! the servers' own tools that load and dump them: `psql` and `pg_dump` of the machine's
//! PostgreSQL, `mariadb` and `mariadb-dump`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The fixtures of every release, oldest first: the folders under tests/fixtures.
pub fn releases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut releases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures is there")
        .map(|entry| entry.expect("a fixture folder").path())
        .filter(|path| path.is_dir())
        .collect();
    releases.sort();
    assert!(
        releases.iter().any(|path| path.ends_with("0.1.0")),
        "the first release's fixtures are kept"
    );
    releases
}

/// The folder of the first release's fixtures, whose schema is older than every migration
/// since (PostgreSQL's at migration 9, MySQL's at 1).
pub fn first_release() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/0.1.0")
}

/// Loads the PostgreSQL dump of `release` into the (empty) database of `url`.
pub fn load_postgres(release: &Path, url: &str) {
    run(Command::new(postgres_program("psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(release.join("postgres.sql"))
        .arg(url));
}

/// Loads the MariaDB dump of `release` into the (empty) database of `url`.
pub fn load_mariadb(release: &Path, url: &str) {
    let dump = release.join("mariadb.sql");
    let file = std::fs::File::open(&dump).expect("the dump opens");
    let mut load = mariadb_command("mariadb", &[], url);
    let output = load.stdin(file).output().expect("mariadb runs");
    assert!(
        output.status.success(),
        "loading {} failed: {}",
        dump.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A program of the machine's PostgreSQL: in `PG_BIN`, or the newest
/// `/usr/lib/postgresql/*/bin`, as the throwaway server's.
pub fn postgres_program(name: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os("PG_BIN") {
        return PathBuf::from(bin).join(name);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed")
        .map(|entry| entry.expect("a version").path().join("bin").join(name))
        .filter(|program| program.exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| panic!("{name} is installed"))
}

/// Runs a program to its end; panics with its error output if it fails.
pub fn run(command: &mut Command) -> Vec<u8> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{command:?} cannot run: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The host, port and database of a MariaDB URL of the throwaway server.
fn mariadb_address(url: &str) -> (String, String, String) {
    let address = url.strip_prefix("mysql://root@").expect("a root URL");
    let (host, database) = address.split_once('/').expect("a database");
    let (host, port) = host.split_once(':').expect("a port");
    (host.to_owned(), port.to_owned(), database.to_owned())
}

/// The `mariadb` or `mariadb-dump` command with `options`, on the database of `url`.
pub fn mariadb_command(program: &str, options: &[&str], url: &str) -> Command {
    let (host, port, database) = mariadb_address(url);
    let mut command = Command::new(program);
    command.args(["--no-defaults", "--protocol=tcp", "--user=root"]);
    command
        .arg(format!("--host={host}"))
        .arg(format!("--port={port}"));
    command.args(options).arg(database);
    command
}
