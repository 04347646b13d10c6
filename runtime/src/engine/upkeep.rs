//! Upkeep: the workers' hourly pass, which folds the charts' tallies, prunes what is past its
//! retention (tallies included), warns about effects no handler here runs, and notes why
//! messages of unknown operations wait.

use super::activity_fold::{ActivityFold, TALLIES_KEPT};
use super::conflicts::rerun_conflicts;
use super::core::Core;
use super::effects::Effects;
use super::micros;
use super::registry::Registry;
use crate::error::{Error, Result};
use crate::store::admin_rows::Pruned;
use crate::store::Retention;
use crate::time::saturating::earlier;

/// How many waiting heads of unknown operations one upkeep pass notes.
const UNKNOWN_NOTED: i64 = 100;

/// Each actor's newest finished messages with an idempotency key that retention keeps.
pub(crate) const KEPT_IDEMPOTENCY_KEYS: i64 = 64;

/// The upkeep job: the charts' tallies, retention, the effects no handler here runs, and
/// the messages of operations this build does not know. It borrows the core, the registry,
/// the effects job it asks about unhandled effects, and the fold job.
#[derive(Clone, Copy)]
pub(crate) struct Upkeep<'e> {
    core: &'e Core,
    registry: &'e Registry,
    effects: Effects<'e>,
    fold: ActivityFold<'e>,
}

impl<'e> Upkeep<'e> {
    /// The upkeep job over the engine's parts.
    pub(super) fn new(
        core: &'e Core,
        registry: &'e Registry,
        effects: Effects<'e>,
        fold: ActivityFold<'e>,
    ) -> Self {
        Self {
            core,
            registry,
            effects,
            fold,
        }
    }
}

impl Upkeep<'_> {
    /// The workers' hourly upkeep: folds the charts' tallies (before retention deletes the
    /// rows), prunes what is past its retention, warns about effects no handler here runs,
    /// and notes why messages of unknown operations wait.
    pub(crate) async fn run(&self) -> Result<()> {
        let folded = self.fold.run().await?;
        tracing::debug!(
            folded,
            "folded the charts' tallies of the minutes that ended"
        );
        let pruned = self.prune(true).await?.total();
        tracing::debug!(pruned, "pruned old messages and effects");
        self.effects.report_unhandled_effects().await?;
        self.note_unknown_operations().await?;
        Ok(())
    }

    /// Notes, on heads of mailboxes of known types whose operation this build does not know,
    /// why they wait (a build that knows it runs them; workers here never claim them).
    pub(crate) async fn note_unknown_operations(&self) -> Result<usize> {
        let heads = self
            .core
            .store()
            .unknown_operations(
                &self.registry.known_operations(),
                &self.registry.known_types(),
                UNKNOWN_NOTED,
            )
            .await?;
        if heads.is_empty() {
            return Ok(0);
        }
        let mut tx = self.core.begin(None).await?;
        for head in &heads {
            let why = Error::UnknownOperation {
                actor_type: head.actor_type.clone(),
                operation: head.operation.clone(),
                message_id: head.id,
            };
            tracing::warn!(%why, "a message waits for a build that knows its operation");
            tx.note_message(
                head.id,
                &format!("waits for a build that can run it: {why}"),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(heads.len())
    }

    /// Deletes what is past its retention (audit rows of administration calls included, and
    /// the charts' tallies of its minutes once they are older than the longest window too);
    /// returns how many rows of each kind (the tallies uncounted). Without `commit`, rolls
    /// back: a preview.
    pub(crate) async fn prune(&self, commit: bool) -> Result<Pruned> {
        let now = self.core.now();
        let limits = &self.core.config().limits;
        let retention = Retention {
            finished_before: micros(earlier(now, limits.retention)),
            dead_before: (!limits.dead_retention.is_zero())
                .then(|| micros(earlier(now, limits.dead_retention))),
            keep_keyed: KEPT_IDEMPOTENCY_KEYS,
        };
        // Two nodes' upkeep deleting the same rows at once: one certifies, the other runs
        // again and finds them gone.
        rerun_conflicts(|| async {
            let mut tx = self.core.begin(None).await?;
            let mut pruned = tx.prune(&retention).await?;
            pruned.admin_events = tx.prune_admin_events(retention.finished_before).await?;
            let tallies_before = retention.finished_before.min(micros(now) - TALLIES_KEPT);
            tx.prune_tallies(tallies_before).await?;
            if commit {
                tx.commit().await?;
            }
            Ok(pruned)
        })
        .await
    }
}
