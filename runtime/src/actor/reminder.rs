//! Reading an actor's reminders: when one is due, from inside a turn
//! (`turn.reminder(key).<reminder>().await`), and every one of them, for operators
//! (`reference.reminders().await`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::actor::turn::{Missed, Turn};
use crate::actor::Actor;
use crate::error::Result;

/// One of an actor's scheduled reminders, as [`Reference::reminders`](crate::Reference::reminders)
/// lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduledReminder {
    /// The reminder's name: its method's name, or the `#[reminder(name = "...")]` it is
    /// stored under.
    pub name: String,
    /// The key it was scheduled under.
    pub key: String,
    /// When it fires next.
    pub due_at: DateTime<Utc>,
    /// For a recurring reminder (`turn.schedule_every(..)`): its interval.
    pub every: Option<Duration>,
    /// For a recurring reminder: what it does with occurrences missed while no runtime ran.
    pub missed: Option<Missed>,
}

/// A lookup in the making; the generated builder names the reminder.
#[doc(hidden)]
pub struct ReminderLookup<'t, A: Actor> {
    turn: &'t mut Turn<A>,
    key: String,
}

impl<'t, A: Actor> ReminderLookup<'t, A> {
    pub(crate) fn new(turn: &'t mut Turn<A>, key: String) -> Self {
        Self { turn, key }
    }

    /// When the reminder `name` under this lookup's key is due, if it is scheduled.
    pub async fn due(self, name: &'static str) -> Result<Option<DateTime<Utc>>> {
        self.turn.reminder_due(name, &self.key).await
    }
}
