//! The administration API on every backend: denied unless the
//! policy allows it, every call audited, listing and inspecting actors, pause and resume,
//! dead letters retried and redriven by filter, prune previewed then run, and the doctor.
//! Time moves only through the manual clock.

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use solid_objects::admin::{
    ActorFilter, DeadLetterFilter, EffectFilter, EffectStatus, ReminderFilter,
    SHOWN_ARGUMENTS_CHARS,
};
use solid_objects::policy::{AdminAction, Denied, Policy};
use solid_objects::prelude::*;
use solid_objects::Limits;
use support::desk::{Desk, Notify};
use support::policies::{Administered, CallersOnly};
use support::service::Service;
use support::workers::{fire_due_reminders, run_workers};
use support::{Backend, Harness};

/// The application's policy with operators: administration for a context naming one.
const WITH_OPERATORS: Administered = Administered(|request| {
    let operator = request.context.and_then(|context| context.get("operator"));
    match (operator, request.action) {
        (Some(_), _) => Ok(()),
        (None, AdminAction::Status) => Ok(()),
        (None, _) => Err(Denied::new("operators only")),
    }
});

/// The harness's database on the binary's backend, and the clock of the runtimes on it.
struct Setup {
    harness: Harness,
    clock: ManualClock,
}

impl Setup {
    fn new() -> Self {
        let harness = Harness::new();
        let clock = harness.clock.clone();
        Self { harness, clock }
    }

    async fn runtime(&self, policy: impl Policy) -> Runtime {
        self.builder()
            .await
            .policy(policy)
            .start()
            .await
            .expect("starts")
    }

    async fn builder(&self) -> solid_objects::Builder {
        self.harness
            .store()
            .await
            .clock(self.clock.clone())
            .actor::<Desk>()
            .sync_timeout(Duration::from_secs(30))
    }

    fn backend(&self) -> Backend {
        self.harness.backend()
    }

    /// A pool of the test's own on the database, outside the runtime.
    async fn pool(&self) -> sqlx::AnyPool {
        support::connect(&self.harness).await
    }
}

fn ana() -> Value {
    json!({ "operator": "ana" })
}

/// Runs `scenario` on a fresh database of the binary's backend.
macro_rules! case {
    ($scenario:ident, $name:ident) => {
        #[tokio::test]
        async fn $name() {
            $scenario(Setup::new()).await;
        }
    };
}

case!(
    denied_by_default_and_audited,
    administration_is_denied_by_default_and_every_call_is_audited
);
case!(
    list_and_inspect,
    actors_are_listed_by_type_and_prefix_in_pages_and_inspected
);
case!(
    overview_and_messages,
    the_overview_shows_where_work_waits_and_one_message_reads_by_id
);
case!(
    pause_and_resume,
    a_paused_actor_runs_nothing_and_its_callers_hear_why
);
case!(
    paused_while_a_call_waits,
    a_call_waiting_behind_a_message_when_its_actor_is_paused_hears_its_message_is_queued
);
case!(
    dead_letters_and_redrive,
    dead_letters_are_listed_by_filter_and_redriven_once
);
case!(
    prune_preview_then_execute,
    a_prune_preview_counts_and_deletes_nothing_then_the_prune_deletes_those_rows
);
case!(
    dead_effects_and_retry,
    dead_effects_are_listed_and_retried_once
);
case!(doctor, the_doctor_checks_schema_settings_and_a_round_trip);
case!(
    hostile_dead_arguments,
    a_dead_effects_and_a_dead_letters_arguments_are_shown_capped_and_as_data
);

