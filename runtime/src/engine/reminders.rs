//! Reminders: due reminders fire as ordinary messages at the tail of their actors'
//! mailboxes (taking no actor's lock), and an actor's scheduled reminders read back.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;

use super::conflicts::rerun_conflicts;
use super::core::Core;
use super::workers::STALL;
use super::{from_micros, micros, MAP_CAPACITY};
use crate::actor::reminder::ScheduledReminder;
use crate::actor::schedule::Missed;
use crate::error::{Error, Result};
use crate::store::{ActorKey, DueReminder, MessageProgress, NewMessage};

/// What one firing of due reminders did.
#[derive(Debug, Default)]
pub(crate) struct Fired {
    /// Occurrences fired: one message each (a recurring reminder that missed several may
    /// fire several).
    pub(crate) count: usize,
    /// Rows that did not read ([`Error::UnreadableReminder`]), left as they are.
    pub(crate) unreadable: Vec<Error>,
}

/// Reminder rows that did not read, and until when firing leaves them alone.
#[derive(Default)]
pub(crate) struct UnreadableReminders(Mutex<HashMap<i64, Instant>>);

impl UnreadableReminders {
    /// The ids of the reminder rows firing leaves alone now, as a JSON array of strings.
    fn ids(&self) -> String {
        let mut unreadable = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        unreadable.retain(|_, until| *until > now);
        let ids: Vec<String> = unreadable.keys().map(i64::to_string).collect();
        serde_json::Value::from(ids).to_string()
    }

    /// Leaves a reminder row that did not read alone for [`STALL`], so it neither fails
    /// every pass nor holds back the reminders due after it.
    fn leave(&self, id: i64) {
        let mut unreadable = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if unreadable.len() < MAP_CAPACITY {
            unreadable.insert(id, Instant::now() + STALL);
        }
    }
}

/// The reminders job: due reminders fired as messages, and an actor's reminders listed. It
/// borrows the core and the reminder rows left alone for a while.
#[derive(Clone, Copy)]
pub(crate) struct Reminders<'e> {
    core: &'e Core,
    unreadable: &'e UnreadableReminders,
}

impl<'e> Reminders<'e> {
    /// The reminders job over the engine's parts.
    pub(super) fn new(core: &'e Core, unreadable: &'e UnreadableReminders) -> Self {
        Self { core, unreadable }
    }
}

impl Reminders<'_> {
    /// Turns up to `limit` reminders due at the clock's now into messages at the tail of
    /// their actors' mailboxes (a recurring one into each occurrence it missed, or the
    /// latest, and on to its next), every actor's in the order they were scheduled; returns
    /// how many fired, and the rows that did not read (logged, left as they are, and left
    /// alone for a while). Firing takes no actor's lock.
    ///
    /// A pass that conflicts with another transaction (InnoDB picks a firing pass and a turn
    /// that re-arms the same reminders as each other's deadlock victims; a Galera cluster's
    /// certification picks one of two nodes' passes) commits nothing and runs again after a
    /// short pause, a few times at most, before the conflict is returned.
    pub(crate) async fn fire_due_reminders(&self, limit: i64) -> Result<Fired> {
        rerun_conflicts(|| self.fire_due_reminders_once(limit)).await
    }

    /// One pass of [`fire_due_reminders`](Self::fire_due_reminders), in one transaction.
    async fn fire_due_reminders_once(&self, limit: i64) -> Result<Fired> {
        let now = micros(self.core.now());
        if !self.core.store().any_reminder_due(now).await? {
            return Ok(Fired::default());
        }
        let mut tx = self.core.begin(None).await?;
        let skip = self.unreadable.ids();
        let (mut due, mut unreadable) = (Vec::new(), Vec::new());
        for row in tx.due_reminders(now, limit, &skip).await? {
            match row.and_then(readable_catch_up) {
                Ok(reminder) => due.push(reminder),
                Err(error) => unreadable.push(error),
            }
        }
        let occurrences: Vec<Occurrences> = due
            .iter()
            .map(|reminder| Occurrences::of(reminder, now))
            .collect();
        let request_ids: Vec<String> = occurrences
            .iter()
            .flat_map(Occurrences::fired)
            .map(|_| crate::ids::new_request_id())
            .collect();
        let mut request_ids = request_ids.iter();
        let mut messages = Vec::with_capacity(request_ids.len());
        let (mut finished, mut moved, mut unfired) = (Vec::new(), Vec::new(), Vec::new());
        for (reminder, occurrences) in due.iter().zip(&occurrences) {
            let key = ActorKey {
                actor_type: &reminder.actor_type,
                actor_id: &reminder.actor_id,
            };
            for (scheduled_for, request_id) in occurrences.fired().zip(&mut request_ids) {
                messages.push((key, fired_message(reminder, request_id, scheduled_for, now)));
            }
            // The reminder was due from its due time, one due reminder until now: the first
            // message that fires was due from then, each later one from now.
            if occurrences.first > reminder.due_at {
                unfired.push((reminder.due_at, occurrences.first));
            }
            unfired.extend(occurrences.fired().skip(1).map(|later| (now, later)));
            match occurrences.next {
                Some(next) => moved.push((reminder.id, next)),
                None => finished.push(reminder.id),
            }
        }
        // Each actor's occurrences in the order they were scheduled, whichever reminder
        // they belong to (the sort is stable: ties keep the reminders' due order).
        messages.sort_by_key(|(_, message)| message.scheduled_for);
        tx.insert_messages(&messages).await?;
        tx.settle_reminders(&finished, &moved, &unfired).await?;
        tx.commit().await?;
        if !due.is_empty() {
            self.core.wake();
        }
        for (reminder, occurrences) in due.iter().zip(&occurrences) {
            let count = occurrences.count;
            let (actor_type, name) = (&reminder.actor_type, &reminder.name);
            crate::metrics::enqueued(actor_type, name, u64::try_from(count).unwrap_or(u64::MAX));
            let late = crate::metrics::micros_between(reminder.due_at, now);
            crate::metrics::reminder_lateness(actor_type, name, late);
        }
        for error in &unreadable {
            if let Error::UnreadableReminder { id, .. } = error {
                self.unreadable.leave(*id);
            }
            tracing::error!(%error, "a due reminder was not fired; workers try it again in {STALL:?}");
        }
        Ok(Fired {
            count: occurrences.iter().map(|fired| fired.count).sum(),
            unreadable,
        })
    }

    /// The actor's scheduled reminders, the next due first.
    pub(crate) async fn scheduled(&self, key: ActorKey<'_, '_>) -> Result<Vec<ScheduledReminder>> {
        let stored = self.core.store().reminders(key).await?;
        Ok(stored
            .into_iter()
            .map(|reminder| ScheduledReminder {
                due_at: from_micros(reminder.due_at),
                every: reminder
                    .every
                    .and_then(|every| u64::try_from(every).ok())
                    .map(std::time::Duration::from_micros),
                missed: reminder
                    .every
                    .map(|_| Missed::parse(reminder.missed.as_deref())),
                name: reminder.name,
                key: reminder.key,
            })
            .collect())
    }
}

