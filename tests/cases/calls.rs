//! The runtime's own contract: authorisation, ids, the one-transaction fast path, failures,
//! bad stored rows, workers, limits.

use crate::support;

use std::time::Duration;

use serde_json::json;
use solid_objects::prelude::*;
use solid_objects::{Limits, MessageStatus, MAX_ACTOR_ID_BYTES};
use support::fixtures::{
    application_pool, on_application_pool, sqlite_harness, start_with_policy, started, started_on,
};
use support::journal::{Journal, JournalMessage, JournalQuery};
use support::operator::dead_letters;
use support::stored_rows::insert_ready_message;
use support::workers::{answered, run_workers};
use support::{count, execute, together, Harness};

/// Another actor type that claims the same stored name.
#[actor(name = "Journal")]
#[derive(Default)]
struct Impostor {}

#[actor]
impl Impostor {
    #[command]
    fn touch(&mut self) {}
}

#[tokio::test]
async fn without_a_policy_every_call_is_denied_and_nothing_is_written() {
    let harness = Harness::new();
    let runtime = harness.store().await.start().await.unwrap();
    let journal = runtime.reference::<Journal>("j-1");

    let denied = journal.record("first").await.unwrap_err();
    let Error::Unauthorized {
        operation, reason, ..
    } = &denied
    else {
        panic!("expected Unauthorized, got {denied:?}");
    };
    assert_eq!(operation, "record");
    assert!(reason.contains("Runtime::builder().policy(..)"), "{reason}");
    assert!(matches!(
        journal.entries().await,
        Err(Error::Unauthorized { .. })
    ));
    assert!(matches!(
        journal.snapshot().await,
        Err(Error::Unauthorized { .. })
    ));
    assert!(matches!(
        journal.enqueue().record("queued").await,
        Err(Error::Unauthorized { .. })
    ));
    assert!(matches!(
        journal.message_with_key("k").await,
        Err(Error::Unauthorized { .. })
    ));
    runtime.close().await;
    assert_eq!(count(&harness, "solid_messages").await, 0);
    assert_eq!(count(&harness, "solid_instances").await, 0);
}

/// Admits only callers whose context names a user, and never `record_then_panic`.
struct SignedIn;

impl solid_objects::Policy for SignedIn {
    fn authorize_message(
        &self,
        request: &solid_objects::policy::Request<'_>,
    ) -> Result<(), solid_objects::policy::Denied> {
        let signed_in = request.context.and_then(|c| c.get("user")).is_some();
        match (signed_in, request.operation) {
            (false, _) => Err(solid_objects::policy::Denied::new("sign in first")),
            (true, "record") if request.arguments["entry"] == "forbidden" => {
                Err(solid_objects::policy::Denied::new("not that entry"))
            }
            _ => Ok(()),
        }
    }

    fn authorize_query(
        &self,
        request: &solid_objects::policy::Request<'_>,
    ) -> Result<(), solid_objects::policy::Denied> {
        self.authorize_message(request)
    }
}

#[tokio::test]
async fn a_policy_sees_the_operation_its_arguments_and_the_callers_context() {
    let harness = Harness::new();
    let runtime = start_with_policy(&harness, SignedIn).await;
    let anonymous = runtime.reference::<Journal>("j-1");
    let ana = runtime
        .reference::<Journal>("j-1")
        .context(json!({ "user": "ana" }));

    assert!(matches!(
        anonymous.record("x").await,
        Err(Error::Unauthorized { .. })
    ));
    assert!(matches!(
        ana.record("forbidden").await,
        Err(Error::Unauthorized { .. })
    ));
    assert_eq!(ana.record("allowed").await.unwrap(), 1);
    assert_eq!(ana.entries().await.unwrap(), vec!["allowed"]);
    runtime.close().await;
}

/// Reads calls as the journal's typed messages and queries, never as operation names.
struct TypedJournalPolicy;

impl solid_objects::Policy for TypedJournalPolicy {
    fn authorize_message(
        &self,
        request: &solid_objects::policy::Request<'_>,
    ) -> Result<(), solid_objects::policy::Denied> {
        match request.message::<Journal>() {
            Some(JournalMessage::Record { entry }) if entry != "forbidden" => Ok(()),
            Some(other) => Err(solid_objects::policy::Denied::new(format!(
                "not {}",
                solid_objects::Operations::name(&other)
            ))),
            None => Err(solid_objects::policy::Denied::new("not a journal command")),
        }
    }

