//! This test binary run again as a child process that runs one test of it: how the process
//! tests (and a few server tests) get another process with a runtime of its own.

use std::process::{Command, Stdio};

/// A command that runs this test binary again, running only the test `test` (its full name,
/// `module::function`) on one thread with its output not captured, and its stdout and
/// stderr going nowhere (until the caller says otherwise).
pub fn running_only(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}
