//! The administration API: what an operator needs when an actor is stuck.
//!
//! [`Runtime::admin`] gives an [`Admin`], which lists actor types and actors, inspects one
//! actor (its state, the head of its mailbox with its attempts and last error, its
//! reminders and effects), lists and redrives dead letters, pauses and resumes actors, and
//! previews and runs the prune. It works on stored rows only, so it needs none of the
//! application's actor types: the `solid-objects` command-line tool (feature `cli`) is built
//! on it.
//!
//! Every call is first put to [`Policy::authorize_administration`] (denied unless the
//! application's policy allows it), and every call, allowed or denied, leaves a row in the
//! audit table `solid_admin_events`: who (the [`context`](Admin::context) the operator gave),
//! what, on which resource, when, and how it ended. An allowed call's row is committed
//! before the call acts (outcome `allowed`) and then says how it ended (`done` or
//! `failed`): whatever a call changed has its row, even if the call was dropped midway.
//!
//! ```no_run
//! # async fn example(runtime: solid_objects::Runtime) -> solid_objects::Result<()> {
//! use solid_objects::admin::DeadLetterFilter;
//! use solid_objects::prelude::json;
//!
//! let admin = runtime.admin().context(json!({ "operator": "ana" }));
//! admin.pause("SeatInventory", "show-42").await?;
//! let stuck = admin.inspect("SeatInventory", "show-42").await?;
//! println!("{stuck:#?}");
//! let redriven = admin
//!     .redrive(&DeadLetterFilter::new().actor_type("SeatInventory").operation("hold"))
//!     .await?;
//! println!("{} dead letters enqueued again", redriven.retried);
//! admin.resume("SeatInventory", "show-42").await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`Runtime::admin`]: crate::Runtime::admin
//! [`Policy::authorize_administration`]: crate::Policy::authorize_administration

mod activity;
mod audit;
mod doctor;
mod model;
mod store_rows;

use serde_json::{json, Value};

pub use activity::{
    Activity, ActivityPoint, ActorActivity, ActorActivityPoint, Backlog, Lateness, Outcomes,
    UnknownWindow, Window,
};
pub use model::{
    ActorDetails, ActorFilter, ActorPage, ActorSummary, ActorTypeSummary, AdminEvent,
    DeadLetterFilter, DeadLetterSummary, DoctorReport, EffectFilter, EffectStatus, EffectSummary,
    MailboxDepth, MailboxHead, MessageSummary, Overview, PruneCounts, Redriven, ReminderFilter,
    ReminderSummary, Status, StoredKind, Undecodable, SHOWN_ARGUMENTS_CHARS,
};

pub use self::doctor::STALLS_WARNING;
use self::store_rows::public;
use crate::client::effect::UnhandledEffects;
use crate::client::message::MessageRef;
use crate::client::policy::AdminAction;
use crate::client::shared::Runtime;
use crate::error::{Error, Result};
use crate::store::admin_rows::{
    ActorSelection, Counted, DeadLetterSelection, EffectSelection, ReminderSelection,
};
use crate::store::{ActorKey, MessageLookup, MessageRecord};
use crate::time::micros::{from_micros, micros};
use crate::validate::{validate_id, validate_key};

/// A stored message as operators see it.
fn message_summary(record: MessageRecord) -> MessageSummary {
    MessageSummary {
        message_id: record.id,
        actor_type: record.actor_type,
        actor_id: record.actor_id,
        operation: record.operation,
        status: record.status.as_str().to_owned(),
        attempts: record.attempts,
        last_error: record.last_error,
        enqueued_at: from_micros(record.created_at),
        finished_at: record.finished_at.map(from_micros),
        retried_as: record.retried_as.filter(|&retry| retry > 0),
    }
}

/// The most rows one listing returns.
const MAX_PAGE: u32 = 1000;

/// Rows per listing when the filter gives no limit.
const DEFAULT_PAGE: u32 = 100;

/// An actor's recent messages that `inspect` returns.
const RECENT_MESSAGES: i64 = 20;

/// How many of the newest messages (of every actor) `inspect` looks through for an actor's
/// recent ones: the read stays bounded however large the table grows.
const RECENT_SCAN: i64 = 10_000;

/// Dead letters a redrive enqueues per batch.
const REDRIVE_BATCH: i64 = 100;

/// The administration API of a runtime; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Admin {
    runtime: Runtime,
    context: Option<Value>,
}

