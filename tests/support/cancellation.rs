//! Calls given up part-way, in a plan that is the same on every run: the cases that check
//! nothing wedges or is lost when callers cancel draw their cancellations from here.

use std::future::Future;
use std::time::Duration;

/// The number of the next pseudo-random step: a small xorshift, so a case needs no
/// dependency and replays the same plan of cancellations on every run.
pub fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The deadline of the call `n` of the caller `caller`: under `micros` microseconds, spread
/// over that range the same way on every run.
pub fn cut(n: u32, caller: usize, micros: u32) -> Duration {
    Duration::from_micros(u64::from((n * 7919 + caller as u32 * 104_729) % micros))
}

/// Polls `future` for `polls` scheduler turns, then drops it wherever it is.
pub async fn drop_after(future: impl Future, polls: u64) {
    let mut future = std::pin::pin!(future);
    for _ in 0..polls {
        let done = std::future::poll_fn(|context| {
            std::task::Poll::Ready(future.as_mut().poll(context).is_ready())
        })
        .await;
        if done {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Awaits each of `calls` in order; the call `n` for which `aborts(n)` is `Some(yields)` is
/// first given `yields` scheduler turns, then aborted wherever it is.
pub async fn abort_some<T>(
    calls: Vec<tokio::task::JoinHandle<T>>,
    aborts: impl Fn(usize) -> Option<usize>,
) {
    for (n, call) in calls.into_iter().enumerate() {
        if let Some(yields) = aborts(n) {
            for _ in 0..yields {
                tokio::task::yield_now().await;
            }
            call.abort();
        }
        let _ = call.await;
    }
}