    fn authorize_query(
        &self,
        request: &solid_objects::policy::Request<'_>,
    ) -> Result<(), solid_objects::policy::Denied> {
        assert!(
            request.message::<Journal>().is_none(),
            "a query is not a command"
        );
        match request.query::<Journal>() {
            Some(JournalQuery::Entries {}) => Ok(()),
            Some(JournalQuery::EntryCountThenPanic {}) => Err(solid_objects::policy::Denied::new(
                "entry_count_then_panic is for the failure tests",
            )),
            None => Err(solid_objects::policy::Denied::new("not a journal query")),
        }
    }
}

#[tokio::test]
async fn a_policy_can_match_calls_as_the_actors_typed_messages_and_queries() {
    let harness = Harness::new();
    let runtime = start_with_policy(&harness, TypedJournalPolicy).await;
    let journal = runtime.reference::<Journal>("j-1");
    assert_eq!(journal.record("allowed").await.unwrap(), 1);
    assert_eq!(journal.entries().await.unwrap(), ["allowed"]);
    match journal.record("forbidden").await {
        Err(Error::Unauthorized { reason, .. }) => assert_eq!(reason, "not record"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    match journal.ping_in(5).await {
        Err(Error::Unauthorized { reason, .. }) => assert_eq!(reason, "not ping_in"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A snapshot is no query: the policy above does not allow it.
    assert!(matches!(
        journal.snapshot().await,
        Err(Error::Unauthorized { .. })
    ));
    runtime.close().await;
}

/// Lock the actor's row, read its mailbox's head (after the lock, so the read sees every
/// turn that committed before it), insert the message, write the state: as few statements
/// as the backend allows, in one transaction; a reminder the turn schedules is one more.
#[tokio::test]
async fn a_sync_command_on_a_warm_actor_is_one_transaction_of_few_statements() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("warm-up").await.unwrap();

    let before = runtime.stats();
    journal.record("measured").await.unwrap();
    let plain = runtime.stats();
    journal.ping_in(5).await.unwrap();
    let with_reminder = runtime.stats();

    let warm = harness.backend().warm_call_statements();
    assert_eq!(plain.transactions - before.transactions, 1);
    assert_eq!(plain.commits - before.commits, 1);
    assert_eq!(plain.statements - before.statements, warm);
    assert_eq!(with_reminder.transactions - plain.transactions, 1);
    assert_eq!(with_reminder.statements - plain.statements, warm + 1);
    runtime.close().await;
}

/// Unscheduling a reminder is one statement more than a plain turn, as scheduling one is:
/// the charts' tally of a reminder deleted while it was due costs no round trip of its own.
#[tokio::test]
async fn a_sync_command_that_unschedules_a_reminder_is_one_statement_more() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let journal = runtime.reference::<Journal>("j-1");
    journal.record("warm-up").await.unwrap();
    journal.ping_in(5).await.unwrap();

    let before = runtime.stats();
    journal.cancel_ping().await.unwrap();
    let after = runtime.stats();

    let warm = harness.backend().warm_call_statements();
    assert_eq!(after.transactions - before.transactions, 1);
    assert_eq!(after.statements - before.statements, warm + 1);
    runtime.close().await;
}

#[tokio::test]
async fn a_query_reads_in_order_and_leaves_no_message_row() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();
    let messages = count(&harness, "solid_messages").await;

    assert_eq!(journal.entries().await.unwrap(), vec!["one"]);

    assert_eq!(count(&harness, "solid_messages").await, messages);
    runtime.close().await;
}

#[tokio::test]
async fn a_panicking_query_fails_without_claiming_a_message_it_never_had() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();
    let messages = count(&harness, "solid_messages").await;

    let failed = journal.entry_count_then_panic().await.unwrap_err();

    assert!(
        matches!(failed, Error::HandlerFailed { retry_at: None, .. }),
        "{failed:?}"
    );
    let text = failed.to_string();
    assert!(text.contains("the query broke after 1 entries"), "{text}");
    assert!(
        !text.contains("dead letter"),
        "a query has no message: {text}"
    );
    assert_eq!(dead_letters(&runtime).await.len(), 0);
    assert_eq!(count(&harness, "solid_messages").await, messages);
    runtime.close().await;
}