/// The operator API is reached from the handle: the handle's file knows nothing of it.
impl Runtime {
    /// The administration API: list, inspect, pause and resume actors, redrive dead
    /// letters, prune; every call authorised by
    /// [`Policy::authorize_administration`](crate::Policy::authorize_administration) and
    /// audited. See [`admin`](crate::admin).
    pub fn admin(&self) -> Admin {
        Admin::new(self.clone())
    }
}

impl Admin {
    pub(crate) fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            context: None,
        }
    }

    /// Who is asking: given to the policy, and stored as the caller of each audit row.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// Counts of messages and effects by status, reminders (and how many are due), paused
    /// actors, and when the oldest due message was enqueued.
    pub async fn status(&self) -> Result<Status> {
        audit::audited(self, AdminAction::Status, "database".to_owned(), || async {
            let now = micros(self.runtime.engine().core().now());
            Ok((
                self.runtime
                    .engine()
                    .reads()
                    .status(now, Counted::Every)
                    .await?
                    .into(),
                None,
            ))
        })
        .await
    }

    /// The first page of an operator's dashboard in one call (one audit row): the counts of
    /// [`status`](Self::status) for what waits or failed for good (ready messages and dead
    /// letters; ready, running and dead effects: each read from an index that holds only
    /// them, so the page stays fast however many finished rows are kept), every actor type,
    /// the `top` busiest mailboxes (1 to 1000; 100 if zero), and the messages that finished
    /// in the last hour, by status.
    pub async fn overview(&self, top: u32) -> Result<Overview> {
        audit::audited(
            self,
            AdminAction::Overview,
            "database".to_owned(),
            || async {
                let engine = self.runtime.engine();
                let store = engine.reads();
                let now = micros(engine.core().now());
                let hour_ago = now.saturating_sub(3_600_000_000);
                let overview = Overview {
                    now: from_micros(now),
                    status: store.status(now, Counted::Outstanding).await?.into(),
                    actor_types: public(store.actor_types().await?),
                    busiest: public(store.busiest_mailboxes(i64::from(page(top))).await?),
                    finished_last_hour: store.finished_since(hour_ago).await?,
                };
                Ok((overview, None))
            },
        )
        .await
    }

    /// What every actor did over `window`, a point per slice: the messages that completed,
    /// were rejected or became dead letters, the attempts that failed, what was waiting at the
    /// end of each slice (ready messages, due reminders, pending effects), and how late
    /// reminders ran. The overview's charts.
    pub async fn activity(&self, window: Window) -> Result<Activity> {
        let details = json!({ "window": window });
        audit::audited(
            self,
            AdminAction::Activity,
            "database".to_owned(),
            || async {
                let engine = self.runtime.engine();
                let span = window.span(micros(engine.core().now()));
                let rows = engine.reads().activity(span).await?;
                Ok((activity::activity(window, &span, &rows), Some(details)))
            },
        )
        .await
    }

    /// What one actor did over `window`, a point per slice: its messages that completed,
    /// were rejected or became dead letters, and its attempts that failed. Its page's chart.
    pub async fn actor_activity(
        &self,
        actor_type: &str,
        actor_id: &str,
        window: Window,
    ) -> Result<ActorActivity> {
        check_actor(actor_type, actor_id)?;
        let key = ActorKey {
            actor_type,
            actor_id,
        };
        let details = json!({ "window": window });
        audit::audited(self, AdminAction::Activity, resource(key), || async {
            let engine = self.runtime.engine();
            let span = window.span(micros(engine.core().now()));
            let rows = engine.reads().actor_activity(key, span).await?;
            Ok((
                activity::actor_activity(window, &span, &rows),
                Some(details),
            ))
        })
        .await
    }

    /// One message, whatever its status; `None` if there is no such message (or it was
    /// pruned).
    pub async fn message(&self, message_id: i64) -> Result<Option<MessageSummary>> {
        audit::audited(
            self,
            AdminAction::Inspect,
            format!("message {message_id}"),
            || async {
                let store = self.runtime.engine().reads();
                let record = store.message(MessageLookup::Id(message_id)).await?;
                Ok((record.map(message_summary), None))
            },
        )
        .await
    }

    /// Every actor type with actors or messages: its actors, paused actors, ready messages
    /// and dead letters.
    pub async fn actor_types(&self) -> Result<Vec<ActorTypeSummary>> {
        audit::audited(
            self,
            AdminAction::ListActors,
            "actor types".to_owned(),
            || async {
                Ok((
                    public(self.runtime.engine().reads().actor_types().await?),
                    None,
                ))
            },
        )
        .await
    }

    /// A page of actors matching `filter`, in (type, id) order, each with its mailbox depth,
    /// last activity and paused flag. For the next page, pass the last actor to
    /// [`ActorFilter::after`].
    pub async fn actors(&self, filter: &ActorFilter) -> Result<ActorPage> {
        let after = filter.after.as_ref();
        check_texts(&[
            filter.actor_type.as_deref(),
            filter.id_prefix.as_deref(),
            after.map(|(actor_type, _)| actor_type.as_str()),
        ])?;
        if let Some((_, actor_id)) = after.filter(|(_, actor_id)| !actor_id.is_empty()) {
            validate_id(actor_id)?;
        }
        let resource = describe(
            "actors",
            &[
                ("type", filter.actor_type.as_deref()),
                ("prefix", filter.id_prefix.as_deref()),
            ],
        );
        audit::audited(self, AdminAction::ListActors, resource, || async {
            let limit = page(filter.limit);
            let actors = public(
                self.runtime
                    .engine()
                    .reads()
                    .actors(&ActorSelection::from(filter), i64::from(limit))
                    .await?,
            );
            let more = actors.len() == limit as usize;
            Ok((ActorPage { actors, more }, None))
        })
        .await
    }

    /// One actor: its row, committed state, mailbox head, reminders, unfinished or dead
    /// effects and recent messages; `None` if it has neither a row nor a message.
    pub async fn inspect(&self, actor_type: &str, actor_id: &str) -> Result<Option<ActorDetails>> {
        check_actor(actor_type, actor_id)?;
        let key = ActorKey {
            actor_type,
            actor_id,
        };
        audit::audited(self, AdminAction::Inspect, resource(key), || async {
            let store = self.runtime.engine().reads();
            let filter = ActorFilter {
                actor_type: Some(actor_type.to_owned()),
                id_prefix: Some(actor_id.to_owned()),
                ..ActorFilter::default()
            };
            let summary = store
                .actors(&ActorSelection::from(&filter), 1)
                .await?
                .into_iter()
                .find(|actor| actor.actor_id == actor_id)
                .map(ActorSummary::from);
            let Some(summary) = summary else {
                return Ok((None, None));
            };
            let state = match store.state(key).await? {
                Some(state) => Some(serde_json::from_str(&state).map_err(|error| {
                    Error::Config(format!("the stored state does not read as JSON: {error}"))
                })?),
                None => None,
            };
            let reminders = ReminderFilter {
                actor_type: Some(actor_type.to_owned()),
                actor_id: Some(actor_id.to_owned()),
                ..ReminderFilter::default()
            };
            let effects = EffectFilter {
                actor_type: Some(actor_type.to_owned()),
                actor_id: Some(actor_id.to_owned()),
                ..EffectFilter::default()
            }
            .pending()
            .status(EffectStatus::Dead);
            let details = ActorDetails {
                summary,
                state,
                head: store.oldest_ready(key).await?.map(MailboxHead::from),
                reminders: public(
                    store
                        .all_reminders(&ReminderSelection::from(&reminders), i64::from(MAX_PAGE))
                        .await?,
                ),
                effects: public(
                    store
                        .effects(&EffectSelection::from(&effects), i64::from(MAX_PAGE))
                        .await?,
                ),
                recent_messages: store
                    .recent_messages(
                        key,
                        store.newest_message_id().await?.saturating_sub(RECENT_SCAN),
                        RECENT_MESSAGES,
                    )
                    .await?
                    .into_iter()
                    .map(message_summary)
                    .collect(),
            };
            Ok((Some(details), None))
        })
        .await
    }

    /// Dead letters matching `filter`, oldest first.
    pub async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterSummary>> {
        check_dead_letter_filter(filter)?;
        audit::audited(
            self,
            AdminAction::ListDeadLetters,
            dead_letters_resource(filter),
            || async {
                let records = self
                    .runtime
                    .engine()
                    .reads()
                    .dead_letters_matching(
                        &DeadLetterSelection::from(filter),
                        (0, i64::MAX),
                        i64::from(page(filter.limit)),
                    )
                    .await?;
                let letters = records
                    .into_iter()
                    .map(|record| DeadLetterSummary {
                        message_id: record.id,
                        request_id: record.request_id,
                        arguments: store_rows::shown_arguments(record.arguments),
                        actor_type: record.actor_type,
                        actor_id: record.actor_id,
                        operation: record.operation,
                        attempts: record.attempts,
                        error: record.last_error.unwrap_or_default(),
                        failed_at: record.finished_at.map(from_micros),
                        retried_as: record.retried_as.filter(|&retry| retry > 0),
                    })
                    .collect();
                Ok((letters, None))
            },
        )
        .await
    }

    /// Enqueues a dead letter again, at the tail of its actor's mailbox, with its attempts
    /// reset; its idempotency key moves to the new message, so a client that calls again
    /// with that key gets the retry's outcome. Retrying the same dead letter again returns
    /// the same new message.
    pub async fn retry_dead_letter(&self, message_id: i64) -> Result<MessageRef> {
        audit::audited(
            self,
            AdminAction::RetryDeadLetter,
            format!("message {message_id}"),
            || async {
                let (record, enqueued) = self
                    .runtime
                    .engine()
                    .operator_writes()
                    .retry_dead_letter(message_id)
                    .await?;
                let details = json!({ "retried_as": enqueued.message_id });
                let retried = MessageRef::from_parts(
                    self.runtime.clone(),
                    &record.actor_type,
                    &record.actor_id,
                    enqueued.message_id,
                    enqueued.request_id,
                );
                Ok((retried, Some(details)))
            },
        )
        .await
    }

    /// Enqueues again every dead letter that matches `filter`, was not retried yet and was
    /// there when the redrive started (a retry that dies again is a new dead letter, left
    /// for the next redrive), in batches, oldest first. Idempotent: each dead letter is
    /// retried once, however many operators redrive at once. An error stops it; what it
    /// enqueued so far stays enqueued, and running it again carries on.
    pub async fn redrive(&self, filter: &DeadLetterFilter) -> Result<Redriven> {
        check_dead_letter_filter(filter)?;
        let filter = DeadLetterFilter {
            include_retried: false,
            ..filter.clone()
        };
        audit::audited(
            self,
            AdminAction::Redrive,
            dead_letters_resource(&filter),
            || async {
                let engine = self.runtime.engine();
                let mut redriven = Redriven {
                    retried: 0,
                    message_ids: Vec::new(),
                };
                let up_to = engine.reads().newest_message_id().await?;
                let mut after = 0;
                loop {
                    let batch = engine
                        .reads()
                        .dead_letters_matching(
                            &DeadLetterSelection::from(&filter),
                            (after, up_to),
                            REDRIVE_BATCH,
                        )
                        .await?;
                    for letter in &batch {
                        if let Some(enqueued) = engine
                            .operator_writes()
                            .redrive_dead_letter(letter.id)
                            .await?
                        {
                            redriven.retried += 1;
                            redriven.message_ids.push(enqueued);
                        }
                    }
                    match batch.last() {
                        Some(last) if batch.len() as i64 == REDRIVE_BATCH => after = last.id,
                        _ => break,
                    }
                }
                let details = json!({ "retried": redriven.retried });
                Ok((redriven, Some(details)))
            },
        )
        .await
    }

    /// Effects matching `filter`, oldest first.
    pub async fn effects(&self, filter: &EffectFilter) -> Result<Vec<EffectSummary>> {
        check_texts(&[
            filter.actor_type.as_deref(),
            filter.actor_id.as_deref(),
            filter.name.as_deref(),
        ])?;
        let statuses = (!filter.statuses.is_empty()).then(|| {
            let names: Vec<&str> = filter
                .statuses
                .iter()
                .map(|status| status.as_str())
                .collect();
            names.join(",")
        });
        let resource = describe(
            "effects",
            &[
                ("status", statuses.as_deref()),
                ("type", filter.actor_type.as_deref()),
                ("id", filter.actor_id.as_deref()),
                ("name", filter.name.as_deref()),
            ],
        );
        audit::audited(self, AdminAction::ListEffects, resource, || async {
            let effects = self
                .runtime
                .engine()
                .reads()
                .effects(
                    &EffectSelection::from(filter),
                    i64::from(page(filter.limit)),
                )
                .await?;
            Ok((public(effects), None))
        })
        .await
    }

    /// Runs a dead effect again (attempts reset, under the same effect id); false if it is
    /// not dead, so retrying twice runs it once. An effect whose failure already went back
    /// to its actor ([`Emitted::on_failure`](crate::Emitted::on_failure)) then reports its
    /// new outcome too: a success after that failure reaches the `on_success` command, so an
    /// actor that treats a failure as final says so in its state.
    pub async fn retry_effect(&self, id: i64) -> Result<bool> {
        audit::audited(
            self,
            AdminAction::RetryEffect,
            format!("effect {id}"),
            || async {
                let retried = self.runtime.engine().effects().retry_effect(id).await?;
                Ok((retried, Some(json!({ "retried": retried }))))
            },
        )
        .await
    }

    /// Effects waiting to run whose kind has no handler in this runtime, by kind. If no
    /// process registers a handler for a kind ([`Builder::effect`](crate::Builder::effect)),
    /// its effects never run; workers also log a warning once per kind after a minute.
    pub async fn unhandled_effects(&self) -> Result<Vec<UnhandledEffects>> {
        audit::audited(
            self,
            AdminAction::ListEffects,
            "unhandled effects".to_owned(),
            || async {
                let pending = self.runtime.engine().effects().unhandled_effects().await?;
                Ok((
                    pending.into_iter().map(UnhandledEffects::new).collect(),
                    None,
                ))
            },
        )
        .await
    }

    /// Scheduled reminders matching `filter`, the next due first.
    pub async fn reminders(&self, filter: &ReminderFilter) -> Result<Vec<ReminderSummary>> {
        check_texts(&[filter.actor_type.as_deref(), filter.actor_id.as_deref()])?;
        let resource = describe(
            "reminders",
            &[
                ("type", filter.actor_type.as_deref()),
                ("id", filter.actor_id.as_deref()),
            ],
        );
        audit::audited(self, AdminAction::ListReminders, resource, || async {
            let reminders = self
                .runtime
                .engine()
                .reads()
                .all_reminders(
                    &ReminderSelection::from(filter),
                    i64::from(page(filter.limit)),
                )
                .await?;
            Ok((public(reminders), None))
        })
        .await
    }

    /// Pauses an actor: once this returns, no turn of it runs (a turn in flight finished
    /// first), workers skip it, and calls get [`Error::Paused`]; messages for it (from other
    /// actors, its reminders, earlier enqueues) wait in its mailbox. False if it was paused
    /// already.
    pub async fn pause(&self, actor_type: &str, actor_id: &str) -> Result<bool> {
        audit::set_paused(self, AdminAction::Pause, actor_type, actor_id).await
    }

    /// Resumes a paused actor: its mailbox runs again. False if it was not paused.
    pub async fn resume(&self, actor_type: &str, actor_id: &str) -> Result<bool> {
        audit::set_paused(self, AdminAction::Resume, actor_type, actor_id).await
    }

    /// Counts what [`prune`](Admin::prune) would delete now, deleting nothing.
    ///
    /// Like a prune, it first folds the charts' minutes that ended into their tallies (a
    /// write that changes no figure of the charts), since a prune deletes only what a fold
    /// counted.
    pub async fn prune_preview(&self) -> Result<PruneCounts> {
        audit::audited(
            self,
            AdminAction::PrunePreview,
            "database".to_owned(),
            || async {
                let counts = PruneCounts::from(self.runtime.engine().upkeep().prune(false).await?);
                Ok((counts, Some(json!(counts))))
            },
        )
        .await
    }

    /// Deletes finished messages and done effects past [`Limits::retention`], dead letters
    /// and dead effects past [`Limits::dead_retention`], and audit rows past the retention
    /// (the workers do this hourly); returns how many of each.
    ///
    /// [`Limits::retention`]: crate::Limits::retention
    /// [`Limits::dead_retention`]: crate::Limits::dead_retention
    pub async fn prune(&self) -> Result<PruneCounts> {
        audit::audited(self, AdminAction::Prune, "database".to_owned(), || async {
            let counts = PruneCounts::from(self.runtime.engine().upkeep().prune(true).await?);
            Ok((counts, Some(json!(counts))))
        })
        .await
    }

    /// The audit log, newest first, at most `limit` rows (1 to 1000; 100 if zero).
    pub async fn audit_log(&self, limit: u32) -> Result<Vec<AdminEvent>> {
        audit::audited(
            self,
            AdminAction::ReadAudit,
            "audit log".to_owned(),
            || async {
                let events = self
                    .runtime
                    .engine()
                    .reads()
                    .admin_events(i64::MAX, i64::from(page(limit)))
                    .await?;
                Ok((public(events), None))
            },
        )
        .await
    }

    /// Checks the database: the schema versions applied against the ones this build knows,
    /// the settings that matter (SQLite's journal mode and synchronous, PostgreSQL's
    /// isolation and version), a real write and read of a scratch actor (type
    /// `solid_objects.doctor`, deleted afterwards), and the clock skew between this host and
    /// PostgreSQL. It also decodes every unfinished message and scheduled reminder of the
    /// actor types this runtime registered with this build's operations, and lists those that
    /// do not decode ([`DoctorReport::undecodable`]): run it from a new build against the
    /// database before deploying it. What looks wrong is listed in
    /// [`DoctorReport::problems`], as is each kind of effect waiting to run that this runtime
    /// has no handler for ([`DoctorReport::unhandled_effects`]).
    pub async fn doctor(&self) -> Result<DoctorReport> {
        audit::audited(self, AdminAction::Doctor, "database".to_owned(), || async {
            let report = doctor::examine(self).await?;
            let details = json!({ "problems": report.problems });
            Ok((report, Some(details)))
        })
        .await
    }

    /// The unfinished messages and scheduled reminders of the actor types this runtime
    /// registered ([`Builder::actor`](crate::Builder::actor), or a reference) whose operation
    /// or arguments this build cannot decode, at most `limit` (1 to 1000; 100 if zero).
    ///
    /// Stored arguments are a format: a reminder scheduled by an older build fires with the
    /// arguments that build wrote, and a message that does not decode becomes a dead letter
    /// at once. Run this from the build about to be deployed, on the database it will run
    /// on, before it takes any work; rows of types it did not register are not checked.
    pub async fn undecodable(&self, limit: u32) -> Result<Vec<Undecodable>> {
        let limit = usize::try_from(page(limit)).unwrap_or(usize::MAX);
        audit::audited(
            self,
            AdminAction::ListUndecodable,
            "stored arguments".to_owned(),
            || async { Ok((doctor::find_undecodable(self, limit).await?, None)) },
        )
        .await
    }
}

