//! A turn whose `COMMIT` answer is lost with its connection is resolved, not guessed, on each
//! server backend: the runtime looks its message up by request id; committed, the caller
//! gets the stored outcome; not there, the turn runs again. Never run twice, never reported
//! failed when it committed, and no attempt counted for a failure that was not the turn's.
//!
//! A proxy on loopback (tests/support/commit_cutter.rs) stands between the runtime and the
//! server and cuts one `COMMIT` out of the conversation: after the server ran it, before the
//! answer (the answer is lost), or before the server got it (nothing was committed). Each
//! case arms the proxy for the one `COMMIT` it is about; the runtimes here run no workers,
//! so no other transaction commits meanwhile.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use solid_objects::prelude::*;
use solid_objects::{MessageRef, MessageStatus};

use crate::backend;
use crate::support::actors::Tally;
use crate::support::commit_cutter::{CommitCutter, Cut};
use crate::support::workers::within;
use crate::support::{eventually, numbered_placeholders};

/// An actor's messages as the database holds them.
#[derive(Debug, PartialEq, Eq)]
struct Mailbox {
    messages: i64,
    completed: i64,
    /// The most attempts any of them counts.
    most_attempts: i64,
    /// How many carry an error of a failed attempt.
    errors: i64,
}

/// What one message that completed on its first attempt leaves.
const RAN_ONCE: Mailbox = Mailbox {
    messages: 1,
    completed: 1,
    most_attempts: 1,
    errors: 0,
};

/// What two messages that completed on their first attempt leave.
const BOTH_RAN_ONCE: Mailbox = Mailbox {
    messages: 2,
    completed: 2,
    ..RAN_ONCE
};

/// A runtime whose every connection passes through a commit-cutting proxy, on a fresh
/// database of the binary's server, and a connection of the test's own that does not.
struct BehindTheCutter {
    runtime: Runtime,
    cutter: Arc<CommitCutter>,
    observer: backend::Observer,
    clock: ManualClock,
    on_postgres: bool,
    /// What keeps the database alive while the test runs.
    _server: Box<dyn std::any::Any>,
}

impl BehindTheCutter {
    /// The runtime and the proxy; `None` (the test skips) on a machine without the server,
    /// outside CI.
    async fn start() -> Option<Self> {
        let (server, url) = backend::database().await?;
        let (proxied, cutter) = CommitCutter::in_front_of(&url).await;
        let clock = ManualClock::starting_now();
        let runtime = backend::runtime_on(&proxied, 4, &clock).await;
        Some(Self {
            runtime,
            cutter,
            observer: backend::observer(&url).await,
            clock,
            on_postgres: url.starts_with("postgres"),
            _server: Box::new(server),
        })
    }

    /// The tally `id`, whose calls wait ten seconds at most.
    fn tally(&self, id: &str) -> <Tally as solid_objects::Addressable>::Reference {
        self.runtime
            .reference::<Tally>(id)
            .timeout(Duration::from_secs(10))
    }

    /// The actor's passes (its count), read through the runtime.
    async fn passes(&self, id: &str) -> i64 {
        within(30, "a snapshot", self.tally(id).snapshot())
            .await
            .unwrap()
            .count
    }

    /// `sql`, with `?` placeholders, as the binary's server spells it.
    fn sql(&self, sql: &str) -> String {
        if self.on_postgres {
            numbered_placeholders(sql)
        } else {
            sql.to_owned()
        }
    }

    /// The actor's messages, read by the test's own connection.
    async fn mailbox(&self, actor_id: &str) -> Mailbox {
        let sql = self.sql(
            "SELECT COUNT(*), COUNT(CASE WHEN status = 'completed' THEN 1 END),
                    COALESCE(MAX(attempts), 0), COUNT(last_error)
             FROM solid_messages WHERE actor_id = ?",
        );
        let (messages, completed, most_attempts, errors) =
            sqlx::query_as::<_, (i64, i64, i64, i64)>(&sql)
                .bind(actor_id)
                .fetch_one(&self.observer)
                .await
                .unwrap();
        Mailbox {
            messages,
            completed,
            most_attempts,
            errors,
        }
    }

    /// The request ids of the actor's messages, in order.
    async fn request_ids(&self, actor_id: &str) -> Vec<String> {
        let column = if self.on_postgres {
            "request_id"
        } else {
            "CONVERT(request_id USING utf8mb4)"
        };
        let sql = self.sql(&format!(
            "SELECT {column} FROM solid_messages WHERE actor_id = ? ORDER BY id"
        ));
        sqlx::query_scalar(&sql)
            .bind(actor_id)
            .fetch_all(&self.observer)
            .await
            .unwrap()
    }

