//! Durable async delivery: retries with backoff, dead letters, idempotency keys, limits,
//! retention, and application writes that roll back with the turn.

use crate::support;

use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::{MessageStatus, MAX_ACTOR_ID_BYTES};
use support::fixtures::{started, started_on};
use support::journal::{Journal, JournalMessage, JournalRef};
use support::operator::{dead_letters, prune};
use support::{count, execute, rejection_code, Harness};

/// An actor that gives up after two attempts.
#[actor(max_attempts = 2)]
#[derive(Default)]
struct Impatient {}

#[actor]
impl Impatient {
    #[command]
    fn fail(&mut self) -> Result<(), Failure> {
        Err(Failure::retryable("no"))
    }
}

async fn ready_attempts(message: &MessageRef<usize>) -> (i64, chrono::DateTime<chrono::Utc>) {
    match message.status().await.unwrap() {
        MessageStatus::Ready {
            attempts,
            available_at,
            ..
        } => (attempts, available_at),
        other => panic!("expected a ready message, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_that_fails_twice_holds_back_later_ones_then_all_run_in_order() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    let start = harness.clock.now();
    let flaky = journal.enqueue().flaky("a", 2).await.unwrap();
    let b = journal.enqueue().record("b").await.unwrap();
    journal.enqueue().record("c").await.unwrap();

    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    let (attempts, retry_at) = ready_attempts(&flaky).await;
    assert_eq!(attempts, 1);
    assert_eq!((retry_at - start).num_seconds(), 1);
    assert_eq!(
        b.result().await.unwrap(),
        None,
        "b waits behind the failed message"
    );
    assert!(journal.snapshot().await.unwrap().entries.is_empty());

    harness.clock.advance(Duration::from_secs(1));
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    let (attempts, retry_at) = ready_attempts(&flaky).await;
    assert_eq!(attempts, 2);
    assert_eq!((retry_at - start).num_seconds(), 1 + 2);
    assert!(journal.snapshot().await.unwrap().entries.is_empty());

    harness.clock.advance(Duration::from_secs(2));
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 3);
    assert_eq!(flaky.result().await.unwrap(), Some(1));
    assert_eq!(b.result().await.unwrap(), Some(2));
    assert_eq!(journal.entries().await.unwrap(), ["a", "b", "c"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_sync_call_whose_handler_fails_names_its_queued_message_to_wait_for() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;

    // The failed attempt is committed with the message, which is retried later: the caller
    // is told which message to wait for, since calling again would record it twice.
    let failed = journal.flaky("once".to_owned(), 1).await.unwrap_err();
    let text = failed.to_string();
    assert!(
        text.contains("retried at") && text.contains("do not call again"),
        "{text}"
    );
    let Error::HandlerFailed {
        retry_at: Some(_),
        request_id: Some(request_id),
        ..
    } = &failed
    else {
        panic!("expected a failed attempt to retry, got {failed:?}");
    };
    assert!(text.contains(request_id.as_str()), "{text}");
    assert_eq!(failed.queued_request_id(), Some(request_id.as_str()));
    let queued = support::queued_message::<usize>(&runtime, request_id).await;
    assert_eq!(ready_attempts(&queued).await.0, 1);

    harness.clock.advance(Duration::from_secs(60));
    runtime.testing().drain().await.unwrap();
    assert_eq!(queued.result().await.unwrap(), Some(1));
    assert_eq!(journal.entries().await.unwrap(), ["once"], "recorded once");

    // A permanent failure names its message too, now a dead letter.
    let dead = journal.invalid().await.unwrap_err();
    assert!(dead.to_string().contains("is now a dead letter"), "{dead}");
    assert_eq!(dead.queued_request_id(), None, "nothing left to wait for");
    runtime.close().await;
}

#[tokio::test]
async fn a_message_that_always_fails_becomes_a_dead_letter_after_five_attempts() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    journal.set_broken(true).await.unwrap();
    let fragile = journal.enqueue().fragile("x").await.unwrap();
    let after = journal.enqueue().record("after").await.unwrap();

    for attempt in 1..=5 {
        runtime.testing().drain().await.unwrap();
        harness.clock.advance(Duration::from_secs(60));
        let attempts = match fragile.status().await.unwrap() {
            MessageStatus::Ready { attempts, .. } | MessageStatus::Dead { attempts, .. } => {
                attempts
            }
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(attempts, attempt);
    }
    runtime.testing().drain().await.unwrap();

    assert!(matches!(
        fragile.status().await.unwrap(),
        MessageStatus::Dead { attempts: 5, ref error } if error == "the log is broken"
    ));
    assert!(matches!(
        fragile.result().await,
        Err(Error::DeadLetter { attempts: 5, .. })
    ));
    assert_eq!(
        after.result().await.unwrap(),
        Some(1),
        "later messages ran on"
    );
    let dead = dead_letters(&runtime).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message_id, fragile.id());
    assert_eq!(dead[0].operation, "fragile");
    assert_eq!(dead[0].attempts, 5);

    journal.set_broken(false).await.unwrap();
    let retried = runtime
        .admin()
        .retry_dead_letter(fragile.id())
        .await
        .unwrap();
    let again = runtime
        .admin()
        .retry_dead_letter(fragile.id())
        .await
        .unwrap();
    assert_eq!(
        retried.id(),
        again.id(),
        "retrying twice enqueues one message"
    );
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    assert_eq!(journal.entries().await.unwrap(), ["after", "x"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_drain_reports_each_failed_attempt_and_each_dead_letter_it_ran() {
    let (harness, runtime, impatient) = started_on::<Impatient>("i").await;
    let failing = impatient.enqueue().fail().await.unwrap();
    let journal = runtime.reference::<Journal>("w");
    journal.enqueue().record("fine").await.unwrap();

    let first = runtime.testing().drain().await.unwrap();
    assert_eq!((first.turns, first.completed), (2, 1), "{first:?}");
    assert!(!first.is_clean());
    assert!(first.dead.is_empty(), "{first:?}");
    assert_eq!(first.failed.len(), 1, "{first:?}");
    let failed = &first.failed[0];
    assert_eq!(
        (
            failed.actor_type.as_str(),
            failed.actor_id.as_str(),
            failed.operation.as_str(),
            failed.message_id,
            failed.attempts,
            failed.error.as_str()
        ),
        ("Impatient", "i", "fail", failing.id(), 1, "no")
    );

    harness.clock.advance(Duration::from_secs(60));
    let second = runtime.testing().drain().await.unwrap();
    assert_eq!((second.turns, second.completed), (1, 0));
    assert!(second.failed.is_empty(), "{second:?}");
    assert_eq!(
        second.dead.len(),
        1,
        "the last attempt made it a dead letter"
    );
    assert_eq!(
        (second.dead[0].message_id, second.dead[0].attempts),
        (failing.id(), 2)
    );
    assert!(runtime.testing().drain().await.unwrap().is_clean());
    runtime.close().await;
}

#[tokio::test]
async fn a_permanent_failure_is_dead_at_once_and_max_attempts_can_be_set_per_actor() {
    let (harness, runtime) = started().await;

    let permanent = runtime.reference::<Journal>("w").invalid().await;
    assert!(
        matches!(
            &permanent,
            Err(Error::HandlerFailed {
                attempts: 1,
                retry_at: None,
                ..
            })
        ),
        "{permanent:?}"
    );

    let impatient = runtime.reference::<Impatient>("i");
    let first = impatient.fail().await;
    assert!(
        matches!(
            &first,
            Err(Error::HandlerFailed {
                retry_at: Some(_),
                ..
            })
        ),
        "{first:?}"
    );
    harness.clock.advance(Duration::from_secs(1));
    runtime.testing().drain().await.unwrap();
    assert_eq!(dead_letters(&runtime).await.len(), 2);
    runtime.close().await;
}

#[tokio::test]
async fn a_rejection_code_that_is_not_snake_case_is_dead_at_once() {
    let (_harness, runtime, journal) = started_on::<Journal>("w").await;

    let failed = journal.reject_with("Not Snake".to_owned()).await;
    match &failed {
        Err(Error::HandlerFailed {
            attempts: 1,
            retry_at: None,
            error,
            ..
        }) => assert!(error.contains("must be snake_case"), "{error}"),
        other => panic!("a code that can never pass is a dead letter at once, not {other:?}"),
    }
    let dead = dead_letters(&runtime).await;
    assert_eq!(dead.len(), 1, "dead after one attempt, not retried");

    // Enqueued, the worker's first attempt is its last too.
    let queued = journal
        .enqueue()
        .reject_with("Also-Not".to_owned())
        .await
        .unwrap();
    runtime.testing().drain().await.unwrap();
    match queued.status().await.unwrap() {
        MessageStatus::Dead { attempts: 1, error } => {
            assert!(error.contains("\"Also-Not\""), "{error}");
        }
        other => panic!("expected a dead letter after one attempt, got {other:?}"),
    }

    // A snake_case code is an ordinary rejection.
    let rejected = journal.reject_with("refused".to_owned()).await;
    assert_eq!(rejection_code(rejected), "refused");
    runtime.close().await;
}

#[tokio::test]
async fn an_idempotency_key_with_other_arguments_is_a_conflict_and_writes_nothing() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    journal
        .enqueue()
        .idempotency_key("k")
        .record("one")
        .await
        .unwrap();
    let before = count(&harness, "solid_messages").await;

    let conflict = journal.enqueue().idempotency_key("k").record("two").await;

    assert!(
        matches!(&conflict, Err(Error::IdempotencyConflict { key, .. }) if key == "k"),
        "{conflict:?}"
    );
    assert_eq!(count(&harness, "solid_messages").await, before);
    runtime.close().await;
}

#[tokio::test]
async fn a_sync_call_with_a_used_key_answers_without_running_again() {
    let (_harness, runtime, journal) = started_on::<Journal>("w").await;

    let first = journal
        .clone()
        .idempotency_key("k")
        .record("once")
        .await
        .unwrap();
    let retry = journal
        .clone()
        .idempotency_key("k")
        .record("once")
        .await
        .unwrap();

    assert_eq!((first, retry), (1, 1));
    assert_eq!(journal.entries().await.unwrap(), ["once"]);
    let found = journal.message_with_key("k").await.unwrap().expect("kept");
    assert_eq!(found.typed::<usize>().result().await.unwrap(), Some(1));
    let by_request = runtime
        .message(found_request_id(&journal).await.as_str())
        .await
        .unwrap();
    assert!(by_request.is_some());
    runtime.close().await;
}

async fn found_request_id(journal: &JournalRef) -> String {
    let message = journal.message_with_key("k").await.unwrap().unwrap();
    message.request_id().to_owned()
}

#[tokio::test]
async fn a_query_sees_every_earlier_enqueued_message_applied() {
    let (_harness, runtime, journal) = started_on::<Journal>("w").await;
    for label in ["a", "b", "c"] {
        journal.enqueue().record(label).await.unwrap();
    }

    assert_eq!(journal.entries().await.unwrap(), ["a", "b", "c"]);
    runtime.close().await;
}

#[tokio::test]
async fn a_delayed_message_waits_for_its_time() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    let later = journal
        .enqueue()
        .delay(Duration::from_secs(30))
        .record("later")
        .await
        .unwrap();

    assert_eq!(runtime.testing().drain().await.unwrap().turns, 0);
    harness.clock.advance(Duration::from_secs(30));
    assert_eq!(runtime.testing().drain().await.unwrap().turns, 1);
    assert_eq!(later.result().await.unwrap(), Some(1));
    runtime.close().await;
}

#[tokio::test]
async fn arguments_over_one_mebibyte_are_refused_and_nothing_is_written() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    journal.record("small").await.unwrap();
    let messages = count(&harness, "solid_messages").await;

    let huge = "x".repeat(1 << 20);
    let enqueued = journal.enqueue().record(huge.clone()).await;
    let called = journal.record(huge).await;

    for result in [enqueued.map(|_| ()), called.map(|_| ())] {
        assert!(
            matches!(
                &result,
                Err(Error::PayloadTooLarge {
                    what: "arguments",
                    ..
                })
            ),
            "{result:?}"
        );
    }
    assert_eq!(count(&harness, "solid_messages").await, messages);
    assert_eq!(journal.entries().await.unwrap(), ["small"]);
    runtime.close().await;
}

#[tokio::test]
async fn the_10001st_unfinished_message_is_refused_and_nothing_is_written() {
    let (harness, runtime, journal) = started_on::<Journal>("full").await;
    journal.record("first").await.unwrap();
    let queued: Vec<String> = (2..=10_001)
        .map(|i| {
            format!(
                "('Journal', 'full', 'record', '{{\"entry\":\"queued\"}}', 'r-{i}', 'ready', \
                 1, 9223372036854775807, 0)"
            )
        })
        .collect();
    execute(
        &harness,
        &format!(
            "INSERT INTO solid_messages (actor_type, actor_id, operation, arguments,
                 request_id, status, attempts, available_at, created_at)
             VALUES {}",
            queued.join(", ")
        ),
    )
    .await;
    let messages = count(&harness, "solid_messages").await;
    assert_eq!(messages, 10_001);

    let enqueued = journal.enqueue().record("one too many").await;
    let called = journal.record("one too many").await;

    for result in [enqueued.map(|_| ()), called.map(|_| ())] {
        assert!(
            matches!(&result, Err(Error::MailboxFull { limit: 10_000, .. })),
            "{result:?}"
        );
    }
    assert_eq!(count(&harness, "solid_messages").await, messages);
    runtime.close().await;
}

#[tokio::test]
async fn retention_prunes_old_finished_messages_but_keeps_recent_keys_and_unfinished_work() {
    let (harness, runtime, journal) = started_on::<Journal>("w").await;
    for entry in 0..70 {
        journal
            .clone()
            .idempotency_key(format!("k-{entry}"))
            .record(format!("e-{entry}"))
            .await
            .unwrap();
    }
    for entry in 0..5 {
        journal.record(format!("unkeyed-{entry}")).await.unwrap();
    }
    let waiting = journal
        .enqueue()
        .available_at(harness.clock.now() + chrono::TimeDelta::days(60))
        .record("future")
        .await
        .unwrap();

    harness.advance_minutes(31 * 24 * 60);
    let pruned = prune(&runtime).await;

    assert_eq!(
        pruned,
        5 + 6,
        "the unkeyed and the six oldest keyed messages"
    );
    assert_eq!(count(&harness, "solid_messages").await, 64 + 1);
    assert!(journal.message_with_key("k-69").await.unwrap().is_some());
    assert!(journal.message_with_key("k-5").await.unwrap().is_none());
    assert!(matches!(
        waiting.status().await.unwrap(),
        MessageStatus::Ready { .. }
    ));
    let answered = journal
        .clone()
        .idempotency_key("k-69")
        .record("e-69")
        .await
        .unwrap();
    assert_eq!(answered, 70, "a kept key answers with the stored result");
    runtime.close().await;
}

/// A create endpoint's retries under one idempotency key, sent together, make one actor that
/// runs its first command once, and every retry hears that answer; the same key from
/// another scope (a tenant, a caller) makes another actor; the same key with other
/// arguments is a conflict, not a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_under_one_key_makes_one_actor_per_scope_whoever_retries() {
    let (harness, runtime) = started().await;
    let answers = support::together(6, |_| {
        let created = runtime.reference_for_key::<Journal>("tenant-1", "create-1");
        async move {
            (
                created.id().to_owned(),
                created.record("order".to_owned()).await,
            )
        }
    })
    .await;
    let id = answers[0].0.clone();
    for (answered_id, answer) in &answers {
        assert_eq!(
            answered_id, &id,
            "every retry names the first request's actor"
        );
        assert_eq!(
            answer.as_ref().ok(),
            Some(&1),
            "every retry hears the one run's answer"
        );
    }
    let journal = runtime.reference::<Journal>(id.clone());
    assert_eq!(journal.snapshot().await.unwrap().entries, ["order"]);
    assert_eq!(
        count(&harness, "solid_messages").await,
        1,
        "one message for six requests"
    );

    let other = runtime.reference_for_key::<Journal>("tenant-2", "create-1");
    assert_ne!(other.id(), id, "another scope's key of the same text");
    assert_eq!(other.record("order".to_owned()).await.unwrap(), 1);

    let changed = runtime
        .reference_for_key::<Journal>("tenant-1", "create-1")
        .record("another order".to_owned())
        .await;
    assert!(
        matches!(changed, Err(Error::IdempotencyConflict { .. })),
        "the same key with other arguments: {changed:?}"
    );
    assert_eq!(journal.snapshot().await.unwrap().entries, ["order"]);
    runtime.close().await;
}

