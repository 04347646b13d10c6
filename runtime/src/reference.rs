//! [`Reference`]: the address of one actor and the options of the calls made through it.
//!
//! The generated reference (`SeatInventoryRef`) wraps a `Reference` and adds one typed
//! method per command and query.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::actor::{Actor, Operations};
use crate::codec::{encode_operation, from_json, to_json};
use crate::error::{Error, Result};
use crate::limits::Payload;
use crate::policy::{Request, RequestKind};
use crate::runtime::Runtime;

/// The longest actor id, in bytes.
pub const MAX_ACTOR_ID_BYTES: usize = 255;

/// The address of one actor: its type, its id, the runtime, and per-call options.
///
/// Cheap to create and clone; creating one touches nothing.
pub struct Reference<A: Actor> {
    runtime: Option<Runtime>,
    id: String,
    timeout: Option<Duration>,
    context: Option<Value>,
    actor: PhantomData<fn() -> A>,
}

impl<A: Actor> Reference<A> {
    /// A reference through the process's default runtime (the first one started that is
    /// still open), resolved at each call.
    pub fn new(id: impl Into<String>) -> Self {
        Self::with_runtime(None, id.into())
    }

    pub(crate) fn with_runtime(runtime: Option<Runtime>, id: String) -> Self {
        Self {
            runtime,
            id,
            timeout: None,
            context: None,
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
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The caller's context (a user id, a tenant, ...), given to the policy with each call.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// The actor's committed state, read without a message and without creating the actor
    /// (an actor never written reads as its default state). Authorised as a query named
    /// `snapshot`.
    pub async fn snapshot(&self) -> Result<A> {
        let runtime = self.prepare()?;
        self.authorize(&runtime, RequestKind::Snapshot, "snapshot", &Value::Null)?;
        runtime.engine().snapshot::<A>(&self.id).await
    }

    /// Runs a command synchronously and returns its result; used by the generated methods.
    #[doc(hidden)]
    pub async fn call<T: DeserializeOwned>(&self, message: A::Message) -> Result<T> {
        let runtime = self.prepare()?;
        let encoded = encode_operation(&message)?;
        self.authorize(
            &runtime,
            RequestKind::Command,
            encoded.name,
            &encoded.arguments,
        )?;
        let arguments = to_json("arguments", &encoded.arguments)?;
        let engine = runtime.engine();
        engine
            .limits()
            .check(Payload::Arguments, encoded.name, arguments.len())?;
        let timeout = self.timeout.unwrap_or(runtime.sync_timeout());
        let result = engine
            .call::<A>(&self.id, message, arguments, timeout)
            .await?;
        from_json("result", A::TYPE_NAME, &self.id, &result)
    }

    /// Runs a query in mailbox order and returns its value; used by the generated methods.
    #[doc(hidden)]
    pub async fn ask<T: DeserializeOwned>(&self, query: A::Query) -> Result<T> {
        let runtime = self.prepare()?;
        let encoded = encode_operation(&query)?;
        self.authorize(
            &runtime,
            RequestKind::Query,
            query.name(),
            &encoded.arguments,
        )?;
        let timeout = self.timeout.unwrap_or(runtime.sync_timeout());
        let result = runtime.engine().ask::<A>(&self.id, query, timeout).await?;
        from_json("result", A::TYPE_NAME, &self.id, &result)
    }

    /// The runtime this call goes to, with the actor type known to it and the id checked.
    fn prepare(&self) -> Result<Runtime> {
        let runtime = match &self.runtime {
            Some(runtime) => runtime.clone(),
            None => Runtime::current().ok_or(Error::NoRuntime)?,
        };
        runtime.ensure_open()?;
        runtime.engine().register::<A>()?;
        validate_id(&self.id)?;
        Ok(runtime)
    }

    fn authorize(
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
        let verdict = match kind {
            RequestKind::Command => policy.authorize_message(&request),
            RequestKind::Query | RequestKind::Snapshot => policy.authorize_query(&request),
        };
        verdict.map_err(|denied| Error::Unauthorized {
            actor_type: A::TYPE_NAME,
            actor_id: self.id.clone(),
            operation: operation.to_owned(),
            reason: denied.reason().to_owned(),
        })
    }
}

/// Checks that an id is non-empty and at most [`MAX_ACTOR_ID_BYTES`] long.
pub(crate) fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidActorId {
            reason: "the id is empty; give every actor a non-empty id".to_owned(),
        });
    }
    if id.len() > MAX_ACTOR_ID_BYTES {
        return Err(Error::InvalidActorId {
            reason: format!(
                "the id is {} bytes, over the limit of {MAX_ACTOR_ID_BYTES}; use a shorter key \
                 (a hash or a database id)",
                id.len()
            ),
        });
    }
    Ok(())
}

impl<A: Actor> Clone for Reference<A> {
    fn clone(&self) -> Self {
        Self {
            runtime: self.runtime.clone(),
            id: self.id.clone(),
            timeout: self.timeout,
            context: self.context.clone(),
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
