//! Which runtime `Actor::reference(id)` reaches without naming one: the enclosing
//! `runtime.scope(..)`, else the process default, which a runtime becomes only when asked.

use std::sync::Arc;

use crate::support::Harness;
use solid_objects::prelude::*;
use tokio::sync::Barrier;

#[actor]
#[derive(Default)]
struct Tally {
    count: u32,
}

#[actor]
impl Tally {
    #[command]
    fn bump(&mut self) -> u32 {
        self.count += 1;
        self.count
    }

    #[reminder]
    fn reset(&mut self) {
        self.count = 0;
    }
}

async fn count_on(runtime: &Runtime) -> u32 {
    runtime
        .reference::<Tally>("t")
        .snapshot()
        .await
        .unwrap()
        .count
}

/// The only test here that sets the process default; the others scope their runtime.
#[tokio::test]
async fn a_runtime_is_the_process_default_only_when_asked_and_the_last_asked_wins() {
    let (first_file, second_file) = (Harness::new(), Harness::new());
    let first = first_file.start().await;
    let second = second_file.start().await;
    assert!(matches!(
        Tally::reference("t").bump().await,
        Err(Error::NoRuntime)
    ));

    second.make_default();
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 1);
    first.make_default();
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 1);
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 2);
    assert_eq!((count_on(&first).await, count_on(&second).await), (2, 1));

    first.close().await;
    assert!(
        matches!(Tally::reference("t").bump().await, Err(Error::Closed)),
        "a closed default says so; it does not fall back to another runtime"
    );
    second.make_default();
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 2);
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_runtimes_in_parallel_tasks_each_reach_their_own() {
    let (one_file, two_file) = (Harness::new(), Harness::new());
    let one = one_file.start().await;
    let two = two_file.start().await;
    let barrier = Arc::new(Barrier::new(2));
    let tasks = [one.clone(), two.clone()].map(|runtime| {
        let barrier = Arc::clone(&barrier);
        tokio::spawn(async move {
            runtime
                .scope(async {
                    barrier.wait().await;
                    for _ in 0..20 {
                        Tally::reference("t").bump().await.unwrap();
                    }
                })
                .await;
        })
    });
    for task in tasks {
        task.await.unwrap();
    }

    assert_eq!(count_on(&one).await, 20);
    assert_eq!(count_on(&two).await, 20);
    one.close().await;
    two.close().await;
}

#[tokio::test]
async fn a_reminder_cannot_be_called_through_a_reference() {
    let harness = Harness::new();
    let runtime = harness.start().await;
    let (called, queued) = runtime
        .scope(async {
            let tally = solid_objects::Reference::<Tally>::new("t");
            tally.call::<u32>(TallyMessage::Bump {}).await.unwrap();
            let called = tally.call::<()>(TallyMessage::Reset {}).await;
            let queued = tally
                .enqueue_builder()
                .send::<()>(TallyMessage::Reset {})
                .await;
            (called, queued)
        })
        .await;

    assert!(
        matches!(&called, Err(Error::NotCallable { operation, .. }) if operation == "reset"),
        "{called:?}"
    );
    assert!(
        matches!(&queued, Err(Error::NotCallable { .. })),
        "{queued:?}"
    );
    assert_eq!(count_on(&runtime).await, 1);
    runtime.close().await;
}