/// Checks an actor's type and id as calls check them: non-empty, at most 255 bytes, no NUL.
fn check_actor(actor_type: &str, actor_id: &str) -> Result<()> {
    validate_key("actor type", actor_type)?;
    validate_id(actor_id)
}

/// Checks the texts of a filter: non-empty, at most 255 bytes, no NUL (which no database
/// stores in text).
fn check_texts(texts: &[Option<&str>]) -> Result<()> {
    texts
        .iter()
        .flatten()
        .try_for_each(|text| validate_key("filter", text))
}

fn check_dead_letter_filter(filter: &DeadLetterFilter) -> Result<()> {
    check_texts(&[
        filter.actor_type.as_deref(),
        filter.operation.as_deref(),
        filter.error_contains.as_deref(),
    ])
}

/// `Type/id`, as audit rows name one actor.
fn resource(key: ActorKey<'_, '_>) -> String {
    format!("{}/{}", key.actor_type, key.actor_id)
}

/// A listing's resource: its name and the filters given, such as `actors type=Show`.
fn describe(what: &str, filters: &[(&str, Option<&str>)]) -> String {
    let mut resource = what.to_owned();
    for (name, value) in filters {
        if let Some(value) = value {
            resource.push_str(&format!(" {name}={value}"));
        }
    }
    resource
}

fn dead_letters_resource(filter: &DeadLetterFilter) -> String {
    let since = filter.since.map(|at| at.to_rfc3339());
    let until = filter.until.map(|at| at.to_rfc3339());
    describe(
        "dead letters",
        &[
            ("type", filter.actor_type.as_deref()),
            ("operation", filter.operation.as_deref()),
            ("error", filter.error_contains.as_deref()),
            ("since", since.as_deref()),
            ("until", until.as_deref()),
        ],
    )
}

/// A listing's page size: `limit` within 1 to [`MAX_PAGE`], [`DEFAULT_PAGE`] for zero.
fn page(limit: u32) -> u32 {
    match limit {
        0 => DEFAULT_PAGE,
        limit => limit.min(MAX_PAGE),
    }
}
