//! Authorisation: nothing runs unless the application's [`Policy`] allows it.

use serde_json::Value;

use crate::actor::{Actor, Operations};

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
    /// Watching the actor: its committed states, as they are committed.
    Subscription,
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

impl Request<'_> {
    /// The call as a command (or reminder) of actor `A`, decoded into its message enum;
    /// `None` if the call is for another actor type, is not a command, or does not decode.
    ///
    /// Match on the enum's variants rather than on [`operation`](Request::operation)'s
    /// name: a renamed command is then a compile error in the policy, not a silent change
    /// of what is allowed.
    ///
    /// ```
    /// use solid_objects::policy::{Denied, Policy, Request};
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Dock {
    ///     berths: u32,
    /// }
    ///
    /// #[actor]
    /// impl Dock {
    ///     #[command]
    ///     pub fn moor(&mut self, ship: String) -> u32 {
    ///         self.berths += 1;
    ///         self.berths
    ///     }
    ///
    ///     #[command]
    ///     pub fn close(&mut self) {}
    /// }
    ///
    /// /// Anyone may moor; only the harbour master closes a dock.
    /// struct Harbour;
    ///
    /// impl Policy for Harbour {
    ///     fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
    ///         let master = request.context.and_then(|context| context.get("master")).is_some();
    ///         match request.message::<Dock>() {
    ///             Some(DockMessage::Moor { .. }) => Ok(()),
    ///             Some(DockMessage::Close {}) if master => Ok(()),
    ///             _ => Err(Denied::new("not allowed")),
    ///         }
    ///     }
    ///
    ///     fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn message<A: Actor>(&self) -> Option<A::Message> {
        match self.kind {
            RequestKind::Command => self.decode::<A, A::Message>(),
            _ => None,
        }
    }

    /// The call as a query of actor `A`, decoded into its query enum; `None` if the call is
    /// for another actor type, is not a query, or does not decode.
    pub fn query<A: Actor>(&self) -> Option<A::Query> {
        match self.kind {
            RequestKind::Query => self.decode::<A, A::Query>(),
            _ => None,
        }
    }

    /// The id of the actor of type `A` this call watches; `None` if the call watches another
    /// actor type or is not a subscription.
    ///
    /// Name the actor by its type rather than by [`actor_type`](Request::actor_type)'s text:
    /// a renamed actor is then a compile error in the policy, not a silent change of what may
    /// be watched.
    ///
    /// ```
    /// use solid_objects::policy::{Denied, Policy, Request};
    /// use solid_objects::prelude::*;
    ///
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Show {
    ///     seats_left: u32,
    /// }
    ///
    /// #[actor]
    /// impl Show {
    ///     #[query]
    ///     pub fn seats_left(&self) -> u32 {
    ///         self.seats_left
    ///     }
    /// }
    ///
    /// /// Anyone may watch a public show; nothing else is watched.
    /// struct BoxOffice;
    ///
    /// impl Policy for BoxOffice {
    ///     fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
    ///         Err(Denied::new("read only"))
    ///     }
    ///
    ///     fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
    ///         Ok(())
    ///     }
    ///
    ///     fn authorize_subscription(&self, request: &Request<'_>) -> Result<(), Denied> {
    ///         match request.subscription::<Show>() {
    ///             Some(id) if id.starts_with("public-") => Ok(()),
    ///             _ => Err(Denied::new("only public shows are watched")),
    ///         }
    ///     }
    /// }
    /// ```
    pub fn subscription<A: Actor>(&self) -> Option<&str> {
        (self.kind == RequestKind::Subscription && self.actor_type == A::TYPE_NAME)
            .then_some(self.actor_id)
    }

    fn decode<A: Actor, O: Operations>(&self) -> Option<O> {
        if self.actor_type != A::TYPE_NAME || !O::NAMES.contains(&self.operation) {
            return None;
        }
        let tagged =
            serde_json::json!({ "operation": self.operation, "arguments": self.arguments });
        serde_json::from_value(tagged).ok()
    }
}

