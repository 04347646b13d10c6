//! The work of workers and operators: reminders, ready mailboxes, retention, dead letters.

use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

use super::call::Origin;
use super::{
    insert_bounded, micros, new_request_id, Engine, Enqueued, Lock, Outcome, Step, TurnReport,
    MAP_CAPACITY,
};
use crate::actor::turn::Missed;
use crate::admin::PruneCounts;
use crate::error::{Error, Result};
use crate::store::{
    ActorKey, DueReminder, MessageLookup, MessageProgress, MessageRecord, NewMessage, Retention,
    StoredStatus,
};
use crate::time::saturating::earlier;

/// What one firing of due reminders did.
#[derive(Debug)]
pub(crate) struct Fired {
    /// Occurrences fired: one message each (a recurring reminder that missed several may
    /// fire several).
    pub(crate) count: usize,
    /// Rows that did not read ([`Error::UnreadableReminder`]), left as they are.
    pub(crate) unreadable: Vec<Error>,
}

/// What one [`Engine::run_ready`] ran: how many turns, and how those that did not complete
/// ended.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    /// Turns that ran (failed attempts counted), whatever their outcome.
    pub(crate) turns: usize,
    /// The turns that did not complete (rejected, failed, dead, or destroyed), by actor.
    pub(crate) uncompleted: Vec<(String, String, TurnReport)>,
}

impl Pass {
    fn add(&mut self, other: Pass) {
        self.turns += other.turns;
        self.uncompleted.extend(other.uncompleted);
    }
}

/// What [`Engine::run_ready`] does with a turn that fails with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnErrors {
    /// Return it to the caller (the testing API).
    Return,
    /// Log it and leave the actor alone for a while (workers).
    LogAndStall,
}

/// How long workers leave an actor alone after one of its turns failed with an error that
/// is not an attempt (an operation this build does not know, the database gone).
const STALL: Duration = Duration::from_secs(30);

/// How many waiting heads of unknown operations one upkeep pass notes.
const UNKNOWN_NOTED: i64 = 100;

/// Each actor's newest finished messages with an idempotency key that retention keeps.
pub(crate) const KEPT_IDEMPOTENCY_KEYS: i64 = 64;

