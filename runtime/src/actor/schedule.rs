//! Reminders a turn stages: [`ReminderChange`], the builders that stage them
//! (`turn.schedule(at, key)`, `turn.unschedule(key)`), and [`Missed`].

use chrono::{DateTime, Utc};

use crate::actor::staging::Staging;
use crate::actor::{Actor, Operations};

/// A reminder change staged by a turn.
pub(crate) enum ReminderChange<M> {
    Schedule {
        key: String,
        at: DateTime<Utc>,
        message: M,
        /// For a recurring reminder: its interval, and what to do with missed occurrences.
        every: Option<(std::time::Duration, Missed)>,
    },
    /// Cancels the reminder under `key`, or under every key.
    Cancel {
        name: &'static str,
        key: Option<String>,
    },
}

impl<M: Operations> ReminderChange<M> {
    /// The identity of the alarm this change touches: (reminder name, key; `None` for every
    /// key).
    pub(crate) fn alarm(&self) -> (&'static str, Option<&str>) {
        match self {
            Self::Schedule { key, message, .. } => (message.name(), Some(key)),
            Self::Cancel { name, key } => (name, key.as_deref()),
        }
    }
}

/// What a recurring reminder does with the occurrences it missed while no runtime ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missed {
    /// Fire once, as the latest missed occurrence. The default.
    #[default]
    Latest,
    /// Fire each missed occurrence, in order, up to the [`CATCH_UP`](Missed::CATCH_UP) most
    /// recent.
    All,
}

impl Missed {
    /// The most missed occurrences [`Missed::All`] fires after one outage.
    pub const CATCH_UP: usize = 1_000;

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Latest => "latest",
            Self::All => "all",
        }
    }

    pub(crate) fn parse(stored: Option<&str>) -> Self {
        stored.and_then(Self::read).unwrap_or_default()
    }

    /// The policy a stored name stands for; `None` for a name the runtime never writes.
    pub(crate) fn read(stored: &str) -> Option<Self> {
        match stored {
            "all" => Some(Self::All),
            "latest" => Some(Self::Latest),
            _ => None,
        }
    }
}

impl<M: Operations> Staging<ReminderChange<M>> {
    /// What the latest staged change of the reminder `name` under `key` leaves: its time
    /// (`Some(Some(at))`), cancelled (`Some(None)`), or nothing staged (`None`).
    pub(crate) fn latest(&self, name: &str, key: &str) -> Option<Option<DateTime<Utc>>> {
        self.read(|staged| {
            staged.iter().rev().find_map(|change| match change {
                ReminderChange::Schedule { at, .. } => {
                    (change.alarm() == (name, Some(key))).then_some(Some(*at))
                }
                ReminderChange::Cancel {
                    name: cancelled,
                    key: cancelled_key,
                } => (*cancelled == name && cancelled_key.as_deref().is_none_or(|k| k == key))
                    .then_some(None),
            })
        })
        .flatten()
    }
}

/// A schedule in the making; the generated builder turns it into a typed reminder call.
#[doc(hidden)]
pub struct ScheduleStage<A: Actor> {
    reminders: Staging<ReminderChange<A::Message>>,
    at: DateTime<Utc>,
    key: String,
    every: Option<(std::time::Duration, Missed)>,
}

impl<A: Actor> ScheduleStage<A> {
    /// A schedule of one of the actor's reminders at `at` under `key`, recurring `every`
    /// interval if given, staged in `reminders`.
    pub(crate) fn new(
        reminders: Staging<ReminderChange<A::Message>>,
        at: DateTime<Utc>,
        key: String,
        every: Option<(std::time::Duration, Missed)>,
    ) -> Self {
        Self {
            reminders,
            at,
            key,
            every,
        }
    }

    /// For a recurring reminder, what to do with occurrences missed while no runtime ran.
    pub fn missed(mut self, missed: Missed) -> Self {
        if let Some((_, was)) = &mut self.every {
            *was = missed;
        }
        self
    }

    /// Stages the reminder message.
    pub fn stage(self, message: A::Message) {
        self.reminders.push(ReminderChange::Schedule {
            key: self.key,
            at: self.at,
            message,
            every: self.every,
        });
    }
}

/// A cancellation in the making; the generated builder names the reminder.
#[doc(hidden)]
pub struct UnscheduleStage<A: Actor> {
    reminders: Staging<ReminderChange<A::Message>>,
    key: Option<String>,
}

impl<A: Actor> UnscheduleStage<A> {
    /// A cancellation of one of the actor's reminders under `key` (every key: `None`),
    /// staged in `reminders`.
    pub(crate) fn new(reminders: Staging<ReminderChange<A::Message>>, key: Option<String>) -> Self {
        Self { reminders, key }
    }

    /// Stages the cancellation of the reminder `name`.
    pub fn stage(self, name: &'static str) {
        self.reminders.push(ReminderChange::Cancel {
            name,
            key: self.key,
        });
    }
}
