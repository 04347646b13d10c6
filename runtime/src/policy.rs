//! Authorisation: nothing runs unless the application's [`Policy`] allows it.

use serde_json::Value;

/// What kind of call a [`Request`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// A command, synchronous or enqueued: it may change state.
    Command,
    /// A query: an ordered read through the mailbox.
    Query,
    /// A read of the committed state without a message.
    Snapshot,
    /// Destroying the actor: its state, reminders and unfinished messages.
    Destroy,
    /// A listing of the actor's scheduled reminders, for operators.
    Reminders,
}

/// A call as the policy sees it, before anything is written.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Request<'a> {
    /// Command, query or snapshot.
    pub kind: RequestKind,
    /// The actor's stored type name (`#[actor(name = "...")]`, or the struct's name).
    pub actor_type: &'a str,
    /// The actor's id. An id is an address, not a permission.
    pub actor_id: &'a str,
    /// The operation's name (`"snapshot"` for a snapshot).
    pub operation: &'a str,
    /// The operation's arguments, as they will be stored.
    pub arguments: &'a Value,
    /// The caller's context, given per call with `.context(..)` on the reference.
    pub context: Option<&'a Value>,
}

/// Why a policy refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    reason: String,
}

impl Denied {
    /// A refusal with the reason the caller will see in [`Error::Unauthorized`](crate::Error).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The reason given.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Decides which calls may run.
///
/// The runtime asks the policy before it writes anything. Without one configured every call
/// is denied; [`AllowAll`] must be named to allow everything.
///
/// ```
/// use solid_objects::policy::{Denied, Policy, Request};
///
/// /// Signed-in callers only: the context must carry a user id.
/// struct SignedIn;
///
/// impl Policy for SignedIn {
///     fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
///         match request.context.and_then(|context| context.get("user_id")) {
///             Some(_) => Ok(()),
///             None => Err(Denied::new("sign in first")),
///         }
///     }
///
///     fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied> {
///         self.authorize_message(request)
///     }
/// }
/// ```
pub trait Policy: Send + Sync + 'static {
    /// Decides whether a command (sync or enqueued) may be enqueued.
    fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied>;

    /// Decides whether a query or a snapshot may read the actor.
    fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied>;

    /// Decides whether `reference.destroy()` may destroy the actor. Denied unless the policy
    /// says otherwise: a policy written before destroy existed allows none.
    fn authorize_destroy(&self, request: &Request<'_>) -> Result<(), Denied> {
        let _ = request;
        Err(Denied::new(
            "destroying actors is not authorised: implement Policy::authorize_destroy",
        ))
    }
}

/// Allows every call. Use it only where every caller is trusted.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_destroy(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
}

/// The policy of a runtime that was given none: denies everything and says how to fix it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoPolicy;

const NO_POLICY: &str = "no authorisation policy is configured; pass one to \
    Runtime::builder().policy(..) (AllowAll allows every call)";

impl Policy for NoPolicy {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new(NO_POLICY))
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new(NO_POLICY))
    }

    fn authorize_destroy(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new(NO_POLICY))
    }
}