#[tokio::test]
async fn application_rows_written_before_a_rejection_are_rolled_back() {
    let harness = Harness::new();
    execute(&harness, "CREATE TABLE notes (label TEXT NOT NULL)").await;
    let runtime = harness.start().await;
    let journal = runtime.reference::<Journal>("w");

    let result = journal.note_then_reject("draft").await;

    assert_eq!(rejection_code(result), "changed_my_mind");
    assert_eq!(count(&harness, "notes").await, 0);
    assert!(journal.entries().await.unwrap().is_empty());
    // The actor never lived and the call had no key: the rejection keeps no row either.
    assert_eq!(count(&harness, "solid_messages").await, 0);
    assert_eq!(count(&harness, "solid_instances").await, 0);
    runtime.close().await;
}

/// A handler's own transaction on the turn's connection is a savepoint of the turn's: its
/// commit keeps its rows only if the turn commits. Each turn after the first begins on the
/// connection the one before left (parked), as a busy runtime's turns do. On a server only:
/// SQLite's writer begins its transactions itself, and sqlx there refuses a handler's own
/// `begin()` ("cannot start a transaction within a transaction").
#[tokio::test]
async fn a_handlers_own_transaction_commits_only_with_its_turn() {
    let harness = Harness::new();
    if !harness.backend().is_server() {
        return;
    }
    execute(&harness, "CREATE TABLE notes (label TEXT NOT NULL)").await;
    let runtime = harness.start().await;
    let journal = runtime.reference::<Journal>("w");

    for round in 0..4 {
        journal
            .note_in_own_transaction(format!("kept-{round}"), false)
            .await
            .unwrap();
        let rejected = journal
            .note_in_own_transaction(format!("withdrawn-{round}"), true)
            .await;
        assert_eq!(rejection_code(rejected), "changed_my_mind");
    }

    assert_eq!(count(&harness, "notes").await, 4);
    assert_eq!(
        count(&harness, "notes WHERE label LIKE 'withdrawn-%'").await,
        0
    );
    assert_eq!(
        journal.entries().await.unwrap(),
        ["kept-0", "kept-1", "kept-2", "kept-3"]
    );
    runtime.close().await;
}

