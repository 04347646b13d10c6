//! Running a runtime's work in a case: its workers in a task of their own, the reminders that
//! are due, and waits bounded so that a wedge fails the case instead of hanging it.

use std::future::Future;
use std::time::Duration;

use solid_objects::prelude::*;
use tokio::task::JoinHandle;

/// Starts `runtime`'s workers (`Runtime::run`) in a task of their own.
pub fn run_workers(runtime: &Runtime) -> JoinHandle<Result<(), Error>> {
    let runtime = runtime.clone();
    tokio::spawn(async move { runtime.run().await })
}

/// [`run_workers`] on `runtime` once it knows the actor type `A` (a reference to one
/// registers it), so that its workers run `A`'s messages too.
pub fn run_workers_of<A: solid_objects::Addressable>(
    runtime: &Runtime,
) -> JoinHandle<Result<(), Error>> {
    let _ = runtime.reference::<A>("");
    run_workers(runtime)
}

/// Waits for `work` at most `seconds`; a wedge fails the case, naming `what` waited.
pub async fn within<T>(seconds: u64, what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), work)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {seconds} s: wedged"))
}

/// Whether `message` has its result within `timeout`, while other tasks run it.
pub async fn answered<T>(message: &MessageRef<T>, timeout: Duration) -> bool
where
    T: serde::de::DeserializeOwned,
{
    super::eventually(timeout, || async {
        message.result().await.expect("the result reads").is_some()
    })
    .await
}

/// Fires the reminders that are due by the runtime's clock; returns how many occurrences
/// fired.
pub async fn fire_due_reminders(runtime: &Runtime) -> usize {
    let drained = runtime.testing().run_due_reminders().await;
    drained.expect("the due reminders fire").occurrences_fired
}

/// Runs the effects that are due, then every message waiting, the replies they enqueued
/// among them.
pub async fn run_effects_and_replies(runtime: &Runtime) {
    runtime
        .testing()
        .run_effects()
        .await
        .expect("the effects run");
    runtime
        .testing()
        .drain()
        .await
        .expect("the mailboxes drain");
}
