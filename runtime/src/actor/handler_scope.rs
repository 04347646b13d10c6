//! Knowing, inside a handler, that a handler is running: a synchronous call made from there
//! would wait for the very turn that runs it (on SQLite the turn holds the only writer; on
//! PostgreSQL a call back to the same actor waits for its own row lock), so it fails at once
//! with a typed error that says to send instead.

use std::future::Future;

use crate::error::{Error, Result};

/// The actor whose handler the current task is running.
#[derive(Debug, Clone)]
struct Running {
    actor_type: &'static str,
    actor_id: String,
}

tokio::task_local! {
    static RUNNING: Running;
}

/// Runs a handler's future, marked as a handler of `actor_type`/`actor_id`.
pub(crate) async fn as_handler<F: Future>(
    actor_type: &'static str,
    actor_id: &str,
    handler: F,
) -> F::Output {
    let running = Running {
        actor_type,
        actor_id: actor_id.to_owned(),
    };
    RUNNING.scope(running, handler).await
}

/// Refuses a synchronous call (or an enqueue, or a wait) made from inside a handler.
pub(crate) fn refuse_inside_handler(target_type: &str, operation: &str) -> Result<()> {
    match RUNNING.try_with(Running::clone) {
        Ok(running) => Err(Error::CalledFromHandler {
            actor_type: running.actor_type,
            actor_id: running.actor_id,
            target_type: target_type.to_owned(),
            operation: operation.to_owned(),
        }),
        Err(_) => Ok(()),
    }
}
