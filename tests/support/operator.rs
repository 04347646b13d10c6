//! What an operator reads through `Runtime::admin` in the cases, in the shapes the cases
//! assert on: the dead letters, the dead effects, what a prune deleted, a message's status.

use solid_objects::admin::{
    DeadLetterFilter, DeadLetterSummary, EffectFilter, EffectStatus, EffectSummary,
};
use solid_objects::prelude::*;
use solid_objects::MessageStatus;

/// The first ten dead letters, retried ones included.
pub async fn dead_letters(runtime: &Runtime) -> Vec<DeadLetterSummary> {
    let filter = DeadLetterFilter::new().include_retried().limit(10);
    runtime
        .admin()
        .dead_letters(&filter)
        .await
        .expect("the dead letters are listed")
}

/// The first ten dead effects.
pub async fn dead_effects(runtime: &Runtime) -> Vec<EffectSummary> {
    let filter = EffectFilter::new().status(EffectStatus::Dead).limit(10);
    runtime
        .admin()
        .effects(&filter)
        .await
        .expect("the effects are listed")
}

/// Prunes what the retention lets go; returns how many rows it deleted.
pub async fn prune(runtime: &Runtime) -> u64 {
    let pruned = runtime.admin().prune().await.expect("the prune runs");
    pruned.total()
}

/// The status of the message with `request_id`, which must be kept.
pub async fn status_of(runtime: &Runtime, request_id: &str) -> MessageStatus {
    let message = runtime.message(request_id).await.expect("the lookup runs");
    let message = message.expect("the message is kept");
    message.status().await.expect("the status reads")
}

/// The error `effect` last failed with, empty if it has none.
pub fn last_error(effect: &EffectSummary) -> &str {
    effect.last_error.as_deref().unwrap_or_default()
}
