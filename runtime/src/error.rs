//! The errors a call can end with, and the business [`Rejection`] a handler returns.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A business result that ends a command without changing anything.
///
/// A handler returns `Err(Rejection)` (usually built with [`reject!`](crate::reject)) when the
/// request is valid input but the actor refuses it: not enough seats, a stale revision. The
/// runtime commits the message as rejected, keeps none of the handler's changes, never retries
/// it, and the caller receives [`Error::Rejected`].
///
/// ```
/// use solid_objects::prelude::*;
///
/// let rejection = reject!(not_enough_seats, "Only {} seats are left", 2);
/// assert_eq!(rejection.code(), "not_enough_seats");
/// assert_eq!(rejection.message(), "Only 2 seats are left");
/// ```
///
/// Its code is always snake_case: the only ways to make one are [`reject!`] (checked at
/// compile time), [`Rejection::new`] (checked when called) and `#[derive(Rejection)]`.
///
/// [`reject!`]: crate::reject
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    code: String,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    details: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
}

impl Rejection {
    /// A rejection with a code and a message, if the code is snake_case (lowercase letters,
    /// digits and underscores, starting with a letter), as callers match on it; prefer
    /// [`reject!`](crate::reject), which checks the code at compile time.
    ///
    /// ```
    /// use solid_objects::{Error, Rejection};
    ///
    /// let rejection = Rejection::new("room_not_found", "No room 12")?;
    /// assert_eq!(rejection.code(), "room_not_found");
    /// assert!(matches!(
    ///     Rejection::new("room not found", "No room 12"),
    ///     Err(Error::InvalidRejectionCode { .. })
    /// ));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Result<Self, Error> {
        let code = code.into();
        if !is_snake_case(&code) {
            return Err(Error::InvalidRejectionCode { code });
        }
        Ok(Self::checked(code, message))
    }

    /// A rejection whose code was checked already (by `reject!` at compile time).
    pub(crate) fn checked(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: None,
            status: None,
        }
    }

    /// The same rejection answered over HTTP with `status` (a 4xx code that
    /// `#[rejection(status = ..)]` checked at compile time).
    pub(crate) fn with_checked_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The stable, machine-readable code in snake_case, such as `not_enough_seats`.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The sentence for the person who made the request.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The structured details for the caller, if any.
    pub fn details(&self) -> Option<&serde_json::Value> {
        self.details.as_ref()
    }

    /// Attaches structured details for the caller.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The HTTP status this rejection names for the axum response (feature `axum`), if any.
    ///
    /// A variant of a `#[derive(Rejection)]` enum names one with
    /// `#[rejection(status = 404)]`; a rejection that names none is answered with
    /// 409 Conflict. The status is stored with the rejection, so a caller that reads the
    /// result later (an enqueued call, an idempotent replay) gets the same one.
    pub fn status(&self) -> Option<u16> {
        self.status
    }
}

/// A rejection enum: each variant a rejection with a stable code, its fields the details.
/// Implemented by `#[derive(Rejection)]`; a command returns `Result<T, MyRejection>`, and a
/// caller recovers it with [`Error::rejection`].
///
/// ```
/// use solid_objects::prelude::*;
///
/// #[derive(Debug, PartialEq, Rejection)]
/// enum HoldError {
///     #[rejection(message = "Only {left} seats are left")]
///     NotEnoughSeats { left: u32 },
///     InvalidSeats,
/// }
///
/// let error = Error::Rejected(TypedRejection::into_rejection(HoldError::NotEnoughSeats { left: 2 }));
/// assert_eq!(error.to_string(), "rejected: not_enough_seats: Only 2 seats are left");
/// assert_eq!(error.rejection::<HoldError>(), Some(HoldError::NotEnoughSeats { left: 2 }));
/// ```
pub trait TypedRejection: Sized {
    /// The stored codes of the variants.
    const CODES: &'static [&'static str];

    /// The rejection as stored: its code, message and details.
    fn into_rejection(self) -> Rejection;

    /// The variant a stored rejection is, if its code is one of these and its details fit.
    fn from_rejection(rejection: &Rejection) -> Option<Self>;
}