#[tokio::test]
async fn a_snapshot_of_an_unknown_actor_is_its_default_state_and_creates_nothing() {
    let (harness, runtime) = started().await;

    let state = runtime
        .reference::<Journal>("never-called")
        .snapshot()
        .await
        .unwrap();

    assert!(state.entries.is_empty());
    assert_eq!(count(&harness, "solid_instances").await, 0);
    runtime.close().await;
}

/// A rejected call on an actor that never existed (an unauthenticated request to a random
/// id, say) leaves no rows behind: no actor row, and no message row unless its idempotency
/// key must answer a retry, which the retention then prunes; a message enqueued for such an
/// actor and rejected when it runs leaves no actor row either.
#[tokio::test]
async fn a_rejected_call_on_an_actor_that_never_existed_leaves_no_rows_but_its_keys() {
    let (harness, runtime) = started().await;
    let rejected = |answer: Result<usize, Error>| match answer {
        Err(Error::Rejected(rejection)) => rejection.code().to_owned(),
        other => panic!("the call should be rejected, got {other:?}"),
    };

    for n in 0..5 {
        let random = runtime.reference::<Journal>(format!("random-{n}"));
        assert_eq!(rejected(random.amend("x").await), "nothing_to_amend");
    }
    assert_eq!(count(&harness, "solid_instances").await, 0, "actor rows");
    assert_eq!(count(&harness, "solid_messages").await, 0, "message rows");

    let keyed = runtime.reference::<Journal>("keyed");
    let first = keyed.clone().idempotency_key("k-1").amend("x").await;
    let again = keyed.clone().idempotency_key("k-1").amend("x").await;
    assert_eq!(rejected(first), "nothing_to_amend");
    assert_eq!(
        rejected(again),
        "nothing_to_amend",
        "the key answers its rejection"
    );
    assert_eq!(count(&harness, "solid_instances").await, 0, "actor rows");
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'rejected'").await,
        1,
        "the keyed rejection is kept to answer its key"
    );

    let queued = runtime.reference::<Journal>("queued");
    queued.enqueue().amend("x").await.unwrap();
    runtime.testing().drain().await.unwrap();
    assert_eq!(count(&harness, "solid_instances").await, 0, "actor rows");

    // An actor that lived keeps its rejections' rows as any other finished message.
    let lived = runtime.reference::<Journal>("lived");
    lived.record("first").await.unwrap();
    lived
        .clone()
        .idempotency_key("k-2")
        .record("again")
        .await
        .unwrap();
    assert_eq!(count(&harness, "solid_instances").await, 1, "actor rows");

    harness.clock.advance(Duration::from_secs(400 * 24 * 3600));
    runtime.admin().prune().await.unwrap();
    assert_eq!(
        count(
            &harness,
            "solid_messages WHERE actor_id IN ('keyed', 'queued')"
        )
        .await,
        0,
        "the rejections of actors that never existed are pruned after the retention"
    );
    assert_eq!(
        count(&harness, "solid_messages WHERE actor_id = 'lived'").await,
        1,
        "a living actor's newest keyed message is kept to answer its key"
    );
    runtime.close().await;
}