async fn denied_by_default_and_audited(setup: Setup) {
    // A runtime without a policy, and one whose policy says nothing of administration.
    let unconfigured = setup.builder().await.start().await.expect("starts");
    let error = unconfigured.admin().status().await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::AdministrationDenied {
                action: "status",
                ..
            }
        ),
        "{error}"
    );
    unconfigured.close().await;
    let application = setup.runtime(CallersOnly).await;
    let admin = application.admin().context(json!({ "user": "mallory" }));
    let error = admin.pause("Desk", "d1").await.unwrap_err();
    let Error::AdministrationDenied { reason, .. } = &error else {
        panic!("expected a denial, got {error}");
    };
    assert!(reason.contains("authorize_administration"), "{reason}");
    assert!(
        admin.audit_log(10).await.is_err(),
        "reading the log is administration too"
    );
    application.close().await;

    // Nothing was paused; the operator's runtime reads the log: every refusal is there.
    let operators = setup.runtime(WITH_OPERATORS).await;
    operators
        .reference::<Desk>("d1")
        .add(1)
        .await
        .expect("d1 runs");
    let admin = operators.admin().context(ana());
    let events = admin.audit_log(10).await.unwrap();
    let seen: Vec<(&str, &str, &str)> = events
        .iter()
        .map(|event| {
            (
                event.action.as_str(),
                event.resource.as_str(),
                event.outcome.as_str(),
            )
        })
        .collect();
    // An allowed call's row is written before it acts: this read is in the log it reads.
    assert_eq!(
        seen,
        [
            ("read_audit", "audit log", "allowed"),
            ("read_audit", "audit log", "denied"),
            ("pause", "Desk/d1", "denied"),
            ("status", "database", "denied"),
        ]
    );
    assert_eq!(events[0].caller, Some(ana()));
    assert_eq!(events[2].caller, Some(json!({ "user": "mallory" })));
    assert_eq!(events[3].caller, None);

    // Allowed calls then say how they ended, with their details.
    let status = operators.admin().status().await.unwrap();
    assert_eq!(status.paused_actors, 0);
    assert!(admin.pause("Desk", "d1").await.unwrap());
    let events = admin.audit_log(4).await.unwrap();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|event| (event.action.as_str(), event.outcome.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("read_audit", "allowed"),
            ("pause", "done"),
            ("status", "done"),
            ("read_audit", "done")
        ]
    );
    assert_eq!(events[1].caller, Some(ana()));
    assert_eq!(events[1].details, Some(json!({ "changed": true })));
    assert_eq!(events[2].caller, None);
    // The same policy refuses a context without an operator, and says so in the log.
    let error = operators.admin().resume("Desk", "d1").await.unwrap_err();
    assert!(error.to_string().contains("operators only"), "{error}");
    let latest = &admin.audit_log(2).await.unwrap()[1];
    assert_eq!(
        (latest.action.as_str(), latest.outcome.as_str()),
        ("resume", "denied")
    );
    assert_eq!(latest.details, Some(json!({ "reason": "operators only" })));
    operators.close().await;
}

async fn list_and_inspect(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    for id in ["alpha-1", "alpha-2", "beta-1"] {
        runtime.reference::<Desk>(id).add(2).await.unwrap();
    }
    runtime.reference::<Desk>("alpha-1").plan(30).await.unwrap();
    // An actor with only a message, enqueued for later, and one whose head keeps failing.
    let desk = runtime.reference::<Desk>("gamma-1");
    desk.enqueue()
        .delay(Duration::from_secs(3600))
        .add(5)
        .await
        .unwrap();
    let beta = runtime.reference::<Desk>("beta-1");
    beta.set_broken(true).await.unwrap();
    beta.enqueue().flaky().await.unwrap();
    beta.enqueue().add(1).await.unwrap();
    assert_eq!(
        runtime.testing().drain().await.unwrap().turns,
        1,
        "flaky's first attempt"
    );
    let admin = runtime.admin().context(ana());

    let types = admin.actor_types().await.unwrap();
    assert_eq!(types.len(), 1);
    assert_eq!(
        (
            types[0].actor_type.as_str(),
            types[0].actors,
            types[0].ready_messages
        ),
        ("Desk", 4, 3)
    );

    let first = admin
        .actors(&ActorFilter::new().actor_type("Desk").limit(2))
        .await
        .unwrap();
    let ids: Vec<&str> = first.actors.iter().map(|a| a.actor_id.as_str()).collect();
    assert_eq!(ids, ["alpha-1", "alpha-2"]);
    assert!(first.more);
    let last = first.actors.last().unwrap();
    let second = admin
        .actors(
            &ActorFilter::new()
                .after(&last.actor_type, &last.actor_id)
                .limit(2),
        )
        .await
        .unwrap();
    let ids: Vec<&str> = second.actors.iter().map(|a| a.actor_id.as_str()).collect();
    assert_eq!(ids, ["beta-1", "gamma-1"]);
    let beta_row = &second.actors[0];
    assert_eq!((beta_row.mailbox_depth, beta_row.revision), (2, 2));
    assert!(beta_row.last_activity.is_some());
    assert_eq!(second.actors[1].mailbox_depth, 1);
    assert_eq!(second.actors[1].last_activity, None);
    let alphas = admin
        .actors(&ActorFilter::new().id_prefix("alpha"))
        .await
        .unwrap();
    assert_eq!(alphas.actors.len(), 2);
    assert!(!alphas.more);
    // A prefix is text, not a pattern.
    let none = admin
        .actors(&ActorFilter::new().id_prefix("%"))
        .await
        .unwrap();
    assert!(none.actors.is_empty());

    let alpha = admin.inspect("Desk", "alpha-1").await.unwrap().unwrap();
    assert_eq!(
        alpha.state,
        Some(json!({ "total": 2, "rings": 0, "broken": false }))
    );
    assert_eq!(alpha.head, None);
    assert_eq!(alpha.reminders.len(), 1);
    assert_eq!(
        (
            alpha.reminders[0].name.as_str(),
            alpha.reminders[0].key.as_str()
        ),
        ("ring", "ring")
    );
    assert_eq!(alpha.effects.len(), 1);
    assert_eq!(
        (
            alpha.effects[0].name.as_str(),
            alpha.effects[0].status.as_str()
        ),
        ("notify", "ready")
    );

    let beta = admin.inspect("Desk", "beta-1").await.unwrap().unwrap();
    let head = beta.head.expect("beta's mailbox has a head");
    assert_eq!((head.operation.as_str(), head.attempts), ("flaky", 1));
    assert_eq!(head.last_error.as_deref(), Some("the printer is jammed"));
    assert!(head.next_attempt_at > setup.clock.now());
    assert_eq!(beta.summary.mailbox_depth, 2);

    assert!(admin.inspect("Desk", "nobody").await.unwrap().is_none());
    assert!(matches!(
        admin.inspect("Desk", &"x".repeat(256)).await,
        Err(Error::InvalidActorId { .. })
    ));

    let reminders = admin.reminders(&ReminderFilter::new()).await.unwrap();
    assert_eq!(reminders.len(), 1);
    assert_eq!(reminders[0].actor_id, "alpha-1");
    let pending = EffectFilter::new().pending();
    assert_eq!(admin.effects(&pending).await.unwrap().len(), 1);
    let dead = EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead);
    assert!(admin.effects(&dead).await.unwrap().is_empty());
    let status = admin.status().await.unwrap();
    assert_eq!(status.reminders, 1);
    assert_eq!(status.reminders_due, 0);
    assert!(status.messages.contains(&("ready".to_owned(), 3)));
    assert!(status.effects.contains(&("ready".to_owned(), 1)));
    runtime.close().await;
}