/// What an operator asks of [`Admin`](crate::admin::Admin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdminAction {
    /// Counts of messages, effects and reminders, for `status`.
    Status,
    /// The overview: the counts, actor types, busiest mailboxes and the last hour's work.
    Overview,
    /// What finished, failed and waited over a window of time, for the charts.
    Activity,
    /// Listing actor types and actors.
    ListActors,
    /// Reading one actor: its state, mailbox, reminders and effects.
    Inspect,
    /// Listing dead letters.
    ListDeadLetters,
    /// Enqueueing one dead letter again.
    RetryDeadLetter,
    /// Enqueueing every dead letter that matches a filter again.
    Redrive,
    /// Listing effects.
    ListEffects,
    /// Running a dead effect again.
    RetryEffect,
    /// Listing scheduled reminders.
    ListReminders,
    /// Pausing an actor: it runs nothing until resumed.
    Pause,
    /// Resuming a paused actor.
    Resume,
    /// Counting what a prune would delete, deleting nothing.
    PrunePreview,
    /// Deleting finished rows past their retention.
    Prune,
    /// Reading the audit log of administration calls.
    ReadAudit,
    /// Checking the database: schema, settings, a write and read round trip, the clock.
    Doctor,
    /// Listing the stored messages and reminders this build cannot decode.
    ListUndecodable,
}

impl AdminAction {
    /// The action's name, as the audit log stores it (`"pause"`, `"redrive"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Overview => "overview",
            Self::Activity => "activity",
            Self::ListActors => "list_actors",
            Self::Inspect => "inspect",
            Self::ListDeadLetters => "list_dead_letters",
            Self::RetryDeadLetter => "retry_dead_letter",
            Self::Redrive => "redrive",
            Self::ListEffects => "list_effects",
            Self::RetryEffect => "retry_effect",
            Self::ListReminders => "list_reminders",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::PrunePreview => "prune_preview",
            Self::Prune => "prune",
            Self::ReadAudit => "read_audit",
            Self::Doctor => "doctor",
            Self::ListUndecodable => "list_undecodable",
        }
    }

    /// Whether the action only reads: it changes no actor, message or effect.
    pub fn is_read_only(self) -> bool {
        !matches!(
            self,
            Self::RetryDeadLetter
                | Self::Redrive
                | Self::RetryEffect
                | Self::Pause
                | Self::Resume
                | Self::Prune
                | Self::Doctor
        )
    }
}

/// An administration call as the policy sees it, before anything is read or written.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AdminRequest<'a> {
    /// What is asked.
    pub action: AdminAction,
    /// What it is asked of: `"Type/id"` for one actor, `"message 42"`, `"effect 7"`, or a
    /// filter's description such as `"dead letters type=Show operation=hold"`.
    pub resource: &'a str,
    /// The operator's context, given with [`Admin::context`](crate::admin::Admin::context).
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

    /// Decides whether [`Reference::watch`](crate::Reference::watch) may follow the actor's
    /// committed states (the request's operation is `"watch"`). Denied unless the policy
    /// says otherwise: a policy written before watching existed allows none.
    fn authorize_subscription(&self, request: &Request<'_>) -> Result<(), Denied> {
        let _ = request;
        Err(Denied::new(
            "watching actors is not authorised: implement Policy::authorize_subscription",
        ))
    }

    /// Decides whether an operator may run an [`Admin`](crate::admin::Admin) call. Denied
    /// unless the policy says otherwise; every call, allowed or denied, is written to the
    /// audit table `solid_admin_events`.
    fn authorize_administration(&self, request: &AdminRequest<'_>) -> Result<(), Denied> {
        let _ = request;
        Err(Denied::new(
            "administration is not authorised: implement Policy::authorize_administration",
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

    fn authorize_subscription(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_administration(&self, _request: &AdminRequest<'_>) -> Result<(), Denied> {
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

    fn authorize_subscription(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Err(Denied::new(NO_POLICY))
    }

    fn authorize_administration(&self, _request: &AdminRequest<'_>) -> Result<(), Denied> {
        Err(Denied::new(NO_POLICY))
    }
}
