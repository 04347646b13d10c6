//! A server that does not answer: start-up fails within the connect timeout, naming the
//! host and port and never the password, on PostgreSQL and on MySQL alike. No server runs:
//! the ports are closed, never accept, or accept and say nothing.

use std::time::Duration;

use solid_objects::prelude::*;

use crate::support::runtimes::builder;
use crate::support::silent_ports::SilentPorts;

/// A server that does not answer fails `start` within the connect timeout, with an error
/// that names its host and port, whether nothing listens on the port, the port is bound
/// and never accepts, or it accepts and never writes.
#[tokio::test]
async fn a_server_that_does_not_answer_fails_start_within_the_connect_timeout() {
    let silent = SilentPorts::start().await;
    for (scheme, what, port, url) in silent.urls("app") {
        let started = std::time::Instant::now();
        let start = builder(&url, 2)
            .connect_timeout(Duration::from_millis(300))
            .policy(AllowAll)
            .start();
        let error = tokio::time::timeout(Duration::from_secs(20), start)
            .await
            .unwrap_or_else(|_| panic!("{scheme} on {what}: start still waits after 20 s"))
            .expect_err("nothing answers");
        assert!(
            matches!(&error, Error::Unreachable { host, port: named, .. }
                if host == "127.0.0.1" && *named == port),
            "{scheme} on {what}: {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(!message.contains("s3cret-pw"), "{message}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{scheme} on {what}: {:?}",
            started.elapsed()
        );
    }
}