/// A call whose message is committed behind one waiting out its retry waits; an operator
/// pauses the actor: the call stops waiting, and says its message is queued (calling again
/// after the resume would add twice).
async fn paused_while_a_call_waits(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    let admin = runtime.admin().context(ana());
    let desk = runtime.reference::<Desk>("d1");
    desk.set_broken(true).await.unwrap();
    assert!(matches!(
        desk.flaky().await,
        Err(Error::HandlerFailed {
            retry_at: Some(_),
            ..
        })
    ));
    let calling = tokio::spawn({
        let desk = desk.clone().timeout(Duration::from_secs(30));
        async move { desk.add(5).await }
    });
    let committed = support::eventually(Duration::from_secs(10), || async {
        let details = admin.inspect("Desk", "d1").await.unwrap();
        details.is_some_and(|details| details.summary.mailbox_depth == 2)
    })
    .await;
    assert!(
        committed,
        "the call's message is committed behind the failed one"
    );
    assert!(admin.pause("Desk", "d1").await.unwrap());

    let heard = calling.await.unwrap();
    let Err(Error::Queued {
        request_id, reason, ..
    }) = &heard
    else {
        panic!("a call whose message is committed must say it is queued, not {heard:?}");
    };
    assert!(matches!(**reason, Error::Paused { .. }), "{reason:?}");

    // Resumed, the queued message runs once, after the failing one is dead.
    assert!(admin.resume("Desk", "d1").await.unwrap());
    let queued = runtime
        .message(request_id)
        .await
        .unwrap()
        .unwrap()
        .typed::<i64>();
    for _ in 0..10 {
        setup.clock.advance(Duration::from_secs(24 * 3600));
        runtime.testing().drain().await.unwrap();
        if queued.result().await.unwrap().is_some() {
            break;
        }
    }
    assert_eq!(queued.result().await.unwrap(), Some(5));
    assert_eq!(desk.total().await.unwrap(), 5);
    runtime.close().await;
}

