//! The effect contract: what an effect is ([`Effect`]) and how one that failed for good
//! comes back to its actor ([`EffectFailure`]).
//!
//! Running effects (their handlers, leases and context) is the client's; see the public
//! [`effect`](crate::effect) module.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::limits::RetryPolicy;

/// A kind of effect: a serialisable value with a stable stored name, and what its handler
/// returns when it succeeds.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use solid_objects::Effect;
///
/// #[derive(Serialize, Deserialize)]
/// struct ChargeCard {
///     hold_id: String,
///     cents: i64,
/// }
///
/// /// What the card processor answers.
/// #[derive(Serialize, Deserialize)]
/// struct Charged {
///     charge_id: String,
/// }
///
/// impl Effect for ChargeCard {
///     const NAME: &'static str = "charge_card";
///     type Output = Charged;
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect",
    note = "implement solid_objects::Effect for it (a stored NAME) and derive Serialize and Deserialize"
)]
pub trait Effect: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The name stored with each emitted effect; handlers are found by it.
    const NAME: &'static str;

    /// What the handler returns when the effect succeeds: `()` for nothing, or a value the
    /// emitting actor receives with [`Emitted::on_success`](crate::Emitted::on_success).
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// How effects of this kind are retried: `None` (the default) for the runtime's
    /// [`RetryPolicy`] ([`Builder::retry`](crate::Builder::retry)).
    ///
    /// An attempt counts whether its handler failed or its runner died (its lease ran out);
    /// after `max_attempts` of them the effect is dead and its failure reply is sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use solid_objects::{chrono::TimeDelta, Effect, RetryPolicy};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct SendEmail {
    ///     to: String,
    /// }
    ///
    /// impl Effect for SendEmail {
    ///     const NAME: &'static str = "send_email";
    ///     type Output = ();
    ///
    ///     fn retry_policy() -> Option<RetryPolicy> {
    ///         Some(RetryPolicy::new().max_attempts(10).base_delay(TimeDelta::seconds(5)))
    ///     }
    /// }
    /// ```
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }
}

/// Bytes of the arguments limit an effect with a failure reply leaves for the failure's
/// envelope (its id, name, attempts and error): the reply carries the effect back, and must
/// fit the limit the effect itself was checked against.
pub(crate) const FAILURE_REPLY_ROOM: usize = 512;

/// How an effect `E` failed for good, as the command given to
/// [`Emitted::on_failure`](crate::Emitted::on_failure) receives it: that command takes one
/// argument of this type.
///
/// It carries the effect itself and its id ([`Emitted::id`](crate::Emitted::id)), so the
/// actor can tell which of its effects failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EffectFailure<E> {
    /// The effect's id ([`EffectContext::id`](crate::EffectContext::id)).
    pub effect_id: String,
    /// The kind of effect ([`Effect::NAME`]).
    pub name: String,
    /// The last attempt's error: at most 4 KiB of it, and less if the effect leaves less
    /// room under the arguments limit.
    pub error: String,
    /// Attempts made.
    pub attempts: u32,
    /// The effect, as it was emitted.
    pub effect: E,
}
