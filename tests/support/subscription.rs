//! The subscription actor that the lifecycle cases run on every backend: renewed every hour,
//! nudged once, ended by destroying it.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Subscription {
    pub plan: String,
    pub renewals: Vec<i64>,
    pub reminders_seen: u32,
}

#[actor]
impl Subscription {
    #[command]
    pub fn start(&mut self, turn: &mut Turn<Self>, plan: String) -> u64 {
        self.plan = plan;
        turn.schedule(turn.now() + TimeDelta::minutes(5), "nudge")
            .nudge();
        turn.incarnation()
    }

    #[command]
    pub fn renew_hourly(&mut self, turn: &mut Turn<Self>, all: bool) {
        let builder = turn.schedule_every(TimeDelta::hours(1), "renewal");
        let builder = if all {
            builder.missed(Missed::All)
        } else {
            builder
        };
        builder.renew();
    }

    #[command]
    pub fn stop_renewing(&mut self, turn: &mut Turn<Self>) {
        turn.unschedule("renewal").renew();
    }

    #[command]
    pub fn cancel(&mut self, turn: &mut Turn<Self>) -> usize {
        turn.destroy();
        self.renewals.len()
    }

    #[query]
    pub fn plan(&self, turn: &Turn<Self>) -> (String, u64) {
        (self.plan.clone(), turn.incarnation())
    }

    #[reminder]
    fn nudge(&mut self) {
        self.reminders_seen += 1;
    }

    #[reminder]
    fn renew(&mut self, turn: &mut Turn<Self>) {
        let at = turn
            .scheduled_at()
            .expect("a reminder's occurrence has its time");
        self.renewals.push(at.timestamp());
    }
}

/// Asserts that `queued`, a message enqueued before its actor was destroyed, was destroyed
/// with it: its status says so, and its result is [`Error::Destroyed`].
pub async fn assert_destroyed(queued: &MessageRef<u64>) {
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Destroyed
    ));
    assert!(matches!(
        queued.result().await,
        Err(Error::Destroyed { .. })
    ));
}
