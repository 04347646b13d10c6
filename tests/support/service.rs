//! An outside service that effects reach: away (each effect that reaches it fails for good)
//! until a case brings it back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use solid_objects::prelude::*;
use solid_objects::{Effect, EffectContext};

/// An outside service, away until [`Service::come_back`].
pub struct Service {
    up: Arc<AtomicBool>,
    /// What an effect that reaches it while it is away fails with.
    away: &'static str,
}

impl Service {
    /// A service that is away: each effect that reaches it fails for good, saying `away`.
    pub fn away(away: &'static str) -> Self {
        Self {
            up: Arc::new(AtomicBool::new(false)),
            away,
        }
    }

    /// Brings it back: the effects that reach it from now on succeed.
    pub fn come_back(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// A handler of the effect `E` that reaches the service.
    pub fn handler<E: Effect<Output = ()>>(
        &self,
    ) -> impl Fn(E, EffectContext) -> std::future::Ready<Result<(), Failure>> + Send + Sync + 'static
    {
        let (up, away) = (Arc::clone(&self.up), self.away);
        move |_: E, _| {
            std::future::ready(match up.load(Ordering::SeqCst) {
                true => Ok(()),
                false => Err(Failure::permanent(away)),
            })
        }
    }
}
