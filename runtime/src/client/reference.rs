//! [`Reference`]: the address of one actor and the options of the calls made through it.
//!
//! The generated reference (`SeatInventoryRef`) wraps a `Reference` and adds one typed
//! method per command and query.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::actor::handler_scope::refuse_inside_handler;
use crate::actor::operation_codec::{encode_operation, store_operation};
use crate::actor::reminder::ScheduledReminder;
use crate::actor::{Actor, Operations};
use crate::client::message::MessageRef;
use crate::client::policy::{Denied, Request, RequestKind};
use crate::client::shared::Runtime;
use crate::codec::from_json;
use crate::codec::panic_text;
use crate::engine::read_until;
use crate::engine::{CallOptions, EnqueueOptions};
use crate::error::{Error, Result};
use crate::limits::{check_timeout, deadline_after, Payload};
use crate::store::ErrorKinds;
use crate::store::{ActorKey, MessageLookup};
use crate::time::clock::IntoDuration;
use crate::time::saturating::later;
use crate::validate::{validate_id, validate_key};

/// An actor type with a typed reference (`SeatInventoryRef`), through which callers address
/// one actor of the type; implemented by `#[actor]`.
///
/// Generic code names it to reach an actor's typed reference:
/// `fn open<A: Addressable>(runtime: &Runtime, id: &str) -> A::Reference`.
pub trait Addressable: Actor {
    /// The typed reference callers use (`SeatInventoryRef`).
    type Reference: From<Reference<Self>>;
}

/// The address of one actor: its type, its id, the runtime, and per-call options.
///
/// Cheap to create and clone; creating one touches nothing.
pub struct Reference<A: Actor> {
    runtime: Option<Runtime>,
    id: String,
    timeout: Option<Duration>,
    context: Option<Value>,
    idempotency_key: Option<String>,
    actor: PhantomData<fn() -> A>,
}

impl<A: Actor> Reference<A> {
    /// A reference through the runtime of the enclosing [`Runtime::scope`], else the
    /// process default ([`Runtime::make_default`]), resolved at each call.
    pub fn new(id: impl Into<String>) -> Self {
        Self::with_runtime(None, id.into())
    }

    /// A reference to the actor that a create request under idempotency key `key` makes, in
    /// `scope` (a tenant, a caller), with `key` set as its calls' idempotency key.
    ///
    /// Idempotency keys belong to one actor, so a create endpoint that made up a new id for
    /// each request could not deduplicate by key. Here the id comes from the scope and the
    /// key (a UUID named by them and the actor type): a retry of the request names the same
    /// actor, and its first command, under the key, answers what the first request's did. The
    /// same key in another scope names another actor, so two clients that pick one key never
    /// share an order. Through the process default runtime, as [`Reference::new`].
    ///
    /// The key goes with every call through this reference: make the create call through
    /// it, and later calls through `reference(id)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use solid_objects::prelude::*;
    /// #[actor]
    /// #[derive(Default)]
    /// pub struct Order { items: Vec<String> }
    ///
    /// #[actor]
    /// impl Order {
    ///     #[command]
    ///     pub fn place(&mut self, items: Vec<String>) -> usize {
    ///         self.items = items;
    ///         self.items.len()
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # Runtime::builder().sqlite(dir.path().join("a.db")).policy(AllowAll).set_default().start().await?;
    /// // POST /orders with `Idempotency-Key: k-1`, from tenant 7, sent twice.
    /// let order = Order::reference_for_key("tenant-7", "k-1");
    /// assert_eq!(order.place(vec!["book".into()]).await?, 1);
    /// let retry = Order::reference_for_key("tenant-7", "k-1");
    /// assert_eq!(retry.id(), order.id());
    /// assert_eq!(retry.place(vec!["book".into()]).await?, 1); // answered, not run again
    /// // Another tenant's key of the same text is another order.
    /// assert_ne!(Order::reference_for_key("tenant-8", "k-1").id(), order.id());
    /// # Ok(()) }
    /// ```
    pub fn for_key(scope: &str, key: impl Into<String>) -> Self {
        Self::for_key_with_runtime(None, scope, key.into())
    }

    pub(crate) fn for_key_with_runtime(runtime: Option<Runtime>, scope: &str, key: String) -> Self {
        let id = crate::ids::id_for_key(A::TYPE_NAME, scope, &key);
        Self::with_runtime(runtime, id).idempotency_key(key)
    }

