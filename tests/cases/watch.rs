//! Watching actors (`reference.watch()`), on every backend: the current
//! state first, then every later commit in revision order; a slow watcher skips to the
//! newest; a second OS process's commit is seen; denied by default; the destroy event; and
//! what tries to break it (dropped watchers, a thousand watchers, turns that roll back,
//! states that no longer deserialise, a shutdown, an invalid id, a watch begun before its
//! actor exists, a destroy and a new incarnation before the watcher reads, a close with a
//! server-sent events stream open, a commit right after the first item on PostgreSQL).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::response::IntoResponse;
use futures_util::StreamExt;
use solid_objects::policy::{Denied, Request};
use solid_objects::prelude::*;
use solid_objects::{GroupCommit, Watch};
use support::cancellation::cut;
use support::children::running_only;
use support::fixtures::{
    start_with_policy, started, started_on, started_on_system_time, started_with,
};
use support::policies::CallersOnly;
use support::{eventually, execute, together, Harness};

/// How long a test waits for something a watcher should see at once (or at its next poll).
pub(crate) const SOON: Duration = Duration::from_secs(10);
/// The child process's database, and how many increments it commits.
const CHILD_DATABASE: &str = "WATCH_CHILD_DATABASE";
const CHILD_INCREMENTS: &str = "WATCH_CHILD_INCREMENTS";

#[actor]
#[derive(Default, Debug, PartialEq)]
pub(crate) struct Counter {
    pub(crate) value: u64,
    pub(crate) notes: Vec<String>,
}

#[actor]
impl Counter {
    #[command]
    pub(crate) fn add(&mut self, n: u64) -> u64 {
        self.value += n;
        self.value
    }

    /// Changes the state, then rejects: none of it is committed.
    #[command]
    fn add_then_reject(&mut self, n: u64) -> Result<u64, Rejection> {
        self.value += n;
        Err(reject!(refused, "adding {} is refused", n))
    }

    /// Changes the state, then fails: the attempt is counted, the state is not committed.
    #[command]
    fn add_then_fail(&mut self, n: u64) -> Result<u64, Failure> {
        self.value += n;
        Err(Failure::permanent("this addition always fails"))
    }

    /// Changes the state without changing the value.
    #[command]
    fn note(&mut self, text: String) {
        self.notes.push(text);
    }

    #[command]
    fn close(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }
}

/// A counter of steps, for turns that share group commits on SQLite.
#[actor]
#[derive(Default, Debug)]
struct Steps {
    steps: Vec<u32>,
}

#[actor]
impl Steps {
    #[command]
    fn step(&mut self, n: u32) -> usize {
        self.steps.push(n);
        self.steps.len()
    }

    #[command]
    fn step_then_reject(&mut self, n: u32) -> Result<usize, Rejection> {
        self.steps.push(n);
        Err(reject!(refused, "step {} is refused", n))
    }
}

/// Where a test keeps its actors: the harness's database, on which another process can
/// open a runtime too.
struct Database(Harness);

impl Database {
    fn new() -> Self {
        Self(Harness::new())
    }

    async fn database(&self) -> String {
        self.0.database().await
    }

    async fn runtime(&self) -> Runtime {
        builder(&self.database().await)
            .policy(AllowAll)
            .start()
            .await
            .expect("the runtime starts")
    }
}

/// A runtime's builder on `database` (see `Harness::database`), polling for other processes'
/// commits every 20 ms where they are not notified.
fn builder(database: &str) -> solid_objects::Builder {
    crate::BACKEND
        .store_at(database)
        .watch_poll(Duration::from_millis(20))
}

/// The next item, within [`SOON`].
pub(crate) async fn next<T: std::fmt::Debug>(
    watch: &mut Watch<T>,
) -> Option<Result<Watched<T>, Error>> {
    tokio::time::timeout(SOON, watch.next())
        .await
        .expect("the watch answers in time")
}

/// The next item, which must be a state: its revision and value.
pub(crate) async fn next_state<T: std::fmt::Debug>(watch: &mut Watch<T>) -> (u64, T) {
    match next(watch).await {
        Some(Ok(Watched::State {
            value, revision, ..
        })) => (revision, value),
        other => panic!("expected a state, got {other:?}"),
    }
}