    /// Enqueues a pass of the actor `id`.
    async fn enqueue(&self, id: &str) -> MessageRef<i64> {
        within(30, "the enqueue", self.tally(id).enqueue().add())
            .await
            .unwrap()
    }

    /// Arms the proxy to cut `cut` into the `COMMIT` after the next `passing`, and waits
    /// for `work` (`what`, in a wedge's message); what it answered, and how many `COMMIT`s
    /// the proxy cut by then.
    async fn cutting<T>(
        &self,
        cut: Cut,
        passing: usize,
        what: &str,
        work: impl Future<Output = T>,
    ) -> (T, usize) {
        self.cutter.arm(cut, passing);
        let answered = within(30, what, work).await;
        (answered, self.cutter.cuts())
    }

    /// Runs what is queued, then reads the actor's passes and its messages.
    async fn settle(&self, id: &str) -> (i64, Mailbox) {
        self.drain().await;
        (self.passes(id).await, self.mailbox(id).await)
    }

    /// Runs every queued message, moving the clock past any retry's backoff first.
    async fn drain(&self) {
        self.clock.advance(Duration::from_secs(3600));
        within(30, "a drain", self.runtime.testing().drain())
            .await
            .unwrap();
    }

    async fn close(self) {
        self.runtime.close().await;
    }
}

/// A synchronous call on an empty mailbox whose `COMMIT` ran on the server but whose answer
/// was lost: the caller gets the committed result, the turn was applied once, and its one
/// message completed on its first attempt, with no failure recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_commit_answer_is_lost_answers_the_committed_result() {
    a_call_whose_commit_is_cut_answers_once(Cut::AnswerLost, "lost").await;
}

/// A synchronous call on the empty mailbox of actor `id` whose `COMMIT` the proxy cuts
/// with `cut`: the caller gets the result of the one turn applied, and its one message
/// completed on its first attempt, with no failure recorded.
async fn a_call_whose_commit_is_cut_answers_once(cut: Cut, id: &str) {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let (answered, cuts) = proxy
        .cutting(cut, 0, "the call", proxy.tally(id).add())
        .await;
    let (passes, mailbox) = proxy.settle(id).await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        matches!(answered, Ok(1)) && passes == 1 && mailbox == RAN_ONCE,
        "the call answered {answered:?}; the actor counts {passes} passes; its messages: \
         {mailbox:?}"
    );
}

/// The same with an idempotency key: the call answers the committed result, and calling
/// again under the key answers the stored outcome without running the turn again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_whose_commit_answer_is_lost_answers_the_committed_result_under_its_key() {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let keyed = || proxy.tally("keyed").idempotency_key("entry-1");
    let (answered, cuts) = proxy
        .cutting(Cut::AnswerLost, 0, "the call", keyed().add())
        .await;
    let again = within(30, "the call again", keyed().add()).await;
    let (passes, mailbox) = proxy.settle("keyed").await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        matches!(answered, Ok(1)) && matches!(again, Ok(1)) && passes == 1 && mailbox == RAN_ONCE,
        "the call answered {answered:?} and again under its key {again:?}; the actor counts \
         {passes} passes; its messages: {mailbox:?}"
    );
}

/// A queued message run by a worker's pass (here the testing drain, which runs the same
/// mailbox step) whose `COMMIT` answer is lost: it ran once and is completed, on its first
/// attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_turn_whose_commit_answer_is_lost_runs_once() {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let queued = proxy.enqueue("queued").await;
    let (drained, cuts) = proxy
        .cutting(
            Cut::AnswerLost,
            0,
            "the drain",
            proxy.runtime.testing().drain(),
        )
        .await;
    let (passes, mailbox) = proxy.settle("queued").await;
    let status = within(30, "the status", queued.status()).await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        matches!(status, Ok(MessageStatus::Completed)) && passes == 1 && mailbox == RAN_ONCE,
        "the drain whose turn lost its COMMIT answer returned {drained:?}; the message is \
         {status:?}; the actor counts {passes} passes; its messages: {mailbox:?}"
    );
}

/// A synchronous call behind a queued message runs that message's turn itself first, and
/// that turn's `COMMIT` answer is lost (the call's own enqueue commits before it): the queued
/// message ran once and is completed on its first attempt, and the call answers its own
/// result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_callers_turn_whose_commit_answer_is_lost_runs_once() {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let queued = proxy.enqueue("drained").await;
    let (answered, cuts) = proxy
        .cutting(Cut::AnswerLost, 1, "the call", proxy.tally("drained").add())
        .await;
    let (passes, mailbox) = proxy.settle("drained").await;
    let status = within(30, "the status", queued.status()).await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        matches!(answered, Ok(2))
            && matches!(status, Ok(MessageStatus::Completed))
            && passes == 2
            && mailbox == BOTH_RAN_ONCE,
        "the call answered {answered:?}; the queued message is {status:?}; the actor counts \
         {passes} passes; its messages: {mailbox:?}"
    );
}