    pub(crate) fn with_runtime(runtime: Option<Runtime>, id: String) -> Self {
        Self {
            runtime,
            id,
            timeout: None,
            context: None,
            idempotency_key: None,
            actor: PhantomData,
        }
    }

    /// The actor's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How long a synchronous call or query may wait for its turn and for the actor's
    /// earlier messages (default: the runtime's, 5 s). On timeout an enqueued message stays
    /// in the mailbox and runs later.
    pub fn timeout(mut self, timeout: impl IntoDuration) -> Self {
        self.timeout = Some(timeout.into_duration());
        self
    }

    /// The caller's context (a user id, a tenant, ...), given to the policy with each call.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// Makes the next synchronous call idempotent under `key`: if this actor already has a
    /// message with that key (and the same operation and arguments), the call answers with
    /// that message's result instead of running again.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The message this actor received under an idempotency key, if it is still kept.
    /// Authorised as a query named `message_with_key`, with the key as its argument, and then
    /// as the command the message carries: only a caller allowed that command sees it.
    pub async fn message_with_key(&self, key: &str) -> Result<Option<MessageRef>> {
        refuse_inside_handler(A::TYPE_NAME, "message_with_key")?;
        let runtime = self.prepare()?;
        validate_key("idempotency key", key)?;
        let arguments = serde_json::json!({ "key": key });
        self.authorize(&runtime, RequestKind::Query, "message_with_key", &arguments)?;
        let lookup = MessageLookup::IdempotencyKey(
            ActorKey {
                actor_type: A::TYPE_NAME,
                actor_id: &self.id,
            },
            key,
        );
        let deadline = deadline_after(self.timeout_on(&runtime)?);
        let read = runtime.engine().reads().message(lookup);
        let Some(record) = read_until(deadline, read).await? else {
            return Ok(None);
        };
        // The message reveals a command's result (and lets its holder drive the mailbox
        // through `wait`): only a caller allowed that command may have it.
        let arguments = serde_json::from_str(&record.arguments).unwrap_or(Value::Null);
        self.authorize(
            &runtime,
            RequestKind::Command,
            &record.operation,
            &arguments,
        )?;
        Ok(Some(MessageRef::new(runtime.clone(), &record)))
    }

    /// The actor's committed state, read without a message and without creating the actor
    /// (an actor never written reads as its default state). Authorised as a query named
    /// `snapshot`.
    pub async fn snapshot(&self) -> Result<A> {
        refuse_inside_handler(A::TYPE_NAME, "snapshot")?;
        let runtime = self.prepare()?;
        self.authorize(&runtime, RequestKind::Snapshot, "snapshot", &Value::Null)?;
        let deadline = deadline_after(self.timeout_on(&runtime)?);
        read_until(deadline, runtime.engine().calls().snapshot::<A>(&self.id)).await
    }