/// The message a reminder's occurrence appends to its actor's mailbox: available now
/// whatever the clock says later, for the incarnation that scheduled it, continuing the
/// trace of the turn that scheduled it.
fn fired_message<'a>(
    reminder: &'a DueReminder,
    request_id: &'a str,
    scheduled_for: i64,
    now: i64,
) -> NewMessage<'a> {
    NewMessage {
        operation: &reminder.name,
        arguments: &reminder.arguments,
        request_id,
        idempotency_key: None,
        created_at: now,
        progress: MessageProgress::ready(0, 0),
        incarnation: Some(reminder.incarnation),
        scheduled_for: Some(scheduled_for),
        trace: reminder.trace,
    }
}

/// The occurrences of a due reminder that fire now, and when it is due next.
#[derive(Debug, PartialEq, Eq)]
struct Occurrences {
    /// The first occurrence that fires, and the interval between them (0 for a one-shot).
    first: i64,
    every: i64,
    count: usize,
    /// When a recurring reminder is due next; `None` for a one-shot.
    next: Option<i64>,
}

impl Occurrences {
    fn of(reminder: &DueReminder, now: i64) -> Self {
        let Some(every) = reminder.every.filter(|every| *every > 0) else {
            return Self {
                first: reminder.due_at,
                every: 0,
                count: 1,
                next: None,
            };
        };
        // Occurrences at due_at, due_at + every, ... up to now.
        let missed = (now.saturating_sub(reminder.due_at) / every).saturating_add(1);
        let next = reminder.due_at.saturating_add(missed.saturating_mul(every));
        let last = next.saturating_sub(every);
        let count = match Missed::parse(reminder.missed.as_deref()) {
            Missed::All => usize::try_from(missed)
                .unwrap_or(usize::MAX)
                .min(Missed::CATCH_UP),
            _ => 1,
        };
        let back = i64::try_from(count - 1).unwrap_or(i64::MAX);
        Self {
            first: last.saturating_sub(back.saturating_mul(every)),
            every,
            count,
            next: Some(next),
        }
    }

    /// The scheduled times of the occurrences that fire, oldest first.
    fn fired(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.count).map(|index| {
            let index = i64::try_from(index).unwrap_or(i64::MAX);
            self.first.saturating_add(index.saturating_mul(self.every))
        })
    }
}

/// A due reminder whose catch-up policy this build reads, or an
/// [`Error::UnreadableReminder`] (a policy that is not one the runtime writes: the store
/// returns it as stored).
fn readable_catch_up(reminder: DueReminder) -> Result<DueReminder> {
    match &reminder.missed {
        Some(missed) if Missed::read(missed).is_none() => Err(Error::UnreadableReminder {
            id: reminder.id,
            reason: format!("its catch-up policy {missed:?} is not one the runtime writes"),
        }),
        _ => Ok(reminder),
    }
}
