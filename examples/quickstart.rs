//! The main job: one actor type on an embedded SQLite file, shown end to end.
//!
//! Run it with `cargo run --example quickstart`. It proves, and prints as it goes:
//! per-actor order under concurrency, independence of actors, rejections that change
//! nothing, a durable reminder moved by a manual clock, and state that survives a restart.
//! Any failed check ends the program with a non-zero exit code.

use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use tokio::sync::Barrier;

/// A counter that can be taken from, but never below zero, and that can set an alarm.
#[actor]
#[derive(Default)]
pub struct Counter {
    value: u64,
    alarms_rung: u32,
}

#[actor]
impl Counter {
    /// Adds one and returns the new value.
    #[command]
    pub fn increment(&mut self) -> u64 {
        self.value += 1;
        self.value
    }

    /// Takes `amount` away, or rejects the call when the counter is too low.
    #[command]
    pub fn take(&mut self, amount: u64) -> Result<u64, Rejection> {
        if amount > self.value {
            return Err(reject!(
                too_low,
                "Only {} left, cannot take {}",
                self.value,
                amount
            ));
        }
        self.value -= amount;
        Ok(self.value)
    }

    /// Sets the alarm `minutes` from now; setting it again moves it.
    #[command]
    pub fn set_alarm(&mut self, turn: &mut Turn<Self>, minutes: i64) {
        let at = turn.now() + TimeDelta::minutes(minutes);
        turn.schedule(at, "alarm").ring();
    }

    /// Runs when the alarm is due.
    #[reminder]
    fn ring(&mut self) -> u32 {
        self.alarms_rung += 1;
        self.alarms_rung
    }

    /// The current value, read in mailbox order.
    #[query]
    pub fn value(&self) -> u64 {
        self.value
    }
}

type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn proved(what: &str) {
    println!("  ok  {what}");
}

fn check(condition: bool, failure: String) -> Outcome {
    if condition {
        Ok(())
    } else {
        Err(failure.into())
    }
}

/// Calls `increment` on `ids[i % ids.len()]` from `calls` tasks released together; returns the
/// values each id returned, sorted.
async fn concurrent_increments(runtime: &Runtime, ids: &[&str], calls: usize) -> Vec<Vec<u64>> {
    let barrier = Arc::new(Barrier::new(calls));
    let tasks: Vec<_> = (0..calls)
        .map(|call| {
            let id = call % ids.len();
            let counter = runtime.reference::<Counter>(ids[id]);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                (id, counter.increment().await)
            })
        })
        .collect();
    let mut returned = vec![Vec::new(); ids.len()];
    for task in tasks {
        let (id, value) = task.await.expect("the task panicked");
        returned[id].push(value.expect("increment failed"));
    }
    for values in &mut returned {
        values.sort_unstable();
    }
    returned
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Outcome {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("quickstart.db");
    let clock = ManualClock::starting_now();
    let open = || {
        Runtime::builder()
            .sqlite(&path)
            .clock(clock.clone())
            .policy(AllowAll)
            .start()
    };
    println!("solid-objects quickstart on {}", path.display());
    let runtime = open().await?;

    let one_to_25: Vec<u64> = (1..=25).collect();
    let returned = concurrent_increments(&runtime, &["visits"], 25).await;
    check(
        returned[0] == one_to_25,
        format!("one identity returned {:?}", returned[0]),
    )?;
    let state = runtime.reference::<Counter>("visits").snapshot().await?;
    check(state.value == 25, format!("state is {}", state.value))?;
    proved("25 concurrent calls to one identity returned exactly 1..=25; the state is 25");

    let returned = concurrent_increments(&runtime, &["left", "right"], 50).await;
    for values in &returned {
        check(
            *values == one_to_25,
            format!("an identity returned {values:?}"),
        )?;
    }
    proved("50 concurrent calls over two identities gave each exactly 1..=25");

    let visits = runtime.reference::<Counter>("visits");
    match visits.take(100).await {
        Err(Error::Rejected(rejection)) if rejection.code() == "too_low" => {}
        other => return Err(format!("taking 100 should be rejected, got {other:?}").into()),
    }
    check(
        visits.value().await? == 25,
        "a rejection changed the state".into(),
    )?;
    proved("a rejected call returned too_low and changed nothing");

    visits.set_alarm(10).await?;
    let early = runtime
        .testing()
        .run_due_reminders()
        .await?
        .occurrences_fired;
    clock.advance(Duration::from_secs(10 * 60));
    let due = runtime
        .testing()
        .run_due_reminders()
        .await?
        .occurrences_fired;
    let rung = visits.snapshot().await?.alarms_rung;
    check(
        (early, due, rung) == (0, 1, 1),
        format!("fired {early} early, {due} on time, rung {rung}"),
    )?;
    proved("the reminder fired only once the manual clock reached it");

    runtime.close().await;
    let runtime = open().await?;
    let state = runtime.reference::<Counter>("visits").snapshot().await?;
    check(
        state.value == 25 && state.alarms_rung == 1,
        format!("after reopening: value {}", state.value),
    )?;
    proved("the state survived closing and reopening the runtime");
    runtime.close().await;

    println!("all checks passed");
    Ok(())
}