    /// The actor's scheduled reminders, the next due first, for operators: each one's name,
    /// key and due time, and for a recurring one its interval. Authorised as a query named
    /// `reminders`.
    pub async fn reminders(&self) -> Result<Vec<ScheduledReminder>> {
        refuse_inside_handler(A::TYPE_NAME, "reminders")?;
        let runtime = self.prepare()?;
        self.authorize(&runtime, RequestKind::Reminders, "reminders", &Value::Null)?;
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id: &self.id,
        };
        let deadline = deadline_after(self.timeout_on(&runtime)?);
        read_until(deadline, runtime.engine().reminders().scheduled(key)).await
    }

    /// Destroys the actor: its state, its reminders and its unfinished messages go (callers
    /// waiting on those messages get [`Error::Destroyed`]); effects its turns already
    /// committed still run. Its next message starts a new incarnation from the default
    /// state. Waits for a turn of the actor in flight elsewhere, until the timeout.
    /// Authorised by [`Policy::authorize_destroy`](crate::Policy::authorize_destroy), which
    /// denies unless the policy allows it.
    pub async fn destroy(&self) -> Result<()> {
        refuse_inside_handler(A::TYPE_NAME, "destroy")?;
        let runtime = self.prepare()?;
        self.authorize(&runtime, RequestKind::Destroy, "destroy", &Value::Null)?;
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id: &self.id,
        };
        let timeout = self.timeout_on(&runtime)?;
        runtime
            .engine()
            .destroy()
            .actor(key, timeout)
            .await
            .map_err(|error| match error {
                busy if busy.is_busy() => Error::SyncTimeout {
                    actor_type: A::TYPE_NAME,
                    actor_id: self.id.clone(),
                    operation: "destroy",
                    message_id: None,
                    request_id: None,
                    waiting_on: "the actor, whose current turn held it until the timeout"
                        .to_owned(),
                    timeout,
                },
                other => other,
            })
    }

    /// Runs a command synchronously and returns its result; used by the generated methods.
    #[doc(hidden)]
    pub async fn call<T: DeserializeOwned>(&self, message: A::Message) -> Result<T> {
        let (runtime, message, arguments) = self.admit(message)?;
        if let Some(key) = &self.idempotency_key {
            validate_key("idempotency key", key)?;
        }
        let options = CallOptions {
            timeout: self.timeout_on(&runtime)?,
            idempotency_key: self.idempotency_key.as_deref(),
        };
        let operation = message.name();
        let result = runtime
            .engine()
            .calls()
            .call::<A>(&self.id, message, arguments, options)
            .await?;
        // The command ran: a result that does not read must not read as "retry".
        from_json("result", A::TYPE_NAME, &self.id, &result).map_err(|error| match error {
            Error::Decode { source, .. } => Error::ResultUnreadable {
                actor_type: A::TYPE_NAME,
                actor_id: self.id.clone(),
                operation,
                source,
            },
            error => error,
        })
    }

    /// Checks a command at the door, before anything is written: the caller may send it (a
    /// command, not a reminder or an effect reply, that the policy allows), and its arguments
    /// are within the limit and read back as the same operation. Returns the message as it
    /// will be read.
    fn admit(&self, message: A::Message) -> Result<(Runtime, A::Message, String)> {
        refuse_inside_handler(A::TYPE_NAME, message.name())?;
        let runtime = self.prepare()?;
        if message.is_reminder() {
            return Err(Error::NotCallable {
                actor_type: A::TYPE_NAME,
                operation: message.name().to_owned(),
            });
        }
        if message.is_reply() {
            return Err(Error::ReplyNotCallable {
                actor_type: A::TYPE_NAME,
                operation: message.name().to_owned(),
            });
        }
        let (stored, read_back) = store_operation(&message)?;
        self.authorize(&runtime, RequestKind::Command, stored.name, &stored.value)?;
        runtime.engine().core().config().limits.check(
            Payload::Arguments,
            stored.name,
            stored.arguments.len(),
        )?;
        Ok((runtime, read_back, stored.arguments))
    }

    /// How long a call through this reference may wait; under a millisecond is refused
    /// before anything is written.
    fn timeout_on(&self, runtime: &Runtime) -> Result<Duration> {
        check_timeout(self.timeout.unwrap_or(runtime.sync_timeout()))
    }

    /// Starts an asynchronous call: the generated `enqueue()` wraps it.
    #[doc(hidden)]
    pub fn enqueue_builder(&self) -> Enqueue<A> {
        Enqueue {
            reference: self.clone(),
            idempotency_key: None,
            available_at: None,
            delay: None,
        }
    }

    /// Runs a query in mailbox order and returns its value; used by the generated methods.
    #[doc(hidden)]
    pub async fn ask<T: DeserializeOwned>(&self, query: A::Query) -> Result<T> {
        refuse_inside_handler(A::TYPE_NAME, query.name())?;
        let runtime = self.prepare()?;
        let encoded = encode_operation(&query)?;
        self.authorize(
            &runtime,
            RequestKind::Query,
            query.name(),
            &encoded.arguments,
        )?;
        let timeout = self.timeout_on(&runtime)?;
        let result = runtime
            .engine()
            .calls()
            .ask::<A>(&self.id, query, timeout)
            .await?;
        from_json("result", A::TYPE_NAME, &self.id, &result)
    }

    /// The runtime this call goes to, with the actor type known to it and the id checked.
    pub(crate) fn prepare(&self) -> Result<Runtime> {
        let runtime = match &self.runtime {
            Some(runtime) => runtime.clone(),
            None => Runtime::current().ok_or(Error::NoRuntime)?,
        };
        runtime.ensure_open()?;
        runtime.engine().register::<A>()?;
        validate_id(&self.id)?;
        Ok(runtime)
    }

    pub(crate) fn authorize(
        &self,
        runtime: &Runtime,
        kind: RequestKind,
        operation: &str,
        arguments: &Value,
    ) -> Result<()> {
        let request = Request {
            kind,
            actor_type: A::TYPE_NAME,
            actor_id: &self.id,
            operation,
            arguments,
            context: self.context.as_ref(),
        };
        let policy = runtime.policy();
        // The policy is user code: a panic in it denies the call.
        let verdict = catch_unwind(AssertUnwindSafe(|| match kind {
            RequestKind::Command => policy.authorize_message(&request),
            RequestKind::Query | RequestKind::Snapshot | RequestKind::Reminders => {
                policy.authorize_query(&request)
            }
            RequestKind::Destroy => policy.authorize_destroy(&request),
            RequestKind::Subscription => policy.authorize_subscription(&request),
        }))
        .unwrap_or_else(|panic| {
            // What a panic says is for the operator's log, not the caller.
            tracing::error!(
                actor_type = A::TYPE_NAME,
                operation,
                panic = panic_text(&*panic),
                "the authorisation policy panicked; the call is denied"
            );
            Err(Denied::new("the authorisation policy failed"))
        });
        verdict.map_err(|denied| Error::Unauthorized {
            actor_type: A::TYPE_NAME,
            actor_id: self.id.clone(),
            operation: operation.to_owned(),
            reason: denied.reason().to_owned(),
        })
    }
}