#[tokio::test]
async fn ids_must_be_non_empty_and_at_most_255_bytes_and_are_bound_as_parameters() {
    let (harness, runtime) = started().await;

    for bad in [String::new(), "x".repeat(MAX_ACTOR_ID_BYTES + 1)] {
        let result = runtime.reference::<Journal>(bad).record("x").await;
        assert!(
            matches!(result, Err(Error::InvalidActorId { .. })),
            "{result:?}"
        );
    }
    assert_eq!(count(&harness, "solid_messages").await, 0);

    let hostile = "'); DROP TABLE solid_messages; -- ünïcödé";
    let longest = "é".repeat(MAX_ACTOR_ID_BYTES / 2);
    for id in [hostile.to_owned(), longest] {
        let journal = runtime.reference::<Journal>(id.clone());
        assert_eq!(journal.record("kept").await.unwrap(), 1);
        assert_eq!(journal.snapshot().await.unwrap().entries, vec!["kept"]);
    }
    assert_eq!(count(&harness, "solid_messages").await, 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_panicking_handler_keeps_none_of_its_changes_and_reports_the_failure() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("before").await.unwrap();

    let failure = journal.record_then_panic("lost").await.unwrap_err();

    let Error::HandlerFailed {
        error,
        attempts,
        retry_at,
        ..
    } = &failure
    else {
        panic!("expected HandlerFailed, got {failure:?}");
    };
    assert!(error.contains("the handler broke"), "{error}");
    assert_eq!(*attempts, 1);
    assert!(retry_at.is_some());
    assert_eq!(journal.snapshot().await.unwrap().entries, vec!["before"]);
    assert_eq!(count(&harness, "solid_reminders").await, 0);
    runtime.close().await;
}

#[tokio::test]
async fn a_call_behind_a_message_that_waits_for_a_retry_times_out_and_says_why() {
    let (_harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record_then_panic("lost").await.unwrap_err();

    let result = journal
        .clone()
        .timeout(Duration::from_millis(200))
        .record("behind")
        .await;

    let Err(
        error @ Error::SyncTimeout {
            message_id,
            request_id,
            waiting_on,
            ..
        },
    ) = &result
    else {
        panic!("expected SyncTimeout, got {result:?}");
    };
    assert_eq!(*message_id, Some(2));
    assert!(waiting_on.contains("message 1"), "{waiting_on}");
    assert!(journal.snapshot().await.unwrap().entries.is_empty());
    // Its message is committed: the error says it is still queued and names it, to wait for.
    let text = error.to_string();
    assert!(
        text.contains("message 2") && text.contains("still queued"),
        "{text}"
    );
    let request_id = request_id
        .as_deref()
        .expect("the timeout names the request")
        .as_str();
    assert_eq!(error.queued_request_id(), Some(request_id));
    let queued = runtime.message(request_id).await.unwrap().unwrap();
    assert_eq!(queued.id(), 2);
    runtime.close().await;
}

#[tokio::test]
async fn state_that_no_longer_deserialises_is_a_clear_error_and_changes_nothing() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();
    execute(
        &harness,
        r#"UPDATE solid_instances SET state = '{"entries": 42}'"#,
    )
    .await;
    let messages = count(&harness, "solid_messages").await;

    let result = journal.record("two").await;

    assert!(
        matches!(&result, Err(Error::Decode { what: "state", .. })),
        "{result:?}"
    );
    assert_eq!(count(&harness, "solid_messages").await, messages);
    runtime.close().await;
}

#[tokio::test]
async fn an_unknown_operation_in_a_stored_row_is_a_clear_error_and_is_left_alone() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();
    insert_ready_message(&harness, "Journal", "j-1", "vanished", "{}", "r-vanished").await;

    let result = journal
        .clone()
        .timeout(Duration::from_secs(1))
        .record("two")
        .await;

    // The call's own message is committed behind it: the error says so and names it.
    let Err(Error::Queued {
        message_id: 3,
        request_id,
        reason,
        ..
    }) = &result
    else {
        panic!("expected the call's message queued behind the unknown one, got {result:?}");
    };
    assert!(
        matches!(&**reason, Error::UnknownOperation { operation, message_id: 2, .. } if operation == "vanished"),
        "{reason:?}"
    );
    assert_eq!(journal.snapshot().await.unwrap().entries, vec!["one"]);
    let queued = runtime.message(request_id).await.unwrap().unwrap();
    assert!(matches!(
        queued.status().await.unwrap(),
        MessageStatus::Ready { attempts: 0, .. }
    ));
    runtime.close().await;
}

#[tokio::test]
async fn a_message_for_an_actor_type_the_runtime_does_not_know_stays_queued() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();
    insert_ready_message(&harness, "Ghost", "g-1", "haunt", "{}", "r-ghost").await;

    assert_eq!(runtime.testing().drain().await.unwrap().turns, 0);
    assert_eq!(
        count(&harness, "solid_messages WHERE status = 'ready'").await,
        1
    );
    runtime.close().await;
}

