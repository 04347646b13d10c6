//! An actor's reminders as operators read them (`reference.reminders().await`). A turn
//! reads one with `turn.reminder(key).<reminder>().await` ([`ReminderLookup`](crate::actor::turn::ReminderLookup)).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::actor::schedule::Missed;

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