#[tokio::test]
async fn an_id_over_the_limit_is_refused_for_enqueues_too() {
    let (_harness, runtime) = started().await;

    let result = runtime
        .reference::<Journal>("x".repeat(MAX_ACTOR_ID_BYTES + 1))
        .enqueue()
        .record("x")
        .await;

    assert!(matches!(result, Err(Error::InvalidActorId { .. })));
    runtime.close().await;
}

/// A call whose message ran, but whose result does not read back as the type the caller
/// asked for (a result stored by an older build under the caller's idempotency key, or a
/// `Reference::call` of the wrong type), must not tell the caller to "retry" without naming
/// the message: the message is committed and completed, so a retry under a new key runs it
/// twice. The error names its request id, or says that the message ran.
#[tokio::test]
async fn a_call_whose_result_does_not_decode_names_its_completed_message() {
    let (_harness, runtime, journal) = started_on::<Journal>("w").await;

    let error = journal
        .as_reference()
        .clone()
        .idempotency_key("k-decode")
        .call::<String>(JournalMessage::Record {
            entry: "once".to_owned(),
        })
        .await
        .expect_err("a usize does not read back as a String");
    let text = error.to_string();
    let message = journal
        .message_with_key("k-decode")
        .await
        .unwrap()
        .expect("the call's message was committed");
    assert!(
        matches!(message.status().await.unwrap(), MessageStatus::Completed),
        "the message ran"
    );
    assert_eq!(journal.entries().await.unwrap(), ["once"]);
    assert!(
        text.contains(message.request_id()) || !text.contains("retry"),
        "the error tells the caller to retry a call whose message ran, naming no message: {text}"
    );
    runtime.close().await;
}

/// A keyed call whose message is already queued under its key (an earlier call that timed
/// out, or an enqueue) finds that message, and is then told of the pause as `Queued` naming
/// it, as it is of a state from a newer build: its message is committed. It hears a bare
/// `Paused` ("try again after it is resumed"), which names no message.
#[tokio::test]
async fn a_keyed_call_on_a_paused_actor_whose_message_is_queued_names_it() {
    let (_harness, runtime, journal) = started_on::<Journal>("w").await;
    let queued = journal
        .enqueue()
        .idempotency_key("k-paused")
        .record("once")
        .await
        .unwrap();
    assert!(runtime.admin().pause("Journal", "w").await.unwrap());

    let error = journal
        .as_reference()
        .clone()
        .idempotency_key("k-paused")
        .call::<usize>(JournalMessage::Record {
            entry: "once".to_owned(),
        })
        .await
        .expect_err("the actor is paused");

    runtime.close().await;
    assert_eq!(
        error.queued_request_id(),
        Some(queued.request_id()),
        "the call's message is queued under its key, but the error names none: {error}"
    );
}