/// A synchronous call behind a queued message stores its own message at the mailbox's
/// tail, and that `COMMIT`'s answer is lost: the call still waits for its one message and
/// answers its result; neither message runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_enqueue_behind_a_queued_message_loses_its_commit_answer_runs_once() {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    proxy.enqueue("behind").await;
    let (answered, cuts) = proxy
        .cutting(Cut::AnswerLost, 0, "the call", proxy.tally("behind").add())
        .await;
    let (passes, mailbox) = proxy.settle("behind").await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        matches!(answered, Ok(2)) && passes == 2 && mailbox == BOTH_RAN_ONCE,
        "the call answered {answered:?}; the actor counts {passes} passes; its messages: \
         {mailbox:?}"
    );
}

/// An enqueue whose `COMMIT` answer is lost: the caller gets the committed message, or an
/// error that names its request id; there is one message, never a second, and it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_commit_answer_is_lost_leaves_one_message_named_to_its_caller() {
    an_enqueue_whose_commit_is_cut_stores_one_message(Cut::AnswerLost, "sent", true).await;
}

/// An enqueue for actor `id` whose `COMMIT` the proxy cuts with `cut`: the caller gets the
/// one message stored (or, where `an_error_may_name_it`, an error that names its request
/// id), and it runs once.
async fn an_enqueue_whose_commit_is_cut_stores_one_message(
    cut: Cut,
    id: &str,
    an_error_may_name_it: bool,
) {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let (enqueued, cuts) = proxy
        .cutting(cut, 0, "the enqueue", proxy.tally(id).enqueue().add())
        .await;
    let stored = proxy.request_ids(id).await;
    let (passes, mailbox) = proxy.settle(id).await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    let named = match (&enqueued, stored.as_slice()) {
        (Ok(message), [stored]) => message.request_id() == stored,
        (Err(error), [stored]) if an_error_may_name_it => {
            error.to_string().contains(stored.as_str())
        }
        _ => false,
    };
    assert!(
        named && passes == 1 && mailbox == RAN_ONCE,
        "the enqueue answered {enqueued:?}; the stored request ids: {stored:?}; the actor \
         counts {passes} passes; its messages: {mailbox:?}"
    );
}

/// A synchronous call whose `COMMIT` never reached the server (the connection was cut
/// first, and the server rolled the turn back): the turn is not there, so the call runs it
/// again within its deadline and answers once; its message completed on its first counted
/// attempt (the lost connection was not the turn's failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_commit_never_reached_the_server_runs_again_and_answers_once() {
    a_call_whose_commit_is_cut_answers_once(Cut::NeverSent, "unsent").await;
}

/// A queued message whose `COMMIT` never reached the server: the turn is not there, so it
/// runs again, and its message completes on its first counted attempt (the lost connection
/// was not the turn's failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_turn_whose_commit_never_reached_the_server_runs_again_uncounted() {
    let Some(proxy) = BehindTheCutter::start().await else {
        return;
    };
    let queued = proxy.enqueue("requeued").await;
    let (drained, cuts) = proxy
        .cutting(
            Cut::NeverSent,
            0,
            "the drain",
            proxy.runtime.testing().drain(),
        )
        .await;
    // The server ends the cut session when it sees the close; until then a worker's pass
    // skips the actor it still holds.
    let completed = eventually(Duration::from_secs(10), || async {
        proxy.drain().await;
        matches!(queued.status().await, Ok(MessageStatus::Completed))
    })
    .await;
    let passes = proxy.passes("requeued").await;
    let mailbox = proxy.mailbox("requeued").await;
    proxy.close().await;

    assert_eq!(cuts, 1, "the proxy cut no COMMIT");
    assert!(
        completed && passes == 1 && mailbox == RAN_ONCE,
        "the drain whose turn's COMMIT never reached the server returned {drained:?}; the \
         message completed: {completed}; the actor counts {passes} passes; its messages: \
         {mailbox:?}"
    );
}

/// An enqueue whose `COMMIT` never reached the server: the enqueue stores it again under
/// the same request id within its deadline, and the caller gets that one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_commit_never_reached_the_server_stores_its_message_once() {
    an_enqueue_whose_commit_is_cut_stores_one_message(Cut::NeverSent, "resent", false).await;
}