#[tokio::test]
async fn two_actor_types_with_one_stored_name_are_refused() {
    let (_harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.record("one").await.unwrap();

    let result = runtime.reference::<Impostor>("j-1").touch().await;

    assert!(
        matches!(&result, Err(Error::DuplicateActorName { name }) if name == "Journal"),
        "{result:?}"
    );
    runtime.close().await;
}

#[tokio::test]
async fn arguments_over_the_limit_are_refused_before_anything_is_written() {
    let harness = Harness::new();
    let mut limits = Limits::default();
    limits.max_arguments_bytes = 64;
    let runtime = harness
        .store()
        .await
        .policy(AllowAll)
        .limits(limits)
        .start()
        .await
        .unwrap();

    let result = runtime
        .reference::<Journal>("j-1")
        .record("x".repeat(100))
        .await;

    assert!(
        matches!(
            &result,
            Err(Error::PayloadTooLarge {
                what: "arguments",
                limit: 64,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(count(&harness, "solid_messages").await, 0);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_actors_run_concurrently_and_each_keeps_its_own_order() {
    let (_harness, runtime) = started().await;

    let lengths = together(40, |call| {
        let journal = runtime.reference::<Journal>(format!("j-{}", call % 4));
        async move { journal.record(format!("entry-{call}")).await.unwrap() }
    })
    .await;

    for actor in 0..4 {
        let mut returned: Vec<usize> = lengths.iter().skip(actor).step_by(4).copied().collect();
        returned.sort_unstable();
        assert_eq!(returned, (1..=10).collect::<Vec<_>>());
        let journal = runtime.reference::<Journal>(format!("j-{actor}"));
        assert_eq!(journal.snapshot().await.unwrap().entries.len(), 10);
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_fire_due_reminders_and_return_on_shutdown() {
    let (harness, runtime, journal) = started_on::<Journal>("j-1").await;
    journal.ping_in(10).await.unwrap();
    let worker = run_workers(&runtime);

    harness.advance_minutes(10);
    let rung = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if journal.snapshot().await.unwrap().pings == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;

    assert!(rung.is_ok(), "the worker did not fire the reminder");
    runtime.shutdown();
    worker.await.unwrap().unwrap();
    assert_eq!(count(&harness, "solid_reminders").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_leave_an_undecodable_mailbox_alone_and_serve_the_other_actors() {
    let (harness, runtime, journal) = started_on::<Journal>("broken").await;
    journal.record("one").await.unwrap();
    insert_ready_message(
        &harness,
        "Journal",
        "broken",
        "vanished",
        "{}",
        "r-vanished",
    )
    .await;
    let healthy = runtime.reference::<Journal>("healthy");
    let queued = healthy.enqueue().record("served").await.unwrap();

    let worker = run_workers(&runtime);
    let served = answered(&queued, Duration::from_secs(10)).await;
    let entries = healthy.snapshot().await.unwrap().entries;
    runtime.shutdown();
    worker.await.unwrap().unwrap();

    assert!(served, "the healthy actor was not served");
    assert_eq!(entries, ["served"]);
    assert_eq!(
        count(
            &harness,
            "solid_messages WHERE actor_id = 'broken' AND status = 'ready'"
        )
        .await,
        1
    );
}

/// An application that already has a SQLite pool hands it over: the runtime's tables are
/// created in that database, and its turns and reads run on the pool's connections.
#[tokio::test]
async fn a_runtime_on_the_applications_own_sqlite_pool() {
    let Some(harness) = sqlite_harness("the application's own pool is a SQLite pool") else {
        return;
    };
    let pool = application_pool(&harness, 1, None).await;
    let builder = on_application_pool(&harness, pool.clone());
    let runtime = builder.start().await.unwrap();

    let journal = runtime.reference::<Journal>("j-1");
    assert_eq!(journal.record("one").await.unwrap(), 1);
    assert_eq!(journal.entries().await.unwrap(), ["one"]);
    runtime.close().await;

    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM solid_messages")
        .fetch_one(&pool)
        .await
        .expect("closing the runtime leaves the application's pool open");
    assert_eq!(stored, 1);
}

#[tokio::test]
async fn the_runtime_reads_its_own_clock_as_handlers_do() {
    let (harness, runtime) = started().await;
    assert_eq!(runtime.now(), harness.clock.now());
    harness.advance_minutes(90);
    assert_eq!(
        runtime.now(),
        harness.clock.now(),
        "the runtime's now moves with its manual clock, not the system's"
    );

    let journal = runtime.reference::<Journal>("j-1");
    journal.ping_in(5).await.unwrap();
    let reminders = journal.reminders().await.unwrap();
    assert_eq!(
        reminders[0].due_at,
        runtime.now() + TimeDelta::minutes(5),
        "a handler's turn.now() is the runtime's now"
    );
    runtime.close().await;
}