impl Engine {
    /// Turns up to `limit` reminders due at the clock's now into messages at the tail of
    /// their actors' mailboxes (a recurring one into each occurrence it missed, or the
    /// latest, and on to its next), every actor's in the order they were scheduled; returns
    /// how many fired, and the rows that did not read (logged, left as they are, and left
    /// alone for a while). Firing takes no actor's lock.
    pub(crate) async fn fire_due_reminders(&self, limit: i64) -> Result<Fired> {
        let mut tx = self.begin(None).await?;
        let now = micros(self.now());
        let skip = self.unreadable_reminder_ids();
        let (mut due, mut unreadable) = (Vec::new(), Vec::new());
        for row in tx.due_reminders(now, limit, &skip).await? {
            match row {
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
            .map(|_| new_request_id())
            .collect();
        let mut request_ids = request_ids.iter();
        let mut messages = Vec::with_capacity(request_ids.len());
        let (mut finished, mut moved) = (Vec::new(), Vec::new());
        for (reminder, occurrences) in due.iter().zip(&occurrences) {
            let key = ActorKey {
                actor_type: &reminder.actor_type,
                actor_id: &reminder.actor_id,
            };
            for (scheduled_for, request_id) in occurrences.fired().zip(&mut request_ids) {
                messages.push((key, fired_message(reminder, request_id, scheduled_for, now)));
            }
            match occurrences.next {
                Some(next) => moved.push((reminder.id, next)),
                None => finished.push(reminder.id),
            }
        }
        // Each actor's occurrences in the order they were scheduled, whichever reminder
        // they belong to (the sort is stable: ties keep the reminders' due order).
        messages.sort_by_key(|(_, message)| message.scheduled_for);
        tx.insert_messages(&messages).await?;
        tx.settle_reminders(&finished, &moved).await?;
        tx.commit().await?;
        if !due.is_empty() {
            self.wake();
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
                self.leave_unreadable_reminder(*id);
            }
            tracing::error!(%error, "a due reminder was not fired; workers try it again in {STALL:?}");
        }
        Ok(Fired {
            count: occurrences.iter().map(|fired| fired.count).sum(),
            unreadable,
        })
    }

    /// The ids of the reminder rows firing leaves alone now, as a JSON array of strings.
    fn unreadable_reminder_ids(&self) -> String {
        let mut unreadable = self
            .unreadable_reminders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        unreadable.retain(|_, until| *until > now);
        let ids: Vec<String> = unreadable.keys().map(i64::to_string).collect();
        serde_json::Value::from(ids).to_string()
    }

    /// Leaves a reminder row that did not read alone for [`STALL`], so it neither fails
    /// every pass nor holds back the reminders due after it.
    fn leave_unreadable_reminder(&self, id: i64) {
        let mut unreadable = self
            .unreadable_reminders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if unreadable.len() < MAP_CAPACITY {
            unreadable.insert(id, Instant::now() + STALL);
        }
    }

    /// Runs up to `turns_per_actor` turns for each of up to `actors` actors whose head
    /// message is due and of an operation this runtime knows, and that no worker of this
    /// process runs or has stalled; returns how many turns ran and how those that did not
    /// complete ended. A turn that fails with an error (not
    /// a failed attempt, which is counted) is returned, or, for workers, logged and its
    /// actor stalled. It starts no turn once `stopping` says so (a runtime shutting down).
    pub(crate) async fn run_ready(
        &self,
        actors: i64,
        turns_per_actor: usize,
        errors: TurnErrors,
        stopping: &(dyn Fn() -> bool + Sync),
    ) -> Result<Pass> {
        self.sample_mailbox_depth().await?;
        let stalled = i64::try_from(self.stalled_count()).unwrap_or(i64::MAX);
        let ready = self
            .store
            .ready_actors(
                micros(self.now()),
                &self.known_operations(),
                actors.saturating_add(stalled),
            )
            .await?;
        // Each actor's turns run in order; different actors' turns run side by side (as
        // many as the store takes at once), so on SQLite they share group commits.
        let passes = ready.into_iter().map(|(actor_type, actor_id)| async move {
            let mut pass = Pass::default();
            let Some(runner) = self.runner(&actor_type) else {
                self.report_unknown_type(&actor_type, &actor_id);
                return Ok(pass);
            };
            if self.is_stalled(&actor_type, &actor_id) {
                return Ok(pass);
            }
            let Some(_claim) = Claim::take(self, &actor_type, &actor_id) else {
                return Ok(pass);
            };
            for _ in 0..turns_per_actor {
                if stopping() {
                    break;
                }
                match runner.run_next(self, &actor_id, Lock::Skip).await {
                    Ok(Step::Ran(report)) => {
                        pass.turns += 1;
                        if !matches!(report.outcome, Outcome::Completed(_)) {
                            let ended = (actor_type.clone(), actor_id.clone(), report);
                            pass.uncompleted.push(ended);
                        }
                    }
                    Ok(Step::Idle | Step::Blocked { .. } | Step::Busy) => break,
                    Err(error) if errors == TurnErrors::Return => return Err(error),
                    Err(error) => {
                        tracing::error!(
                            actor_type,
                            actor_id,
                            %error,
                            "a turn failed; this worker leaves the actor alone for {STALL:?}"
                        );
                        self.stall(&actor_type, &actor_id);
                        break;
                    }
                }
            }
            Ok(pass)
        });
        let mut passes =
            futures_util::stream::iter(passes).buffer_unordered(self.store.concurrent_turns());
        let mut all = Pass::default();
        while let Some(ran) = passes.next().await {
            all.add(ran?);
        }
        Ok(all)
    }

    /// Records each registered actor type's unfinished messages in the metrics, if no pass
    /// did in the last [`DEPTH_SAMPLE_EVERY`](crate::metrics::DEPTH_SAMPLE_EVERY).
    async fn sample_mailbox_depth(&self) -> Result<()> {
        {
            let mut sampled = self
                .depth_sampled
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            if sampled.is_some_and(|at| now < at + crate::metrics::DEPTH_SAMPLE_EVERY) {
                return Ok(());
            }
            *sampled = Some(now);
        }
        let depths: HashMap<String, i64> = self.store.mailbox_depths().await?.into_iter().collect();
        let types: Vec<&'static str> = self
            .actors
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        for actor_type in types {
            let depth = depths.get(actor_type).copied().unwrap_or(0);
            crate::metrics::mailbox_depth(actor_type, depth);
        }
        Ok(())
    }

    fn stalled_count(&self) -> usize {
        self.stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a turn of this actor failed with an error recently (a stored operation this
    /// build does not know, say): it is skipped until the stall passes, so the log is not
    /// flooded and other actors get the workers.
    fn is_stalled(&self, actor_type: &str, actor_id: &str) -> bool {
        let mut stalled = self.stalled.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (actor_type.to_owned(), actor_id.to_owned());
        match stalled.get(&key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                stalled.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Leaves an actor alone for a while; when the map is full, the stalls that ran out make
    /// room, and past that an actor is simply not stalled.
    fn stall(&self, actor_type: &str, actor_id: &str) {
        let mut stalled = self.stalled.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if stalled.len() >= MAP_CAPACITY {
            stalled.retain(|_, until| *until > now);
        }
        if stalled.len() < MAP_CAPACITY {
            stalled.insert((actor_type.to_owned(), actor_id.to_owned()), now + STALL);
        }
    }

    fn report_unknown_type(&self, actor_type: &str, actor_id: &str) {
        if insert_bounded(&self.unknown_types, actor_type.to_owned()) {
            tracing::warn!(
                actor_type,
                actor_id,
                "messages wait for an actor type this runtime does not know; they stay queued \
                 until a runtime that registers it (Builder::actor::<T>()) runs them"
            );
        }
    }

    /// The workers' hourly upkeep: prunes what is past its retention, warns about effects
    /// no handler here runs, and notes why messages of unknown operations wait.
    pub(crate) async fn upkeep(&self) -> Result<()> {
        let pruned = self.prune(true).await?.total();
        tracing::debug!(pruned, "pruned old messages and effects");
        self.report_unhandled_effects().await?;
        self.note_unknown_operations().await?;
        Ok(())
    }

    /// Notes, on heads of mailboxes of known types whose operation this build does not know,
    /// why they wait (a build that knows it runs them; workers here never claim them).
    pub(crate) async fn note_unknown_operations(&self) -> Result<usize> {
        let heads = self
            .store
            .unknown_operations(&self.known_operations(), &self.known_types(), UNKNOWN_NOTED)
            .await?;
        if heads.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin(None).await?;
        for head in &heads {
            let why = Error::UnknownOperation {
                actor_type: head.actor_type.clone(),
                operation: head.operation.clone(),
                message_id: head.id,
            };
            tracing::warn!(%why, "a message waits for a build that knows its operation");
            tx.note_message(
                head.id,
                &format!("waits for a build that can run it: {why}"),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(heads.len())
    }

    /// Deletes what is past its retention (audit rows of administration calls included);
    /// returns how many rows of each kind. Without `commit`, rolls back: a preview.
    pub(crate) async fn prune(&self, commit: bool) -> Result<PruneCounts> {
        let now = self.now();
        let limits = &self.config.limits;
        let retention = Retention {
            finished_before: micros(earlier(now, limits.retention)),
            dead_before: (!limits.dead_retention.is_zero())
                .then(|| micros(earlier(now, limits.dead_retention))),
            keep_keyed: KEPT_IDEMPOTENCY_KEYS,
        };
        let mut tx = self.begin(None).await?;
        let mut pruned = tx.prune(&retention).await?;
        pruned.admin_events = tx.prune_admin_events(retention.finished_before).await?;
        if commit {
            tx.commit().await?;
        }
        Ok(pruned)
    }

    /// Enqueues a dead letter again at the tail of its actor's mailbox, handing its
    /// idempotency key over to the new message (so a client that calls again with that key
    /// gets the retry's outcome). Retrying the same dead letter twice enqueues one message.
    pub(crate) async fn retry_dead_letter(
        &self,
        message_id: i64,
    ) -> Result<(MessageRecord, Enqueued)> {
        match self.retry_once(message_id).await? {
            Retry::Enqueued(record, enqueued) => Ok((*record, enqueued)),
            Retry::Already => {
                // Retried already (maybe a moment ago, by another operator): answer with that.
                let record = self
                    .store
                    .message(MessageLookup::Id(message_id))
                    .await?
                    .ok_or(Error::MessageNotFound)?;
                let retry_id = record.retried_as.ok_or(Error::MessageNotFound)?;
                let retry = self
                    .store
                    .message(MessageLookup::Id(retry_id))
                    .await?
                    .ok_or(Error::MessageNotFound)?;
                let enqueued = Enqueued {
                    message_id: retry.id,
                    request_id: retry.request_id,
                };
                Ok((record, enqueued))
            }
        }
    }

    /// Enqueues a dead letter again unless it was retried already (or is no longer dead,
    /// or was pruned): a redrive's step, which never retries one message twice. Returns
    /// the new message's id.
    pub(crate) async fn redrive_dead_letter(&self, message_id: i64) -> Result<Option<i64>> {
        match self.retry_once(message_id).await {
            Ok(Retry::Enqueued(_, enqueued)) => Ok(Some(enqueued.message_id)),
            Ok(Retry::Already) | Err(Error::MessageNotFound | Error::NotDeadLetter { .. }) => {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Enqueues a dead letter again, once.
    async fn retry_once(&self, message_id: i64) -> Result<Retry> {
        let mut tx = self.begin(None).await?;
        let record = tx
            .message(MessageLookup::Id(message_id))
            .await?
            .ok_or(Error::MessageNotFound)?;
        if record.status != StoredStatus::Dead {
            return Err(Error::NotDeadLetter {
                message_id,
                status: record.status.as_str(),
            });
        }
        if !tx.release_dead_letter(message_id).await? {
            return Ok(Retry::Already);
        }
        let key = ActorKey {
            actor_type: &record.actor_type,
            actor_id: &record.actor_id,
        };
        let enqueued = self
            .insert_ready(
                &mut *tx,
                key,
                &record.operation,
                &record.arguments,
                record.idempotency_key.as_deref(),
                Origin {
                    available_at: 0,
                    incarnation: record.incarnation,
                    scheduled_for: record.scheduled_for,
                },
            )
            .await?;
        tx.link_retry(message_id, enqueued.message_id).await?;
        tx.commit().await?;
        self.wake();
        crate::metrics::enqueued(&record.actor_type, &record.operation, 1);
        Ok(Retry::Enqueued(Box::new(record), enqueued))
    }
}

/// What one retry of a dead letter did.
enum Retry {
    /// Enqueued it again as a new message.
    Enqueued(Box<MessageRecord>, Enqueued),
    /// An earlier retry had.
    Already,
}

/// The message a reminder's occurrence appends to its actor's mailbox: available now
/// whatever the clock says later, for the incarnation that scheduled it.
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

/// A worker's hold on one actor, released when dropped.
struct Claim<'e> {
    engine: &'e Engine,
    actor: (String, String),
}

impl<'e> Claim<'e> {
    fn take(engine: &'e Engine, actor_type: &str, actor_id: &str) -> Option<Self> {
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        let taken = engine
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(actor.clone());
        taken.then(|| Self { engine, actor })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.engine
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.actor);
    }
}
