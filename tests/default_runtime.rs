//! The process default runtime: `Actor::reference(id)` without naming a runtime. Alone in
//! its binary, because the default is process-wide.

mod support;

use solid_objects::prelude::*;
use support::Harness;

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

/// The default runtime is process-wide: the tests here take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn references_without_a_runtime_use_the_first_open_one_and_fail_clearly_without_one() {
    let _turn = ONE_AT_A_TIME.lock().await;
    assert!(matches!(
        Tally::reference("t").bump().await,
        Err(Error::NoRuntime)
    ));

    let first = Harness::new();
    let runtime = first.start().await;
    let second = Harness::new();
    let other = second.start().await;
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 1);
    assert_eq!(
        runtime
            .reference::<Tally>("t")
            .snapshot()
            .await
            .unwrap()
            .count,
        1,
        "the first runtime started is the default"
    );
    assert_eq!(
        other
            .reference::<Tally>("t")
            .snapshot()
            .await
            .unwrap()
            .count,
        0
    );

    runtime.close().await;
    assert!(matches!(
        Tally::reference("t").bump().await,
        Err(Error::NoRuntime)
    ));
    let third = Harness::new();
    let next = third.start().await;
    assert_eq!(Tally::reference("t").bump().await.unwrap(), 1);
    assert_eq!(
        next.reference::<Tally>("t").snapshot().await.unwrap().count,
        1
    );
    other.close().await;
    next.close().await;
}

#[tokio::test]
async fn a_reminder_cannot_be_called_through_a_reference() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let harness = Harness::new();
    let runtime = harness.start().await;
    let tally = solid_objects::Reference::<Tally>::new("t");
    tally.call::<u32>(TallyMessage::Bump {}).await.unwrap();

    let called = tally.call::<()>(TallyMessage::Reset {}).await;
    let queued = tally
        .enqueue_builder()
        .send::<()>(TallyMessage::Reset {})
        .await;

    assert!(
        matches!(&called, Err(Error::NotCallable { operation, .. }) if operation == "reset"),
        "{called:?}"
    );
    assert!(
        matches!(&queued, Err(Error::NotCallable { .. })),
        "{queued:?}"
    );
    assert_eq!(
        runtime
            .reference::<Tally>("t")
            .snapshot()
            .await
            .unwrap()
            .count,
        1
    );
    runtime.close().await;
}
