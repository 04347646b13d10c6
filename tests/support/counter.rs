//! The counter that the wedge cases and the previous build's rows (see
//! [`previous_build_rows`](super::previous_build_rows)) are written for.

use std::time::Duration;

use solid_objects::prelude::*;

/// A plain counter.
#[actor]
#[derive(Default)]
pub struct Counter {
    /// How often it was bumped.
    pub n: u32,
}

#[actor]
impl Counter {
    /// Bumps the counter; answers how often it was bumped.
    #[command]
    pub fn bump(&mut self) -> u32 {
        self.n += 1;
        self.n
    }

    /// How often it was bumped.
    #[query]
    pub fn value(&self) -> u32 {
        self.n
    }
}

/// Checks, on a database the previous build wrote (see
/// [`previous_build_rows`](super::previous_build_rows)) and `runtime` just upgraded, that the
/// message that build enqueued with a delay of an hour still waits, as one this build
/// enqueues with a delay does.
pub async fn the_previous_builds_delayed_message_waits(runtime: Runtime) {
    let counter = runtime.reference::<Counter>("c");
    // The control: a message this build enqueues with a delay waits.
    let control = runtime.reference::<Counter>("control");
    control
        .enqueue()
        .delay(Duration::from_secs(3600))
        .bump()
        .await
        .unwrap();
    let ran = runtime.testing().drain().await;
    let value = counter.snapshot().await.unwrap().n;
    assert_eq!(control.snapshot().await.unwrap().n, 0, "the control ran");
    let delayed = runtime.message("delayed-request").await.unwrap().unwrap();
    let status = delayed.status().await.unwrap();
    runtime.close().await;

    assert_eq!(
        value, 0,
        "a message delayed by an hour ran right after the upgrade (drain: {ran:?}; it is \
         {status:?})"
    );
}
