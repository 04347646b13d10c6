//! The setups most cases begin with, each in one call.

use solid_objects::policy::Policy;
use solid_objects::prelude::*;

use super::Harness;

/// A fresh harness on the binary's backend, and a runtime on it that allows every call.
pub async fn started() -> (Harness, Runtime) {
    let harness = Harness::new();
    let runtime = harness.start().await;
    (harness, runtime)
}

/// A runtime on the harness's database under `policy`, on the system's clock.
pub async fn start_with_policy(harness: &Harness, policy: impl Policy) -> Runtime {
    let builder = harness.store().await.policy(policy);
    builder.start().await.expect("the runtime starts")
}

/// [`started`], and a reference to the actor `id` of type `A` on its runtime.
pub async fn started_on<A: solid_objects::Addressable>(
    id: &str,
) -> (Harness, Runtime, A::Reference) {
    let (harness, runtime) = started().await;
    let actor = runtime.reference::<A>(id);
    (harness, runtime, actor)
}