/// Whether the watch has an item ready now (it is polled until it would wait).
async fn has_item<T>(watch: &mut Watch<T>) -> bool {
    tokio::time::timeout(Duration::from_millis(200), watch.next())
        .await
        .is_ok()
}

async fn order(backend: Database) {
    let runtime = backend.runtime().await;
    let counter = runtime.reference::<Counter>("c");
    let mut watch = counter.watch();
    let (revision, state) = next_state(&mut watch).await;
    assert_eq!(
        (revision, state.value),
        (0, 0),
        "an actor never written: its default"
    );
    for n in 1..=3u64 {
        counter.add(n).await.unwrap();
        let (revision, state) = next_state(&mut watch).await;
        assert_eq!(revision, n);
        assert_eq!(state.value, n * (n + 1) / 2);
    }
    // Commits made while nobody reads come in increasing revisions, the last one last.
    for n in 4..=20u64 {
        counter.add(n).await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.last() != Some(&20) {
        let (revision, state) = next_state(&mut watch).await;
        assert_eq!(
            state.value,
            revision * (revision + 1) / 2,
            "revision {revision}"
        );
        seen.push(revision);
    }
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
    // A second watch begins at the current state.
    let mut second = counter.watch();
    assert_eq!(next_state(&mut second).await.0, 20);
    runtime.close().await;
}

async fn slow_watcher_skips(backend: Database) {
    let runtime = backend.runtime().await;
    let counter = runtime.reference::<Counter>("c");
    let mut watch = counter.watch();
    assert_eq!(next_state(&mut watch).await.0, 0);
    // Fifty commits while the watcher reads nothing: none of them waits for it.
    for _ in 0..50 {
        counter.add(1).await.unwrap();
    }
    let (revision, state) = next_state(&mut watch).await;
    assert_eq!((revision, state.value), (50, 50), "straight to the newest");
    assert!(!has_item(&mut watch).await, "nothing buffered behind it");
    runtime.close().await;
}

async fn second_process(backend: Database) {
    let runtime = backend.runtime().await;
    let counter = runtime.reference::<Counter>("c");
    counter.add(1).await.unwrap();
    let mut watch = counter.watch();
    assert_eq!(next_state(&mut watch).await.0, 1);
    let mut child = running_only(&support::test_name(module_path!(), "watch_child_process"))
        .env(CHILD_DATABASE, backend.database().await)
        .env(CHILD_INCREMENTS, "3")
        .spawn()
        .expect("the child process starts");
    let mut last = 1;
    while last < 4 {
        let (revision, state) = next_state(&mut watch).await;
        assert!(revision > last, "revision {revision} after {last}");
        assert_eq!(state.value, revision, "revision {revision}");
        last = revision;
    }
    assert!(child.wait().expect("the child ends").success());
    runtime.close().await;
}

/// The second process: commits `WATCH_CHILD_INCREMENTS` additions of 1 to counter `c`.
#[tokio::test]
async fn watch_child_process() {
    let Ok(database) = std::env::var(CHILD_DATABASE) else {
        return;
    };
    let increments: u64 = std::env::var(CHILD_INCREMENTS)
        .expect("the parent says how many")
        .parse()
        .expect("a number");
    let runtime = builder(&database)
        .policy(AllowAll)
        .start()
        .await
        .expect("the child's runtime starts");
    let counter = runtime.reference::<Counter>("c");
    for _ in 0..increments {
        counter.add(1).await.expect("the child's call commits");
    }
    runtime.close().await;
}

async fn destroyed(backend: Database) {
    let runtime = backend.runtime().await;
    let counter = runtime.reference::<Counter>("c");
    counter.add(5).await.unwrap();
    let mut watch = counter.watch();
    assert_eq!(next_state(&mut watch).await, (1, Counter::default_with(5)));
    counter.close().await.unwrap();
    match next(&mut watch).await {
        Some(Ok(Watched::Destroyed { incarnation })) => assert_eq!(incarnation, 1),
        other => panic!("expected the destroy event, got {other:?}"),
    }
    assert!(
        next(&mut watch).await.is_none(),
        "the destroy event is the last"
    );
    // The next incarnation is watched afresh; an operator's destroy ends that watch too.
    counter.add(2).await.unwrap();
    let mut watch = counter.watch();
    match next(&mut watch).await {
        Some(Ok(Watched::State {
            value, incarnation, ..
        })) => assert_eq!((value.value, incarnation), (2, 2)),
        other => panic!("expected the new incarnation's state, got {other:?}"),
    }
    counter.destroy().await.unwrap();
    assert!(matches!(
        next(&mut watch).await,
        Some(Ok(Watched::Destroyed { incarnation: 2 }))
    ));
    assert!(next(&mut watch).await.is_none());
    runtime.close().await;
}

async fn rolled_back_turns_are_never_seen(backend: Database) {
    let runtime = backend.runtime().await;
    let counter = runtime.reference::<Counter>("c");
    let mut watch = counter.watch();
    assert_eq!(next_state(&mut watch).await.0, 0);
    assert!(counter.add_then_reject(100).await.is_err());
    assert!(counter.add_then_fail(1_000).await.is_err());
    counter.add(1).await.unwrap();
    // The rejected and the failed turns changed the state in memory only.
    assert_eq!(next_state(&mut watch).await, (1, Counter::default_with(1)));
    assert!(!has_item(&mut watch).await);
    runtime.close().await;
}

impl Counter {
    fn default_with(value: u64) -> Self {
        Self {
            value,
            notes: Vec::new(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_gives_the_current_state_then_each_commit_in_revision_order() {
    order(Database::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_watcher_skips_to_the_newest_state() {
    slow_watcher_skips(Database::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_by_another_process_is_seen() {
    second_process(Database::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn destroying_the_actor_ends_the_watch_with_the_destroy_event() {
    destroyed(Database::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejected_or_failed_turn_is_never_seen() {
    rolled_back_turns_are_never_seen(Database::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watching_is_denied_unless_the_policy_allows_it() {
    let harness = Harness::new();
    for policy in [true, false] {
        let builder = harness.store().await;
        // A policy that says nothing about watching, and no policy at all.
        let runtime = if policy {
            builder.policy(CallersOnly).start().await.unwrap()
        } else {
            builder.start().await.unwrap()
        };
        let mut watch = runtime.reference::<Counter>("c").watch();
        match next(&mut watch).await {
            Some(Err(Error::Unauthorized {
                operation, reason, ..
            })) => {
                assert_eq!(operation, "watch");
                let expected = if policy {
                    "implement Policy::authorize_subscription"
                } else {
                    "no authorisation policy is configured"
                };
                assert!(reason.contains(expected), "{reason}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(next(&mut watch).await.is_none(), "a refused watch ends");
        runtime.close().await;
    }
}

/// Lets callers watch the counters whose id starts with "public-", and nothing else.
struct PublicCounters;

impl solid_objects::Policy for PublicCounters {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_subscription(&self, request: &Request<'_>) -> Result<(), Denied> {
        match request.subscription::<Counter>() {
            Some(id) if id.starts_with("public-") => Ok(()),
            _ => Err(Denied::new("only public counters are watched")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_names_the_watched_actor_by_its_type() {
    let (_harness, runtime) = started_with(|builder| builder.policy(PublicCounters)).await;
    let mut public = runtime.reference::<Counter>("public-1").watch();
    assert!(
        matches!(next(&mut public).await, Some(Ok(_))),
        "a public counter is watched"
    );
    let mut private = runtime.reference::<Counter>("private-1").watch();
    match next(&mut private).await {
        Some(Err(Error::Unauthorized { reason, .. })) => {
            assert!(reason.contains("only public counters"), "{reason}");
        }
        other => panic!("a private counter's watch should be refused, got {other:?}"),
    }
    let mut other_type = runtime.reference::<Steps>("public-1").watch();
    assert!(
        matches!(
            next(&mut other_type).await,
            Some(Err(Error::Unauthorized { .. }))
        ),
        "another actor type with a public id is not a counter"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projection_skips_the_revisions_it_does_not_change() {
    let (_harness, runtime, counter) = started_on::<Counter>("c").await;
    let mut values = counter.watch_with(|counter| counter.value);
    assert_eq!(next_state(&mut values).await, (0, 0));
    counter.note("a note".to_owned()).await.unwrap();
    counter.note("another".to_owned()).await.unwrap();
    counter.add(3).await.unwrap();
    // Revisions 1 and 2 changed only the notes.
    assert_eq!(next_state(&mut values).await, (3, 3));
    assert!(!has_item(&mut values).await);
    // A projection that panics is an error item, and the watch goes on.
    let mut fragile = counter.watch_with(|counter| {
        assert!(
            counter.value < 4,
            "the projection refuses {}",
            counter.value
        );
        counter.value
    });
    assert_eq!(next_state(&mut fragile).await, (3, 3));
    counter.add(1).await.unwrap();
    match next(&mut fragile).await {
        Some(Err(Error::Panicked { message, .. })) => {
            assert!(message.contains("refuses 4"), "{message}")
        }
        other => panic!("expected the projection's panic as an error, got {other:?}"),
    }
    counter.add(10).await.unwrap();
    assert!(matches!(
        next(&mut fragile).await,
        Some(Err(Error::Panicked { .. }))
    ));
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_state_that_no_longer_deserialises_is_an_error_item_and_the_watch_goes_on() {
    let harness = Harness::new();
    let runtime = builder(&harness.database().await)
        .policy(AllowAll)
        .start()
        .await
        .unwrap();
    let counter = runtime.reference::<Counter>("c");
    counter.add(1).await.unwrap();
    let mut watch = counter.watch();
    assert_eq!(next_state(&mut watch).await.0, 1);
    // Another program writes a state this build cannot read, then a readable one.
    execute(
        &harness,
        r#"UPDATE solid_instances SET state = '{"value": "seven"}', revision = 2
           WHERE actor_type = 'Counter' AND actor_id = 'c'"#,
    )
    .await;
    match next(&mut watch).await {
        Some(Err(Error::Decode { actor_id, .. })) => assert_eq!(actor_id, "c"),
        other => panic!("expected a decode error, got {other:?}"),
    }
    execute(
        &harness,
        r#"UPDATE solid_instances SET state = '{"value": 7}', revision = 3
           WHERE actor_type = 'Counter' AND actor_id = 'c'"#,
    )
    .await;
    assert_eq!(next_state(&mut watch).await, (3, Counter::default_with(7)));
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_ends_when_the_runtime_shuts_down() {
    let (_harness, runtime) = started().await;
    let mut watch = runtime.reference::<Counter>("c").watch();
    assert_eq!(next_state(&mut watch).await.0, 0);
    let waiting = tokio::spawn(async move { watch.next().await.is_none() });
    // The watcher waits for a commit; the shutdown ends it instead.
    tokio::task::yield_now().await;
    runtime.shutdown();
    let ended = tokio::time::timeout(SOON, waiting).await;
    assert!(ended.expect("the watch ends in time").unwrap());
    // A watch made after the shutdown says why and ends.
    let mut late = runtime.reference::<Counter>("c").watch();
    assert!(matches!(next(&mut late).await, Some(Err(Error::Closed))));
    assert!(next(&mut late).await.is_none());
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watchers_dropped_mid_read_and_mid_wait_leave_commits_and_other_watchers_unharmed() {
    let (_harness, runtime, counter) = started_on::<Counter>("c").await;
    let mut steady = counter.watch();
    assert_eq!(next_state(&mut steady).await.0, 0);
    for round in 1..=50u64 {
        // Dropped during its first read, or while it waits for a commit.
        let mut dropped = counter.watch();
        if round % 2 == 0 {
            assert!(next(&mut dropped).await.is_some());
        }
        let cut = Duration::from_micros(round * 37 % 500);
        let _ = tokio::time::timeout(cut, dropped.next()).await;
        drop(dropped);
        counter.add(1).await.unwrap();
        assert_eq!(
            next_state(&mut steady).await,
            (round, Counter::default_with(round))
        );
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_watchers_of_one_actor_each_see_the_newest_state() {
    let (_harness, runtime, counter) = started_on::<Counter>("c").await;
    let mut watches: Vec<Watch<Counter>> = (0..1_000).map(|_| counter.watch()).collect();
    let firsts = futures_util::future::join_all(watches.iter_mut().map(next_state)).await;
    assert!(firsts.iter().all(|(revision, _)| *revision == 0));
    // Ten commits, none of which waits for the watchers.
    for _ in 0..10 {
        counter.add(1).await.unwrap();
    }
    let lasts = futures_util::future::join_all(watches.into_iter().map(|mut watch| async move {
        let mut seen = Vec::new();
        while seen.last() != Some(&10) {
            let (revision, state) = next_state(&mut watch).await;
            assert_eq!(state.value, revision);
            seen.push(revision);
        }
        assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
        seen.len()
    }))
    .await;
    assert_eq!(lasts.len(), 1_000);
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn turns_undone_inside_group_commits_are_never_seen() {
    let grouping = GroupCommit::default().max_wait(Duration::from_millis(50));
    let (_harness, runtime) =
        started_on_system_time(|builder| builder.group_commit(grouping)).await;
    let actors: Vec<String> = (0..8).map(|actor| format!("s-{actor}")).collect();
    // Each watcher keeps every state it sees, by revision, from before the first call until
    // the last step (`LAST`, taken after the others without a deadline).
    const LAST: u32 = 1_000;
    let mut watchers = Vec::new();
    for actor in &actors {
        let mut watch = runtime.reference::<Steps>(actor.as_str()).watch();
        assert_eq!(next_state(&mut watch).await.0, 0);
        watchers.push(tokio::spawn(async move {
            let mut seen = BTreeMap::new();
            while let Some(item) = watch.next().await {
                if let Watched::State {
                    value, revision, ..
                } = item.expect("every state reads")
                {
                    let last = value.steps.last() == Some(&LAST);
                    seen.insert(revision, value.steps);
                    if last {
                        break;
                    }
                }
            }
            seen
        }));
    }
    // Sixteen callers share groups; deadlines from 0 to 20 ms drop calls at every await
    // (waiting for the writer, inside the turn, waiting for the group's commit), and every
    // fifth step rejects after changing the state.
    together(16, |caller| {
        let steps = runtime.reference::<Steps>(format!("s-{}", caller % 8));
        async move {
            for n in 1..=40u32 {
                let cut = cut(n, caller, 20_000);
                if n % 5 == 0 {
                    let _ = tokio::time::timeout(cut, steps.step_then_reject(n)).await;
                } else {
                    let _ = tokio::time::timeout(cut, steps.step(n)).await;
                }
            }
        }
    })
    .await;
    // The last step, then what was committed.
    let mut finals = BTreeMap::new();
    for actor in &actors {
        let reference = runtime.reference::<Steps>(actor.as_str());
        reference.step(LAST).await.unwrap();
        finals.insert(actor.clone(), reference.snapshot().await.unwrap().steps);
    }
    for (actor, watcher) in actors.iter().zip(watchers) {
        let seen = tokio::time::timeout(SOON, watcher)
            .await
            .expect("the watcher sees the last step")
            .unwrap();
        let committed = &finals[actor];
        for (revision, steps) in &seen {
            // A state at revision r is exactly the first r committed steps: a turn undone
            // (rejected, or dropped with its group) was never seen.
            let r = usize::try_from(*revision).unwrap();
            assert_eq!(
                steps.as_slice(),
                &committed[..r],
                "{actor} at revision {revision}"
            );
        }
        let newest = seen.values().next_back();
        assert_eq!(
            newest,
            Some(committed),
            "{actor}: the last state seen is the last commit"
        );
    }
    runtime.close().await;
}

/// The next chunk of a response body, as text, within [`SOON`].
async fn chunk(
    body: &mut (impl futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin),
) -> Option<String> {
    use futures_util::StreamExt;
    let next = tokio::time::timeout(SOON, body.next())
        .await
        .expect("the body answers in time");
    next.map(|bytes| String::from_utf8(bytes.expect("a chunk").to_vec()).expect("text"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_as_server_sent_events_sends_states_then_the_destroy_event() {
    use axum::response::IntoResponse;

    let (_harness, runtime, counter) = started_on::<Counter>("c").await;
    counter.add(2).await.unwrap();
    let sse = counter
        .watch_with(|counter| counter.value)
        .into_sse()
        .await
        .unwrap();
    let response = sse.into_response();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body().into_data_stream();
    assert_eq!(
        chunk(&mut body).await.unwrap(),
        "event: state\nid: 1\ndata: {\"incarnation\":1,\"revision\":1,\"value\":2}\n\n"
    );
    counter.add(3).await.unwrap();
    assert_eq!(
        chunk(&mut body).await.unwrap(),
        "event: state\nid: 2\ndata: {\"incarnation\":1,\"revision\":2,\"value\":5}\n\n"
    );
    counter.close().await.unwrap();
    assert_eq!(
        chunk(&mut body).await.unwrap(),
        "event: destroyed\ndata: {\"incarnation\":1}\n\n"
    );
    assert_eq!(
        chunk(&mut body).await,
        None,
        "the events end with the actor's life"
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_denied_watch_as_server_sent_events_is_a_403() {
    use axum::response::IntoResponse;

    let harness = Harness::new();
    let runtime = start_with_policy(&harness, CallersOnly).await;
    let denied = runtime.reference::<Counter>("c").watch().into_sse().await;
    let response = denied
        .map(IntoResponse::into_response)
        .unwrap_or_else(IntoResponse::into_response);
    assert_eq!(response.status(), 403);
    runtime.close().await;
}

/// A counter of the watch edge cases, beside [`Counter`].
#[actor]
#[derive(Default, Debug, PartialEq)]
pub(crate) struct Dial {
    value: u64,
}

#[actor]
impl Dial {
    #[command]
    pub(crate) fn add(&mut self, n: u64) -> u64 {
        self.value += n;
        self.value
    }

    #[command]
    fn close(&mut self, turn: &mut Turn<Self>) {
        turn.destroy();
    }

    #[command]
    fn fail(&mut self) -> Result<u64, Failure> {
        Err(Failure::permanent("<script>alert(1)</script>"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_invalid_id_is_an_error_item_then_ends() {
    let (_harness, runtime) = started().await;
    for id in ["", "a\0b", &"x".repeat(100_000)] {
        let mut watch = runtime.reference::<Dial>(id).watch();
        let first = next(&mut watch).await;
        assert!(
            matches!(first, Some(Err(_))),
            "id of {} bytes: {first:?}",
            id.len()
        );
        assert!(next(&mut watch).await.is_none());
    }
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_begun_before_the_actor_exists_sees_its_first_commit() {
    let (_harness, runtime, counter) = started_on::<Dial>("new").await;
    let mut watch = counter.watch();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::State {
            value: Dial { value: 0 },
            incarnation: 1,
            revision: 0
        }
    );
    counter.add(3).await.unwrap();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::State {
            value: Dial { value: 3 },
            incarnation: 1,
            revision: 1
        }
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_then_recreate_before_the_watcher_reads_is_destroyed_once_then_the_end() {
    let (_harness, runtime, counter) = started_on::<Dial>("phoenix").await;
    counter.add(1).await.unwrap();
    let mut watch = counter.watch();
    assert!(matches!(
        next(&mut watch).await,
        Some(Ok(Watched::State { revision: 1, .. }))
    ));
    counter.close().await.unwrap();
    counter.add(5).await.unwrap();
    counter.close().await.unwrap();
    counter.add(7).await.unwrap();
    assert_eq!(
        next(&mut watch).await.unwrap().unwrap(),
        Watched::Destroyed { incarnation: 1 }
    );
    assert!(next(&mut watch).await.is_none());
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_task_ends_when_the_last_watch_is_dropped() {
    let (_harness, runtime, counter) = started_on::<Dial>("c").await;
    counter.add(1).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for round in 0..20 {
        let mut watch = counter.watch();
        assert!(
            matches!(next(&mut watch).await, Some(Ok(_))),
            "round {round}"
        );
        drop(watch);
    }
    let settled = eventually(SOON, || async { metrics.num_alive_tasks() <= before }).await;
    assert!(
        settled,
        "tasks before {before}, after {}",
        metrics.num_alive_tasks()
    );
    runtime.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_does_not_hang_while_a_server_sent_events_stream_is_open() {
    let (_harness, runtime, counter) = started_on::<Dial>("c").await;
    counter.add(1).await.unwrap();
    let sse = counter.watch().into_sse().await.unwrap();
    // The stream is being read: its first event (the current state) has arrived.
    let mut body = sse.into_response().into_body().into_data_stream();
    let first = tokio::time::timeout(SOON, body.next())
        .await
        .expect("the first event");
    assert!(first.is_some_and(|chunk| chunk.is_ok()));
    let reading = tokio::spawn(async move {
        let mut read = 0;
        while let Some(chunk) = body.next().await {
            read += chunk.map_err(|error| error.to_string())?.len();
        }
        Ok::<_, String>(read)
    });
    tokio::time::timeout(SOON, runtime.close())
        .await
        .expect("close does not hang");
    let body = tokio::time::timeout(SOON, reading)
        .await
        .expect("the SSE body ends");
    assert!(body.unwrap().is_ok());
}
