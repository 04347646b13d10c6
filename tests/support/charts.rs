//! What the operators' charts are checked with, by their figures on every backend
//! (tests/cases/activity.rs) and in a browser (tests/browser/dashboard.rs): a station whose
//! turns work, refuse, stumble, post, ring and chime, and noon on a Monday, when the charts'
//! cases start.

use solid_objects::prelude::*;

use super::actors::Noted;

/// A station that works, refuses, stumbles (for good once the runtime's attempts run out),
/// posts, rings, and chimes while it is fixed.
#[actor]
#[derive(Default)]
pub struct Station {
    worked: u32,
    rings: u32,
    fixed: bool,
}

#[actor]
impl Station {
    #[command]
    pub fn work(&mut self) -> u32 {
        self.worked += 1;
        self.worked
    }

    #[command]
    pub fn refuse(&mut self) -> Result<(), Rejection> {
        Err(reject!(closed, "The station is closed"))
    }

    #[command]
    pub fn stumble(&mut self) -> Result<(), Failure> {
        Err(Failure::retryable("the floor is wet"))
    }

    /// Posts `parcel` once the turn commits: the effect `Noted` named `parcel`.
    #[command]
    pub fn post(&mut self, turn: &mut Turn<Self>, parcel: String) {
        turn.emit(Noted { name: parcel });
    }

    /// Schedules a ring at `at` (seconds since the epoch).
    #[command]
    pub fn plan(&mut self, turn: &mut Turn<Self>, at: i64) {
        let due = DateTime::from_timestamp(at, 0).expect("a time");
        turn.schedule(due, at.to_string()).ring();
    }

    #[reminder]
    pub fn ring(&mut self) {
        self.rings += 1;
    }

    /// Schedules a chime at `at` (seconds since the epoch): it fails for good until fixed.
    #[command]
    pub fn plan_chime(&mut self, turn: &mut Turn<Self>, at: i64) {
        let due = DateTime::from_timestamp(at, 0).expect("a time");
        turn.schedule(due, at.to_string()).chime();
    }

    #[reminder]
    pub fn chime(&mut self) -> Result<(), Failure> {
        match self.fixed {
            true => Ok(()),
            false => Err(Failure::permanent("the bell is cracked")),
        }
    }

    #[command]
    pub fn fix(&mut self) {
        self.fixed = true;
    }

    /// Destroys the station.
    #[command]
    pub fn shut(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }

    /// Schedules the station's one bell, under the key `bell`, for `at` (seconds since the
    /// epoch): replacing the one scheduled before.
    #[command]
    pub fn set_bell(&mut self, turn: &mut Turn<Self>, at: i64) {
        let due = DateTime::from_timestamp(at, 0).expect("a time");
        turn.schedule(due, "bell").ring();
    }

    /// Rings every five minutes from now on (a missed ring is made up by the latest one).
    #[command]
    pub fn ring_every_five_minutes(&mut self, turn: &mut Turn<Self>) {
        turn.schedule_every(TimeDelta::minutes(5), "five").ring();
    }

    /// Works once [`SLOW_TURN`] lets it through: a turn whose handler takes its time.
    #[command]
    pub async fn work_slowly(&mut self) -> u32 {
        SLOW_TURN.started.notify_one();
        SLOW_TURN.go_on.notified().await;
        self.worked += 1;
        self.worked
    }
}

/// The gate of `Station::work_slowly`: it says when its handler started, and waits to be let
/// through.
pub struct Gate {
    /// Told when the handler started.
    pub started: tokio::sync::Notify,
    /// What the handler waits for.
    pub go_on: tokio::sync::Notify,
}

/// The gate of every station's `work_slowly`.
pub static SLOW_TURN: Gate = Gate {
    started: tokio::sync::Notify::const_new(),
    go_on: tokio::sync::Notify::const_new(),
};

/// Noon on a Monday, and `minute:second` after it.
pub fn noon(minute: i64, second: i64) -> DateTime<Utc> {
    let noon: DateTime<Utc> = "2026-03-02T12:00:00Z".parse().expect("a time");
    noon + TimeDelta::minutes(minute) + TimeDelta::seconds(second)
}

/// How many messages completed in each minute of the last hour, by the charts of `runtime`.
pub async fn completed_each_minute_of_the_hour(runtime: &Runtime) -> Vec<i64> {
    let activity = runtime
        .admin()
        .activity(solid_objects::admin::Window::Hour)
        .await
        .expect("the hour's chart");
    activity
        .points
        .iter()
        .map(|point| point.finished.completed)
        .collect()
}

/// A porter whose carries wait at a named gate the test opens: turns held in their handlers,
/// released together.
#[actor]
#[derive(Default)]
pub struct Porter {
    carried: u32,
}

#[actor]
impl Porter {
    /// Carries once the gate `gate` opens.
    #[command]
    pub async fn carry(&mut self, gate: String) -> u32 {
        super::gates::gate(&gate).pass().await;
        self.carried += 1;
        self.carried
    }
}

/// `porter.carry(gate)`, spawned and run to where it waits: on one thread a call enters its
/// group without awaiting anything, so the calls queue in the order they were made.
pub async fn spawned_carry(
    porter: &PorterRef,
    gate: &str,
) -> tokio::task::JoinHandle<Result<u32, solid_objects::Error>> {
    let (porter, gate) = (porter.clone(), gate.to_owned());
    let call = tokio::spawn(async move { porter.carry(gate).await });
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    call
}