/// Whether a rejection code is snake_case: lowercase letters, digits and underscores,
/// starting with a letter.
fn is_snake_case(code: &str) -> bool {
    code.starts_with(|first: char| first.is_ascii_lowercase())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Rejection {}

/// Everything a call to the runtime can end with, other than its typed result.
///
/// Each variant names the actor and says what to do. Matching is exhaustive only with a
/// wildcard arm: new variants may be added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The handler rejected the request; nothing changed and it will not be retried.
    #[error("rejected: {0}")]
    Rejected(Rejection),

    /// The policy refused the call; nothing was written.
    #[error("{operation} on {actor_type} {actor_id:?} is not authorised: {reason}")]
    Unauthorized {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The operation that was refused.
        operation: String,
        /// Why, from the policy.
        reason: String,
    },

    /// The policy refused an administration call; nothing was read or written but the
    /// audit row that says so.
    #[error("{action} on {resource} is not authorised: {reason}")]
    AdministrationDenied {
        /// The action refused (`"pause"`, `"redrive"`, ...).
        action: &'static str,
        /// What it was asked of.
        resource: String,
        /// Why, from the policy.
        reason: String,
    },

    /// A rejection code that is not snake_case, given to [`Rejection::new`].
    ///
    /// Returned with `?` from a handler, it is a permanent [`Failure`](crate::Failure): no
    /// attempt makes a different code, so the message is a dead letter at once.
    #[error("the rejection code {code:?} must be snake_case (lowercase letters, digits and underscores, starting with a letter), such as \"not_enough_seats\"")]
    InvalidRejectionCode {
        /// The refused code.
        code: String,
    },

    /// A timeout too short to do anything in (under a millisecond); nothing was written.
    #[error("a timeout of {timeout:?} is too short to wait for anything; give at least 1 ms")]
    InvalidTimeout {
        /// The refused timeout.
        timeout: Duration,
    },

    /// The actor id is empty, too long or holds a byte a database refuses; nothing was
    /// written.
    #[error("invalid actor id: {reason}")]
    InvalidActorId {
        /// What is wrong with the id.
        reason: String,
    },

    /// An idempotency key or a reminder key is empty, too long or holds a byte a database
    /// refuses; nothing was written.
    #[error("invalid {what}: {reason}")]
    InvalidKey {
        /// Which key: `idempotency key` or `reminder key`.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A value serialises to JSON that could not be read back (nested deeper than the
    /// parser allows, or refused by its own `Deserialize`); nothing was written.
    #[error("the {what} of {operation} would not read back: {reason}")]
    UnreadablePayload {
        /// Which payload: arguments, state, result...
        what: &'static str,
        /// The operation concerned.
        operation: String,
        /// Why it would not read back.
        reason: String,
    },

    /// A handler called an actor through a reference (a call, an enqueue, a query, a
    /// snapshot, a wait): that would wait for the very turn that runs the handler, or for
    /// the connection it holds. Nothing was written. A handler reaches other actors by
    /// sending them commands (`turn.send::<B>(id).command(..)`), and they answer by sending
    /// back. (A task the handler spawns is not the handler and is not refused: it must not
    /// make such calls while the handler awaits it either.) Passed on from the handler with
    /// `?`, it is a permanent failure: its message is a dead letter at once.
    #[error("the handler of {actor_type} {actor_id:?} used {operation} on {target_type} through a reference, which would wait for the turn that runs the handler; from a handler, send a command instead (turn.send::<{target_type}>(id).<command>(..), joining that mailbox when this turn commits) and have the target send back what the handler needs")]
    CalledFromHandler {
        /// The stored type name of the actor whose handler made the call.
        actor_type: &'static str,
        /// Its id.
        actor_id: String,
        /// The stored type name of the actor it called.
        target_type: String,
        /// The operation it called.
        operation: String,
    },

    /// A reminder was called like a command. Only the actor's own schedule runs reminders:
    /// schedule it with `turn.schedule(at, key)`, or deliver it in a test with
    /// `runtime.testing().deliver(..)`.
    #[error("{operation} is a reminder of {actor_type}: only the actor's own schedule runs it; schedule it with turn.schedule(at, key), or use runtime.testing().deliver(..) in tests")]
    NotCallable {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The reminder.
        operation: String,
    },

    /// An effect reply was called like a command. Only the runtime delivers a `#[reply]`,
    /// with the outcome of an effect its actor emitted, so no caller can forge one: name it
    /// with `turn.emit(effect).on_success().<reply>()`, or deliver it in a test with
    /// `runtime.testing().deliver(..)`.
    #[error("{operation} is an effect reply of {actor_type}: only the runtime delivers it, with the outcome of an effect the actor emitted; name it with turn.emit(effect).on_success() or .on_failure(), or use runtime.testing().deliver(..) in tests")]
    ReplyNotCallable {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The reply.
        operation: String,
    },

    /// A handler ran longer than the turn timeout ([`Builder::turn_timeout`]): it was
    /// abandoned, its changes rolled back, and the attempt counted.
    ///
    /// [`Builder::turn_timeout`]: crate::Builder::turn_timeout
    #[error("{operation} on {actor_type} {actor_id:?} ran longer than the turn timeout of {timeout:?} and was abandoned; make the handler shorter (no network I/O in a handler: emit an effect) or raise Builder::turn_timeout")]
    TurnTimeout {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The operation that ran too long.
        operation: &'static str,
        /// The turn timeout.
        timeout: Duration,
    },

    /// A payload is larger than the runtime's limit; nothing was written.
    #[error("the {what} of {operation} is {size} bytes, over the limit of {limit} bytes; send less or raise the limit with Builder::limits")]
    PayloadTooLarge {
        /// Which payload: arguments, result or state.
        what: &'static str,
        /// The operation concerned.
        operation: String,
        /// Its size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },

    /// A synchronous call (or an enqueue, waiting for the database) did not finish within
    /// its timeout.
    ///
    /// With a `message_id`, the call's message was committed before the time ran out: it is
    /// still queued and runs later. Calling again would run it twice: wait for it instead,
    /// with [`Runtime::message`](crate::Runtime::message) and its `request_id`.
    #[error("{operation} on {actor_type} {actor_id:?} did not finish within {timeout:?}: {waiting_on}{}",
        queued_note(*message_id, request_id.as_deref().map(String::as_str)))]
    SyncTimeout {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The operation that was called.
        operation: &'static str,
        /// The message's id, if it was enqueued (it then still runs later).
        message_id: Option<i64>,
        /// The message's request id, if it was enqueued, or if its turn joined a group commit
        /// that had not ended at the timeout (the turn is then kept if that group commits):
        /// what [`Runtime::message`](crate::Runtime::message) finds it by. (Boxed, to keep
        /// [`Error`] small.)
        request_id: Option<Box<String>>,
        /// What the call was waiting on when the time ran out.
        waiting_on: String,
        /// The timeout that ran out.
        timeout: Duration,
    },

    /// The call's message was committed to the actor's mailbox, but the call stopped waiting
    /// for it before it ran, for the `reason` given: the message is still queued and runs
    /// later (once the reason is gone).
    ///
    /// Calling again would run it twice. Wait for it instead: `runtime.message(request_id)`
    /// finds it ([`Runtime::message`](crate::Runtime::message)), and its
    /// [`MessageRef::wait`](crate::MessageRef::wait) gives its result.
    #[error("{operation} on {actor_type} {actor_id:?} is queued as message {message_id} (request id {request_id}) and runs later, but the call stopped waiting for it: {reason}; do not call again, which would run it twice: wait for it with runtime.message({request_id:?})")]
    Queued {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The operation that was called.
        operation: &'static str,
        /// The id of the queued message.
        message_id: i64,
        /// Its request id, which [`Runtime::message`](crate::Runtime::message) finds it by.
        request_id: String,
        /// Why the call stopped waiting: a state this build cannot read yet, an earlier
        /// message of an operation it does not know, a pause, a database error...
        #[source]
        reason: Box<Error>,
    },

    /// The handler panicked or failed; its changes were rolled back.
    ///
    /// A call's failed attempt is committed with its message: with a `retry_at`, the message
    /// is still queued and runs again then (calling again would run it twice: wait for it
    /// with [`Runtime::message`](crate::Runtime::message) and its `request_id`); without, it
    /// is a dead letter. A query's failure has no message and no request id.
    #[error("{operation} on {actor_type} {actor_id:?} failed (attempt {attempts}): {error}{}",
        failed_note(*retry_at, request_id.as_deref().map(String::as_str)))]
    HandlerFailed {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The operation that failed.
        operation: &'static str,
        /// The panic message or error text.
        error: String,
        /// How many attempts have been made.
        attempts: i64,
        /// When the next attempt runs, or `None` when the message became a dead letter.
        retry_at: Option<chrono::DateTime<chrono::Utc>>,
        /// The request id of the call's message, which
        /// [`Runtime::message`](crate::Runtime::message) finds it by; `None` for a query.
        /// (Boxed, to keep [`Error`] small.)
        request_id: Option<Box<String>>,
    },

    /// A stored message names an operation this actor type does not have. It is left in
    /// the mailbox for a build that has it; the actor's later messages wait behind it.
    #[error("{actor_type} has no operation {operation:?} (stored message {message_id}); deploy a build that has it, or remove the message")]
    UnknownOperation {
        /// The stored type name of the actor.
        actor_type: String,
        /// The unknown operation.
        operation: String,
        /// The id of the stored message.
        message_id: i64,
    },

    /// A stored reminder row cannot be fired: a column does not read as its type, or its
    /// interval or catch-up policy is not one the runtime writes. It is left as it is, and
    /// the other reminders fire.
    #[error("the stored reminder {id} cannot be fired: {reason}; correct or delete its row in solid_reminders (nothing was changed, and the other reminders fire)")]
    UnreadableReminder {
        /// The reminder row's id.
        id: i64,
        /// What does not read.
        reason: String,
    },

    /// A command ran and its result was committed, but the result does not deserialise into
    /// the type the caller reads it as (a build that stored it in another form, say): the
    /// message is not run again, and calling again would run the command twice.
    #[error("{operation} on {actor_type} {actor_id:?} ran and its result was committed, but the result does not deserialise: {source}; do not call again, which would run it twice: make the result type accept the stored form (for example with #[serde(default)])")]
    ResultUnreadable {
        /// The stored type name of the actor.
        actor_type: &'static str,
        /// The actor's id.
        actor_id: String,
        /// The command that ran.
        operation: &'static str,
        /// The serde error.
        source: serde_json::Error,
    },

    /// A stored payload (state, arguments or result) does not deserialise into the Rust types.
    #[error("the stored {what} of {actor_type} {actor_id:?} does not deserialise: {source}; make the type accept the stored form (for example with #[serde(default)]) and retry")]
    Decode {
        /// Which payload.
        what: &'static str,
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
        /// The serde error.
        source: serde_json::Error,
    },

    /// The actor's state was stored by a newer build (its `#[actor(version = ..)]` is higher
    /// than this build's). Nothing is read or changed: during a rolling deploy the message
    /// waits for a build that reads it, uncounted, as a message of an unknown operation does.
    ///
    /// A call that gets this error wrote nothing; a call whose message was already queued
    /// (behind an earlier message, or under its idempotency key) gets [`Error::Queued`]
    /// with this as its reason instead.
    #[error("the stored state of {actor_type} {actor_id:?} is version {stored}, newer than this build's version {current}; a newer build wrote it: let that build run this actor (this build left the state as it is)")]
    StateFromNewerBuild {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
        /// The version stored with the state.
        stored: i64,
        /// This build's `#[actor(version = ..)]`.
        current: u32,
    },

    /// The actor's state is older than this build's version, and the actor has no
    /// `#[migrate(from = ..)]` for one of the versions between. Nothing is changed; the
    /// message waits, uncounted, for a build that has the migration.
    ///
    /// A call that gets this error wrote nothing; a call whose message was already queued
    /// gets [`Error::Queued`] with this as its reason instead.
    #[error("the stored state of {actor_type} {actor_id:?} is version {stored} and this build is version {current}, but it has no #[migrate(from = {from})]; add that migration (this build left the state as it is)")]
    NoMigration {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
        /// The version stored with the state.
        stored: i64,
        /// The version no migration starts from.
        from: i64,
        /// This build's `#[actor(version = ..)]`.
        current: u32,
    },

    /// A `#[migrate(from = ..)]` function returned an error or panicked. Inside a turn this
    /// is a failed attempt, retried and then a dead letter like any other; nothing is stored.
    #[error("the migration of {actor_type} {actor_id:?} from version {from} failed: {message}")]
    MigrationFailed {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
        /// The version the failing migration starts from.
        from: i64,
        /// The migration's error or panic.
        message: String,
    },

    /// User code panicked outside a handler: a `Serialize` or `Deserialize` impl, or a
    /// policy. Inside a turn this is a failed attempt, retried like any other.
    #[error("{during} panicked: {message}")]
    Panicked {
        /// What the runtime was doing: "serialising the state", say.
        during: String,
        /// The panic's message.
        message: String,
    },

    /// A value could not be serialised to JSON.
    #[error("cannot serialise the {what}: {source}")]
    Encode {
        /// Which payload.
        what: &'static str,
        /// The serde error.
        source: serde_json::Error,
    },

    /// `Actor::reference(id)` has no runtime to go to: no enclosing `runtime.scope(..)` and
    /// no process default.
    #[error("no default solid-objects runtime: call runtime.make_default() (or Builder::set_default()), run the call inside runtime.scope(..), or use runtime.reference::<A>(id)")]
    NoRuntime,

    /// The runtime was closed.
    #[error("the runtime is closed")]
    Closed,

    /// Two different actor types use the same stored type name.
    #[error("two actor types are both named {name:?}; give one a distinct name with #[actor(name = \"...\")]")]
    DuplicateActorName {
        /// The stored type name used twice.
        name: String,
    },

    /// The idempotency key was already used by this actor for another operation or other
    /// arguments; nothing was written.
    #[error("the idempotency key {key:?} was already used for {existing_operation} with other arguments; use a new key for a new request")]
    IdempotencyConflict {
        /// The key.
        key: String,
        /// The operation of the message that has it.
        existing_operation: String,
    },

    /// The actor's mailbox holds as many unfinished messages as allowed; nothing was written.
    #[error("the mailbox of {actor_type} {actor_id:?} holds {limit} unfinished messages, its limit; wait for them to run (is a worker running?) or raise Limits::max_unfinished")]
    MailboxFull {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
        /// The configured limit.
        limit: i64,
    },

    /// The actor was destroyed before the message ran: it never will.
    #[error("{actor_type} {actor_id:?} was destroyed before the message ran; it never will (the actor's next message starts a new incarnation)")]
    Destroyed {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
    },

    /// An operator paused the actor: it takes no calls and runs nothing until resumed
    /// (messages already in its mailbox wait there).
    #[error("{actor_type} {actor_id:?} is paused by an operator; try again after it is resumed (Admin::resume, or `solid-objects resume`)")]
    Paused {
        /// The stored type name of the actor.
        actor_type: String,
        /// The actor's id.
        actor_id: String,
    },

    /// No message has that id, request id or idempotency key.
    #[error("no such message")]
    MessageNotFound,

    /// Only a dead letter can be retried.
    #[error(
        "message {message_id} is {status}, not a dead letter; only dead letters can be retried"
    )]
    NotDeadLetter {
        /// The message's id.
        message_id: i64,
        /// Its status.
        status: &'static str,
    },

    /// The message failed on every attempt and is now a dead letter.
    #[error("the message {request_id} is a dead letter after {attempts} attempts: {error}; an operator can retry it with Admin::retry_dead_letter")]
    DeadLetter {
        /// The message's request id.
        request_id: String,
        /// The last attempt's error.
        error: String,
        /// How many attempts were made.
        attempts: i64,
    },

    /// Waiting for an enqueued message timed out; it is still queued and runs later.
    #[error("the message {request_id} did not finish within {timeout:?}: {waiting_on}; it is still queued")]
    WaitTimeout {
        /// The message's request id.
        request_id: String,
        /// What it was waiting on when the time ran out.
        waiting_on: String,
        /// The timeout that ran out.
        timeout: Duration,
    },

    /// The runtime's configuration is incomplete or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The database server did not let the runtime connect within the connect timeout: it
    /// refused the connection (nothing listens on that port) or never answered.
    #[error("cannot connect to {backend} at {host}:{port} within the connect timeout of {timeout:?}: {reason}; check that the server runs and that the URL names its host and port, or raise the connect timeout (Builder::connect_timeout, or the command line's --connect-timeout)")]
    Unreachable {
        /// `PostgreSQL` or `MySQL`.
        backend: &'static str,
        /// The host the URL names (or the socket path).
        host: String,
        /// The port the URL names.
        port: u16,
        /// What happened: it refused the connection, or it did not answer.
        reason: String,
        /// The connect timeout that ran out.
        timeout: Duration,
    },

    /// No host of the database accepted writes within the call's deadline: the server is
    /// down or restarting, or a failover is under way (the primary gone, its standby not yet
    /// promoted). The runtime keeps looking for a host that accepts writes by itself, and
    /// carries on there; workers pause meanwhile.
    ///
    /// Without a request id nothing of the call was written: call again. With one, the
    /// call's turn may have committed just before the connection was lost: look its message
    /// up with [`Runtime::message`](crate::Runtime::message) once the database answers (or
    /// call again under the same idempotency key), rather than call again without a key,
    /// which could run it twice.
    #[error("{backend} at {hosts} accepted no writes within {waited:?} ({reason}){}", unavailable_note(request_id.as_deref().map(String::as_str)))]
    DatabaseUnavailable {
        /// `PostgreSQL` or `MySQL`.
        backend: &'static str,
        /// The hosts the runtime tried, `host:port` each (never with a password).
        hosts: String,
        /// What the last tries came to: refused, no answer, or a standby.
        reason: String,
        /// How long the call waited for a host.
        waited: Duration,
        /// The call's message, if its turn may have committed.
        request_id: Option<Box<String>>,
    },

    /// The database has no solid-objects tables, and the runtime was told not to create
    /// them ([`Builder::apply_migrations`](crate::Builder::apply_migrations)); nothing was
    /// written.
    #[error("the database has no solid-objects schema (no solid_schema_migrations table): it is not one a solid-objects runtime has used, or the URL names the wrong database; nothing was written (start the application's runtime, or run `solid-objects migrate`, to create the schema)")]
    NoSchema,

    /// The database's solid-objects schema lacks migrations this build has, and the runtime
    /// was told not to apply them ([`Builder::apply_migrations`](crate::Builder::apply_migrations));
    /// nothing was written.
    #[error("the database's solid-objects schema is at migration {applied}, older than this build's {known}; nothing was written (start the application's runtime, or run `solid-objects migrate`, to upgrade it)")]
    SchemaOutOfDate {
        /// The newest migration the database has (0 for none).
        applied: i64,
        /// The newest migration this build knows.
        known: i64,
    },

    /// The database's solid-objects schema has migrations this build does not know (a newer
    /// build migrated it), and the runtime was told to operate only its own schema
    /// ([`Builder::apply_migrations`](crate::Builder::apply_migrations)); nothing was written.
    #[error("the database's solid-objects schema is at migration {applied}, newer than this build knows ({known}); nothing was written: use a build at least as new as the one that migrated it")]
    SchemaFromNewerBuild {
        /// The newest migration the database has.
        applied: i64,
        /// The newest migration this build knows.
        known: i64,
    },

    /// A schema migration stopped because other sessions held a lock it needs for longer than
    /// it waits: a long transaction on one of the runtime's tables, say.
    ///
    /// A step that takes a strong lock on a table waits for it only briefly each time, so that
    /// turns never queue behind it, and tries again for up to five minutes; an index build
    /// waits as long for the transactions already using its table. The steps finished so far
    /// are kept, and the next start (or `solid-objects migrate`) resumes from there.
    #[error("schema migration {version} waited {waited:?} for locks other sessions held ({reason}) and stopped; the steps it finished are kept and the next start resumes from there: end the long-running transaction on the runtime's tables (see pg_stat_activity, or the server's process list), then start again")]
    SchemaMigrationBlocked {
        /// The migration that stopped.
        version: i64,
        /// How long it waited.
        waited: Duration,
        /// The database's last answer.
        reason: String,
    },

    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// The database aborted the turn's transaction by itself between two of its statements
    /// (a Galera node's applier, for a write another node committed first), without telling
    /// the next statement: nothing of the turn was kept, and running it again is safe (a call
    /// does so itself until its deadline, a worker at once).
    #[error("the database aborted the turn's transaction by itself ({reason}); nothing of it was kept: run it again")]
    TransactionAborted {
        /// What showed it.
        reason: String,
    },

    /// The SQLite transaction this turn shared with other turns
    /// ([`GroupCommit`](crate::GroupCommit)) was rolled back because of another member:
    /// nothing of this turn was kept, and running it again is safe (a call does so itself
    /// until its deadline, a worker at its next pass).
    #[error("the group commit this turn joined was rolled back ({reason}); nothing of it was kept: run it again")]
    GroupRolledBack {
        /// What rolled the group back.
        reason: String,
    },

    /// The `COMMIT` of the SQLite transaction this turn shared with other turns
    /// ([`GroupCommit`](crate::GroupCommit)) failed: look at the database's error; read the
    /// message back (by idempotency key) to learn whether it ran.
    #[error("the group commit this turn joined failed: {reason}")]
    GroupCommitFailed {
        /// The database's error.
        reason: String,
    },

    /// [`Runtime::run_until_signal`](crate::Runtime::run_until_signal) could not listen for
    /// the signals that stop it (SIGINT, SIGTERM); the workers did not start.
    #[error("cannot listen for the shutdown signals: {0}")]
    Signal(#[source] std::io::Error),
}