async fn pause_and_resume(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    let desk = runtime.reference::<Desk>("d1");
    desk.add(1).await.unwrap();
    desk.plan(5).await.unwrap();
    desk.enqueue().add(10).await.unwrap();
    let admin = runtime.admin().context(ana());
    assert!(admin.pause("Desk", "d1").await.unwrap());
    assert!(!admin.pause("Desk", "d1").await.unwrap(), "paused already");
    // Pausing an actor that never ran works too: it never starts.
    assert!(admin.pause("Desk", "fresh").await.unwrap());

    let paused = |result: Result<_, Error>| matches!(result, Err(Error::Paused { .. }));
    assert!(paused(desk.add(1).await.map(|_| ())));
    assert!(paused(desk.total().await.map(|_| ())));
    assert!(paused(desk.enqueue().add(1).await.map(|_| ())));
    assert!(paused(
        runtime.reference::<Desk>("fresh").add(1).await.map(|_| ())
    ));
    let error = desk.add(1).await.unwrap_err();
    assert!(error.to_string().contains("resume"), "{error}");

    // Its queued message and its reminder wait; other actors run.
    let d2 = runtime.reference::<Desk>("d2");
    d2.enqueue().add(3).await.unwrap();
    setup.clock.advance(Duration::from_secs(600));
    // Fires d1's reminder into its mailbox, then runs what it can: d2 only.
    assert_eq!(fire_due_reminders(&runtime).await, 1);
    assert_eq!(d2.total().await.unwrap(), 3);
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 0);
    let d1 = admin.inspect("Desk", "d1").await.unwrap().unwrap();
    assert!(d1.summary.paused_at.is_some());
    assert_eq!(
        d1.summary.mailbox_depth, 2,
        "the enqueued add and the fired ring"
    );
    assert_eq!(d1.state.unwrap()["total"], 1);
    assert_eq!(admin.status().await.unwrap().paused_actors, 2);

    assert!(admin.resume("Desk", "d1").await.unwrap());
    assert!(
        !admin.resume("Desk", "d1").await.unwrap(),
        "running already"
    );
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 2);
    assert_eq!(desk.total().await.unwrap(), 11);
    assert_eq!(desk.rings().await.unwrap(), 1);
    assert_eq!(desk.add(1).await.unwrap(), 12);
    let events = admin.audit_log(10).await.unwrap();
    let pauses = events
        .iter()
        .filter(|event| event.action == "pause" || event.action == "resume")
        .count();
    assert_eq!(pauses, 5);
    runtime.close().await;
}

async fn dead_letters_and_redrive(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    let desks = [
        runtime.reference::<Desk>("d1"),
        runtime.reference::<Desk>("d2"),
    ];
    for desk in &desks {
        desk.set_broken(true).await.unwrap();
    }
    let failure = |result: Result<i64, Error>| result.unwrap_err().to_string();
    failure(desks[0].fragile("gateway down: 502".to_owned()).await);
    failure(desks[1].fragile("gateway down: 504".to_owned()).await);
    failure(desks[1].fragile("card declined 100%_".to_owned()).await);
    let admin = runtime.admin().context(ana());

    let all = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].operation, "fragile");
    assert_eq!(all[0].arguments, json!({ "why": "gateway down: 502" }));
    let gateway = DeadLetterFilter::new()
        .actor_type("Desk")
        .operation("fragile")
        .error_contains("gateway");
    assert_eq!(admin.dead_letters(&gateway).await.unwrap().len(), 2);
    // Wildcards in the text are text.
    let literal = DeadLetterFilter::new().error_contains("100%_");
    assert_eq!(admin.dead_letters(&literal).await.unwrap().len(), 1);
    assert!(admin
        .dead_letters(&DeadLetterFilter::new().error_contains("1_0"))
        .await
        .unwrap()
        .is_empty());
    let later = DeadLetterFilter::new().between(
        setup.clock.now() + TimeDelta::minutes(1),
        setup.clock.now() + TimeDelta::minutes(2),
    );
    assert!(admin.dead_letters(&later).await.unwrap().is_empty());

    // Fixed: the gateway's dead letters go again, each once however often it is asked.
    for desk in &desks {
        desk.set_broken(false).await.unwrap();
    }
    let (first, second) = tokio::join!(admin.redrive(&gateway), admin.redrive(&gateway));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.retried + second.retried, 2);
    assert_eq!(admin.redrive(&gateway).await.unwrap().retried, 0);
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 2);
    assert_eq!(desks[0].total().await.unwrap(), 1);
    assert_eq!(desks[1].total().await.unwrap(), 1);
    let left = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    assert_eq!(left.len(), 1, "retried ones are listed only when asked for");
    let everything = DeadLetterFilter::new().include_retried();
    let listed = admin.dead_letters(&everything).await.unwrap();
    assert_eq!(listed.iter().filter(|l| l.retried_as.is_some()).count(), 2);

    // One by one: the same new message however often.
    let declined = left[0].message_id;
    let retry = admin.retry_dead_letter(declined).await.unwrap().id();
    assert_eq!(admin.retry_dead_letter(declined).await.unwrap().id(), retry);
    assert!(admin
        .dead_letters(&DeadLetterFilter::new())
        .await
        .unwrap()
        .is_empty());
    let redrive = admin
        .audit_log(20)
        .await
        .unwrap()
        .into_iter()
        .find(|event| event.action == "redrive")
        .unwrap();
    assert_eq!(
        redrive.resource,
        "dead letters type=Desk operation=fragile error=gateway"
    );
    runtime.close().await;
}

/// Text an attacker chose: markup, a terminal escape, a quote, and far more than a listing
/// shows.
fn hostile_text() -> String {
    format!(
        "<script>alert(1)</script>\u{1b}[31m\"{}",
        "x".repeat(3 * SHOWN_ARGUMENTS_CHARS)
    )
}