impl<A: Actor> Clone for Reference<A> {
    fn clone(&self) -> Self {
        Self {
            runtime: self.runtime.clone(),
            id: self.id.clone(),
            timeout: self.timeout,
            context: self.context.clone(),
            idempotency_key: self.idempotency_key.clone(),
            actor: PhantomData,
        }
    }
}

impl<A: Actor> fmt::Debug for Reference<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reference")
            .field("actor_type", &A::TYPE_NAME)
            .field("id", &self.id)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The options of an asynchronous call; the generated `NameEnqueue` wraps it and adds one
/// method per command.
pub struct Enqueue<A: Actor> {
    reference: Reference<A>,
    idempotency_key: Option<String>,
    available_at: Option<DateTime<Utc>>,
    delay: Option<Duration>,
}

impl<A: Actor> Enqueue<A> {
    /// At most one message per actor and key: enqueuing again with the same key (and the
    /// same operation and arguments) returns the first message; other arguments are
    /// [`Error::IdempotencyConflict`].
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Not run before `at` (by the runtime's clock). Until then it holds back none of the
    /// actor's other messages: it takes its turn once it is due.
    pub fn available_at(mut self, at: DateTime<Utc>) -> Self {
        self.available_at = Some(at);
        self
    }

    /// Not run before `delay` from now (by the runtime's clock; a delay past the latest
    /// time the runtime represents waits until then). Until then it holds back none of the
    /// actor's other messages: it takes its turn once it is due.
    pub fn delay(mut self, delay: impl IntoDuration) -> Self {
        self.delay = Some(delay.into_duration());
        self
    }

    /// Stores the message and returns as soon as it is durable.
    #[doc(hidden)]
    pub async fn send<T>(&self, message: A::Message) -> Result<MessageRef<T>> {
        let (runtime, message, arguments) = self.reference.admit(message)?;
        if let Some(key) = &self.idempotency_key {
            validate_key("idempotency key", key)?;
        }
        let engine = runtime.engine();
        let available_at = match (self.available_at, self.delay) {
            (Some(at), _) => Some(at),
            (None, Some(delay)) => Some(later(engine.core().now(), delay)),
            (None, None) => None,
        };
        let options = EnqueueOptions {
            idempotency_key: self.idempotency_key.as_deref(),
            available_at,
            timeout: self.reference.timeout_on(&runtime)?,
        };
        let key = ActorKey {
            actor_type: A::TYPE_NAME,
            actor_id: &self.reference.id,
        };
        let timeout = options.timeout;
        let enqueued = engine
            .calls()
            .enqueue(key, message.name(), &arguments, options)
            .await
            .map_err(|error| match error {
                busy if busy.is_busy() => Error::SyncTimeout {
                    actor_type: A::TYPE_NAME,
                    actor_id: self.reference.id.clone(),
                    operation: message.name(),
                    message_id: None,
                    request_id: None,
                    waiting_on: "the database, which other turns held until the timeout; \
                                 nothing was enqueued"
                        .to_owned(),
                    timeout,
                },
                other => other,
            })?;
        Ok(MessageRef::from_parts(
            runtime.clone(),
            A::TYPE_NAME,
            &self.reference.id,
            enqueued.message_id,
            enqueued.request_id,
        ))
    }
}

impl<A: Actor> fmt::Debug for Enqueue<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enqueue")
            .field("reference", &self.reference)
            .field("idempotency_key", &self.idempotency_key)
            .field("available_at", &self.available_at)
            .field("delay", &self.delay)
            .finish()
    }
}