/// The result type of the runtime's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a failed call says of its message: retried (and so still queued, named), or dead; a
/// query has none.
fn failed_note(
    retry_at: Option<chrono::DateTime<chrono::Utc>>,
    request_id: Option<&str>,
) -> String {
    match (retry_at, request_id) {
        (Some(at), Some(request_id)) => format!(
            "; it is retried at {at}: its message (request id {request_id}) is still queued: do \
             not call again, which would run it twice: wait for it with \
             runtime.message({request_id:?})"
        ),
        (Some(at), None) => format!("; it is retried at {at}"),
        (None, Some(request_id)) => {
            format!("; its message (request id {request_id}) is now a dead letter")
        }
        (None, None) => "; a query stores nothing and is not retried".to_owned(),
    }
}

/// What an unavailable database means for the call: nothing written, or a turn that may
/// have committed, named.
fn unavailable_note(request_id: Option<&str>) -> String {
    match request_id {
        None => "; nothing of this call was written: call again (the runtime reconnects by \
                 itself, to whichever host accepts writes)"
            .to_owned(),
        Some(request_id) => format!(
            "; the call's turn may have committed before its connection was lost: look its \
             message up with runtime.message({request_id:?}) once the database answers, or call \
             again under the same idempotency key; calling again without one could run it twice"
        ),
    }
}