/// Stored arguments past the cap: a string of exactly the cap's characters and `…`.
fn assert_capped(arguments: &Value, starts: &str) {
    let Value::String(shown) = arguments else {
        panic!("arguments past the cap are shown as a string, not {arguments}");
    };
    assert!(shown.starts_with(starts), "{shown:.80}");
    assert!(shown.ends_with('…'));
    assert_eq!(shown.chars().count(), SHOWN_ARGUMENTS_CHARS + 1);
}

async fn hostile_dead_arguments(setup: Setup) {
    let runtime = setup
        .builder()
        .await
        .policy(WITH_OPERATORS)
        .effect(|_: Notify, _| async {
            Err::<(), _>(Failure::permanent("the mail server is down"))
        })
        .start()
        .await
        .unwrap();
    let desk = runtime.reference::<Desk>("d1");
    desk.notify("d1".to_owned()).await.unwrap();
    desk.notify(hostile_text()).await.unwrap();
    desk.set_broken(true).await.unwrap();
    desk.fragile(hostile_text()).await.unwrap_err();
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 2);
    let admin = runtime.admin().context(ana());

    let dead = admin
        .effects(&EffectFilter::new().status(EffectStatus::Dead))
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].arguments, json!({ "desk": "d1" }));
    assert_capped(
        &dead[1].arguments,
        "{\"desk\":\"<script>alert(1)</script>\\u001b[31m\\\"x",
    );
    let inspected = admin.inspect("Desk", "d1").await.unwrap().unwrap();
    let shown: Vec<&Value> = inspected.effects.iter().map(|e| &e.arguments).collect();
    assert_eq!(shown, [&dead[0].arguments, &dead[1].arguments]);

    let letters = admin.dead_letters(&DeadLetterFilter::new()).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_capped(&letters[0].arguments, "{\"why\":\"<script>");
    // A listed dead letter is a handle on its message.
    let message = letters[0].message(&runtime);
    assert_eq!(message.request_id(), letters[0].request_id);
    assert!(matches!(
        message.status().await.unwrap(),
        MessageStatus::Dead { attempts: 1, .. }
    ));
    runtime.close().await;
}

async fn prune_preview_then_execute(setup: Setup) {
    let limits = Limits::new()
        .retention(Duration::from_secs(3600))
        .dead_retention(Duration::from_secs(3600));
    let runtime = setup
        .builder()
        .await
        .limits(limits)
        .policy(WITH_OPERATORS)
        .start()
        .await
        .unwrap();
    let desk = runtime.reference::<Desk>("d1");
    for n in 0..3 {
        desk.add(n).await.unwrap();
    }
    desk.set_broken(true).await.unwrap();
    desk.fragile("down".to_owned()).await.unwrap_err();
    let admin = runtime.admin().context(ana());
    admin.status().await.unwrap();
    setup.clock.advance(Duration::from_secs(2 * 3600));

    let preview = admin.prune_preview().await.unwrap();
    assert_eq!(preview.finished_messages, 4, "three adds and set_broken");
    assert_eq!(preview.dead_letters, 1);
    assert_eq!(
        preview.failed_attempts, 1,
        "the time of fragile's one attempt"
    );
    assert_eq!(preview.admin_events, 1, "the status call two hours ago");
    assert_eq!(
        admin.prune_preview().await.unwrap(),
        preview,
        "nothing was deleted"
    );
    let pruned = admin.prune().await.unwrap();
    assert_eq!(pruned, preview);
    assert_eq!(admin.prune_preview().await.unwrap().total(), 0);
    assert!(admin
        .dead_letters(&DeadLetterFilter::new())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(desk.total().await.unwrap(), 3, "state is never pruned");
    runtime.close().await;
}

async fn dead_effects_and_retry(setup: Setup) {
    let mailer = Service::away("the mail server is down");
    let runtime = setup
        .builder()
        .await
        .policy(WITH_OPERATORS)
        .effect(mailer.handler::<Notify>())
        .start()
        .await
        .unwrap();
    runtime.reference::<Desk>("d1").plan(5).await.unwrap();
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let admin = runtime.admin().context(ana());
    let dead = admin
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Dead))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].name.as_str(), dead[0].actor_id.as_str()),
        ("notify", "d1")
    );
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some("the mail server is down")
    );
    let d1 = admin.inspect("Desk", "d1").await.unwrap().unwrap();
    assert_eq!(d1.effects.len(), 1, "a dead effect shows on its actor");

    mailer.come_back();
    assert!(admin.retry_effect(dead[0].id).await.unwrap());
    assert!(
        !admin.retry_effect(dead[0].id).await.unwrap(),
        "not dead any more"
    );
    assert_eq!(runtime.testing().run_effects().await.unwrap(), 1);
    let done = admin
        .effects(&EffectFilter::new().status(solid_objects::admin::EffectStatus::Done))
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    assert!(admin
        .inspect("Desk", "d1")
        .await
        .unwrap()
        .unwrap()
        .effects
        .is_empty());
    let retries: Vec<_> = admin
        .audit_log(20)
        .await
        .unwrap()
        .into_iter()
        .filter(|event| event.action == "retry_effect")
        .map(|event| (event.outcome, event.details))
        .collect();
    assert_eq!(
        retries,
        [
            ("done".to_owned(), Some(json!({ "retried": false }))),
            ("done".to_owned(), Some(json!({ "retried": true }))),
        ]
    );
    runtime.close().await;
}

async fn doctor(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    let report = runtime.admin().context(ana()).doctor().await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        report.applied_migrations.last(),
        Some(&report.known_migration)
    );
    let setting = |name: &str| {
        report
            .settings
            .iter()
            .find(|(setting, _)| setting == name)
            .map(|(_, value)| value.clone())
    };
    // PostgreSQL has migrations 8 (lz4 for states), 9 (state notices for watchers) and 12
    // (a lock that never creates a row for a grouped call), which SQLite has no use for; the
    // MySQL store's schema is one migration, then the charts' migration 11 and the wake-up
    // bell's 13 (PostgreSQL notifies instead), numbered as on the other backends. Every
    // backend has 14, the messages' count of stalled passes, 15, the charts' tallies, and
    // 16, the trace context stored with messages, reminders and effects. The newest is the backend's newest file
    // in migrations/: a file the build does not apply fails here.
    let newest = *setup.backend().migrations().last().unwrap();
    assert!(newest >= 16, "{newest}");
    match setup.backend() {
        Backend::Sqlite => {
            assert_eq!(report.known_migration, newest);
            assert!(setting("sqlite_version").is_some());
            assert_eq!(report.backend, "sqlite");
            assert_eq!(setting("journal_mode").as_deref(), Some("wal"));
            assert_eq!(setting("synchronous").as_deref(), Some("full"));
            assert_eq!(report.clock_skew_ms, None);
        }
        Backend::Postgres => {
            assert_eq!(report.known_migration, newest);
            assert_eq!(report.backend, "postgres");
            assert_eq!(
                setting("default_transaction_isolation").as_deref(),
                Some("read committed")
            );
            assert!(report.clock_skew_ms.unwrap().abs() < 1000);
        }
        Backend::MariaDb => {
            assert_eq!(report.known_migration, newest);
            assert_eq!(report.backend, "mysql");
            assert!(setting("version").is_some());
            assert!(report.clock_skew_ms.unwrap().abs() < 1000);
        }
    }
    // The scratch actor is gone.
    let admin = runtime.admin().context(ana());
    assert!(admin.actor_types().await.unwrap().is_empty());
    runtime.close().await;
}

/// The overview's counts, busiest mailboxes, last hour and reminder lateness; one message by
/// id; an actor's recent messages, newest first.
async fn overview_and_messages(setup: Setup) {
    let runtime = setup.runtime(WITH_OPERATORS).await;
    let admin = runtime.admin().context(ana());
    let start = setup.clock.now();
    let desk = runtime.reference::<Desk>("d-1");
    desk.add(1).await.unwrap();
    desk.plan(5).await.unwrap();
    desk.set_broken(true).await.unwrap();
    desk.fragile("down".to_owned()).await.unwrap_err();
    for (id, queued) in [("d-2", 3), ("d-3", 1)] {
        for _ in 0..queued {
            runtime
                .reference::<Desk>(id)
                .enqueue()
                .add(1)
                .await
                .unwrap();
        }
    }
    setup.clock.advance(Duration::from_secs(10 * 60));

    assert!(
        runtime.admin().overview(10).await.is_err(),
        "denied without an operator"
    );
    let overview = admin.overview(10).await.unwrap();
    assert_eq!(overview.now, setup.clock.now());
    let busiest: Vec<(&str, i64)> = overview
        .busiest
        .iter()
        .map(|mailbox| (mailbox.actor_id.as_str(), mailbox.ready))
        .collect();
    assert_eq!(busiest, [("d-2", 3), ("d-3", 1)]);
    assert_eq!(
        overview.finished_last_hour,
        [("completed".to_owned(), 3), ("dead".to_owned(), 1)]
    );
    assert_eq!(
        overview.status.oldest_due_reminder_at,
        Some(start + TimeDelta::minutes(5)),
        "the ring is 5 minutes late"
    );
    assert_eq!(overview.actor_types.len(), 1);
    assert_eq!(overview.actor_types[0].ready_messages, 4);
    assert_eq!(admin.overview(1).await.unwrap().busiest.len(), 1, "top 1");

    let details = admin.inspect("Desk", "d-1").await.unwrap().unwrap();
    let recent: Vec<(&str, &str)> = details
        .recent_messages
        .iter()
        .map(|message| (message.operation.as_str(), message.status.as_str()))
        .collect();
    assert_eq!(
        recent,
        [
            ("fragile", "dead"),
            ("set_broken", "completed"),
            ("plan", "completed"),
            ("add", "completed"),
        ]
    );
    let dead = details.recent_messages[0].message_id;
    let message = admin.message(dead).await.unwrap().unwrap();
    assert_eq!(message.status, "dead");
    assert_eq!(message.last_error.as_deref(), Some("down"));
    let retried = admin.retry_dead_letter(dead).await.unwrap().id();
    assert_eq!(
        admin.message(dead).await.unwrap().unwrap().retried_as,
        Some(retried)
    );
    let retry = admin.message(retried).await.unwrap().unwrap();
    assert_eq!((retry.status.as_str(), retry.attempts), ("ready", 0));
    assert_eq!(admin.message(i64::MAX).await.unwrap(), None);

    setup.clock.advance(Duration::from_secs(2 * 3600));
    let later = admin.overview(10).await.unwrap();
    assert!(later.finished_last_hour.is_empty(), "{later:?}");
    // The newest row is the audit read itself; the one before it, the overview.
    let overview_row = &admin.audit_log(2).await.unwrap()[1];
    assert_eq!(overview_row.action, "overview");
    assert_eq!(overview_row.caller, Some(ana()));
    runtime.close().await;
}