/// What a timed-out call says of its message: nothing if it had none, that it is queued if it
/// was, and how to learn whether it was kept if its group commit had not ended.
fn queued_note(message_id: Option<i64>, request_id: Option<&str>) -> String {
    match (message_id, request_id) {
        (Some(id), Some(request_id)) => format!(
            "; its message {id} (request id {request_id}) is still queued and runs later: do \
             not call again, which would run it twice: wait for it with \
             runtime.message({request_id:?})"
        ),
        (Some(id), None) => format!(
            "; its message {id} is still queued and runs later: do not call again, which \
             would run it twice"
        ),
        (None, Some(request_id)) => format!(
            "; do not call again before looking its message up with \
             runtime.message({request_id:?}): found, it was kept and runs or ran once; not found \
             once the group has ended, nothing of it was kept"
        ),
        (None, None) => String::new(),
    }
}

impl Error {
    /// The typed rejection this error carries, if it is a rejection of one of `R`'s codes:
    /// `match error.rejection::<HoldError>() { Some(HoldError::NotEnoughSeats { left }) => .. }`.
    pub fn rejection<R: TypedRejection>(&self) -> Option<R> {
        match self {
            Self::Rejected(rejection) => R::from_rejection(rejection),
            _ => None,
        }
    }

    /// The request id of the call's message if this error came after the message was
    /// committed and it is still queued ([`Error::Queued`], a [`Error::SyncTimeout`] with a
    /// message, or a [`Error::HandlerFailed`] to be retried), or when the message may have
    /// been committed (a [`Error::SyncTimeout`] or [`Error::DatabaseUnavailable`] in doubt):
    /// look it up with [`Runtime::message`](crate::Runtime::message) rather than call again,
    /// which could run it twice.
    pub fn queued_request_id(&self) -> Option<&str> {
        match self {
            Self::Queued { request_id, .. } => Some(request_id),
            Self::SyncTimeout { request_id, .. } => request_id.as_deref().map(String::as_str),
            Self::HandlerFailed {
                request_id,
                retry_at: Some(_),
                ..
            } => request_id.as_deref().map(String::as_str),
            Self::DatabaseUnavailable { request_id, .. } => {
                request_id.as_deref().map(String::as_str)
            }
            _ => None,
        }
    }

    /// This error, naming `request_id` as the message a turn that may have committed is
    /// found by, if it is [`Error::DatabaseUnavailable`]; any other error as it is.
    pub(crate) fn in_doubt_of(self, request_id: &str) -> Self {
        match self {
            Self::DatabaseUnavailable {
                backend,
                hosts,
                reason,
                waited,
                ..
            } => Self::DatabaseUnavailable {
                backend,
                hosts,
                reason,
                waited,
                request_id: Some(Box::new(request_id.to_owned())),
            },
            error => error,
        }
    }
}