/// A policy whose administration check panics.
const PANICKING: Administered = Administered(|_| panic!("the policy's directory lookup failed"));

/// Polls the inner future at most `left` times, then drops it where it stands (as a
/// `tokio::time::timeout`, a `select!` or a disconnected HTTP client would).
struct PollLimit<F: Future> {
    inner: Pin<Box<F>>,
    left: usize,
}

impl<F: Future> Future for PollLimit<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(value) => Poll::Ready(Some(value)),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn poll_limit<F: Future>(left: usize, inner: F) -> PollLimit<F> {
    PollLimit {
        inner: Box::pin(inner),
        left,
    }
}

/// One number read by the test's own pool.
async fn scalar(pool: &sqlx::AnyPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

/// Promise: every admin call that changes something is audited (who, what, when), and any
/// future may be dropped at any await. A retry of a dead letter whose future is dropped
/// after its change committed must not leave the change without its audit row.
#[tokio::test]
async fn a_dropped_retry_never_leaves_a_retried_dead_letter_without_its_audit_row() {
    let setup = Setup::new();
    let runtime = setup.runtime(AllowAll).await;
    let pool = setup.pool().await;
    let admin = runtime.admin().context(ana());
    let desk = runtime.reference::<Desk>("d1");
    desk.set_broken(true).await.unwrap();
    let mut unaudited = Vec::new();
    for polls in 1..=40 {
        assert!(desk.fragile(format!("broken {polls}")).await.is_err());
        let id = scalar(
            &pool,
            "SELECT MAX(id) FROM solid_messages WHERE status = 'dead' AND retried_as IS NULL",
        )
        .await;
        let _ = poll_limit(polls, admin.retry_dead_letter(id)).await;
        let retried = scalar(
            &pool,
            &format!("SELECT COUNT(*) FROM solid_messages WHERE id = {id} AND retried_as > 0"),
        )
        .await;
        let audited = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'retry_dead_letter' \
                 AND resource = 'message {id}'"
            ),
        )
        .await;
        if retried == 1 && audited == 0 {
            unaudited.push((polls, id));
        }
    }
    // The writer still works.
    assert_eq!(desk.add(1).await.unwrap(), 1);
    assert!(
        unaudited.is_empty(),
        "dead letters retried (committed) with no audit row, as (polls before the drop, \
         message id): {unaudited:?}"
    );
}

/// Promise: a change is never without its audit row: after a drop at any await, a paused
/// actor has its `pause` row (written before the pause acts; a row without a pause is a
/// call dropped before it acted).
#[tokio::test]
async fn a_dropped_pause_is_paused_and_audited_or_neither() {
    let setup = Setup::new();
    let runtime = setup.runtime(AllowAll).await;
    let pool = setup.pool().await;
    let admin = runtime.admin().context(ana());
    for polls in 1..=30 {
        let id = format!("p{polls}");
        let _ = poll_limit(polls, admin.pause("Desk", &id)).await;
        let paused = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_instances WHERE actor_id = '{id}' \
                 AND paused_at IS NOT NULL"
            ),
        )
        .await;
        let audited = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'pause' \
                 AND resource = 'Desk/{id}'"
            ),
        )
        .await;
        assert!(
            paused <= audited,
            "after {polls} polls: paused {paused}, rows {audited}"
        );
    }
    assert_eq!(runtime.reference::<Desk>("x").add(2).await.unwrap(), 2);
}

/// Promise: any future may be dropped at any await and nothing is left behind. The
/// doctor's scratch actor (`solid_objects.doctor`) must not outlive a doctor call that was
/// dropped half-way: it would show in every listing and `status` forever.
#[tokio::test]
async fn a_dropped_doctor_leaves_no_scratch_actor_behind() {
    let setup = Setup::new();
    let runtime = setup.runtime(AllowAll).await;
    let pool = setup.pool().await;
    let admin = runtime.admin().context(ana());
    let mut left_behind = Vec::new();
    for polls in 1..=40 {
        let _ = poll_limit(polls, admin.doctor()).await;
        let scratch = scalar(
            &pool,
            "SELECT COUNT(*) FROM solid_instances WHERE actor_type = 'solid_objects.doctor'",
        )
        .await;
        if scratch > 0 {
            left_behind.push((polls, scratch));
            sqlx::query("DELETE FROM solid_instances WHERE actor_type = 'solid_objects.doctor'")
                .execute(&pool)
                .await
                .unwrap();
        }
    }
    let types = admin.actor_types().await.unwrap();
    assert!(
        left_behind.is_empty(),
        "doctor scratch actors left behind (polls before the drop, rows): {left_behind:?}; \
         types now {types:?}"
    );
}

/// Promise: bad input gets a clear error and changes nothing. An empty or oversized actor
/// type is bad input, as an empty or oversized id is.
#[tokio::test]
async fn pausing_an_empty_or_oversized_actor_type_is_refused_and_changes_nothing() {
    let setup = Setup::new();
    let runtime = setup.runtime(AllowAll).await;
    let pool = setup.pool().await;
    let admin = runtime.admin().context(ana());
    let empty = admin.pause("", "d1").await;
    let huge_type = "T".repeat(1 << 20);
    let huge = admin.pause(&huge_type, "d1").await;
    let rows = scalar(&pool, "SELECT COUNT(*) FROM solid_instances").await;
    let longest = scalar(
        &pool,
        "SELECT COALESCE(MAX(length(actor_type)), 0) FROM solid_instances",
    )
    .await;
    assert!(
        empty.is_err() && huge.is_err() && rows == 0,
        "pause(\"\", \"d1\") = {empty:?}, pause(<1 MiB type>, \"d1\") = {:?}; solid_instances \
         now has {rows} rows, the longest actor_type {longest} bytes",
        huge.map_err(|e| e.to_string().chars().take(200).collect::<String>())
    );
}

/// Promise: a policy is user code; a panic in it denies the call, and the denial is
/// audited (expected to hold).
#[tokio::test]
async fn a_panicking_policy_denies_and_the_denial_is_audited() {
    let setup = Setup::new();
    let runtime = setup.runtime(PANICKING).await;
    let error = runtime
        .admin()
        .context(ana())
        .pause("Desk", "d1")
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::AdministrationDenied { .. }),
        "{error}"
    );
    runtime.close().await;
    let pool = setup.pool().await;
    let denied = scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_admin_events WHERE action = 'pause' AND outcome = 'denied'",
    )
    .await;
    assert_eq!(denied, 1);
    let paused = scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_instances WHERE paused_at IS NOT NULL",
    )
    .await;
    assert_eq!(paused, 0);
}

/// Promise: a redrive retries each dead letter once and terminates. With workers running,
/// the retries of a poison message die again (new dead letters, higher ids) while the
/// redrive is still paging forward by id: it must not pick those up and send them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redrive_with_workers_running_retries_only_the_dead_letters_that_were_there() {
    let setup = Setup::new();
    let runtime = setup.runtime(AllowAll).await;
    let desks: Vec<_> = (0..30)
        .map(|i| runtime.reference::<Desk>(&format!("poison-{i}")))
        .collect();
    for desk in &desks {
        desk.set_broken(true).await.unwrap();
    }
    for round in 0..10 {
        for desk in &desks {
            assert!(desk.fragile(format!("poison {round}")).await.is_err());
        }
    }
    let admin = runtime.admin().context(ana());
    let before = admin
        .dead_letters(&DeadLetterFilter::new().limit(1000))
        .await
        .unwrap()
        .len();
    assert_eq!(before, 300);
    let running = run_workers(&runtime);
    let redriven = tokio::time::timeout(
        Duration::from_secs(20),
        admin.redrive(
            &DeadLetterFilter::new()
                .actor_type("Desk")
                .operation("fragile"),
        ),
    )
    .await;
    runtime.shutdown();
    running.await.unwrap().unwrap();
    let pool = setup.pool().await;
    let retried = scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_messages WHERE retried_as > 0",
    )
    .await;
    let messages = scalar(
        &pool,
        "SELECT COUNT(*) FROM solid_messages WHERE operation = 'fragile'",
    )
    .await;
    let retried_by_redrive = redriven.map(|r| r.unwrap().retried).ok();
    assert!(
        retried_by_redrive == Some(300) && retried == 300,
        "one redrive of 300 dead letters: returned {retried_by_redrive:?} (None: still \
         running after 20 s); dead letters retried {retried}, fragile messages now {messages}"
    );
}
