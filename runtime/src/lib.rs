// The layers of this crate. Imports point one way, down this list; runtime/tests/layers.rs
// reads every `crate::..` path and fails on one that points up, or on two top-level modules
// that import each other. It allows no exception.
//
//   admin/ web/   the one operator API (authorised, audited); axum responses, SSE, the
//                 dashboard. The CLI (src/bin) is a crate of its own on the public API.
//   client/       what an application holds: Runtime, Builder, the worker loop, shutdown, the
//                 process default, Reference, MessageRef, Watch, effect handlers, the
//                 policy, Testing
//   engine/       the only layer that writes: calls, turns, attempts, reminders, upkeep,
//                 effects, watchers
//   actor/        the contract the macros implement and handlers use: Actor, Turn, staging,
//                 reminders, effects and replies, failures, migrations, the operation codec
//   store/        the only place SQL lives
//   leaves        error, time/ (clock, stored micros, saturating arithmetic), limits,
//                 validate, codec, metrics, ids (request and effect ids),
//                 trace_context (the W3C context stored with rows),
//                 simulation (the test-only schedule of faults)
//
// This file declares the modules and re-exports the public API; it is no layer.

//! Durable virtual actors on the SQL database an application already has.
//!
//! An actor is a struct addressed by `(type, id)`. Calls for one id enter a durable mailbox
//! and run one at a time, in order; different ids are independent. Each turn commits the
//! state, the result and the reminders in one SQL transaction. State, queued work and
//! reminders survive restarts.
//!
//! ```
//! use solid_objects::prelude::*;
//!
//! /// A counter that refuses to go past its limit.
//! #[actor]
//! #[derive(Default)]
//! pub struct Counter {
//!     value: u32,
//! }
//!
//! #[actor]
//! impl Counter {
//!     #[command]
//!     pub fn increment(&mut self) -> Result<u32, Rejection> {
//!         if self.value == 3 {
//!             return Err(reject!(limit_reached, "The counter stops at {}", self.value));
//!         }
//!         self.value += 1;
//!         Ok(self.value)
//!     }
//!
//!     #[query]
//!     pub fn value(&self) -> u32 {
//!         self.value
//!     }
//! }
//!
//! # #[cfg(not(feature = "sqlite"))] fn main() {}
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("counters.db");
//! let runtime = Runtime::builder().sqlite(path).policy(AllowAll).start().await?;
//! let counter = runtime.reference::<Counter>("visits");
//! assert_eq!(counter.increment().await?, 1);
//! assert_eq!(counter.value().await?, 1);
//! # Ok(()) }
//! ```
//!
//! # Where to start
//!
//! - [The guide](guide): calls, effects, failures, lifecycle, watching, testing, operating,
//!   backends, guarantees, performance and stability, a chapter each.
//! - [`actor`], [`command`], [`query`], [`reminder`], [`reject!`]: the DSL; the
//!   `solid-objects-macros` crate docs list every rule with a wrong/right pair and show the
//!   generated code.
//! - [`Runtime::builder`]: the database, clock, policy, limits and retries.
//! - [`Turn`]: what a handler sees and stages with the turn: [`Turn::schedule`] for durable
//!   reminders, [`Turn::send`] for messages to other actors, [`Turn::emit`] for
//!   [effects](effect) run after the commit, `Turn::sqlite` (or `Turn::postgres`) for the
//!   application's own rows in the turn's transaction.
//! - [`MessageRef`]: an enqueued message, its status and its result.
//! - [`Runtime::testing`]: drive reminders and mailboxes by hand in tests.
//!
//! # Feature flags
//!
//! | flag | default | what it adds |
//! |------|---------|--------------|
//! | `sqlite` | on | `Builder::sqlite`, `Builder::sqlite_pool` and `Turn::sqlite`: SQLite as the backend (through sqlx, with the library bundled), embedded in the process |
//! | `postgres` | off | [`Builder::postgres`][builder-postgres], `Builder::postgres_pool` and [`Turn::postgres`][turn-postgres]: PostgreSQL as the backend, for many processes on many hosts |
//! | `mysql` | off | `Builder::mysql`, `Builder::mysql_pool` and `Turn::mysql`: MySQL 8 or MariaDB 10.6 (or later) as the backend, for many processes on many hosts |
//! | `axum` | off | `Error` as an axum response (`IntoResponse`), with the HTTP status each error means, and `Watch::into_sse`: a watch as server-sent events (for axum 0.8) |
//! | `dashboard` | off | [`dashboard::router`][dashboard]: the operators' web dashboard, an axum 0.8 `Router` of server-rendered pages (charts of work over time, stuck actors, dead letters) to mount behind the application's authentication |
//! | `test-support` | off | `TestDatabase`: a database of its own for each test on a PostgreSQL or MySQL server, or a temporary SQLite file where no server is named (`TestDatabase::from_env`) |
//! | `simulation` | off | `Builder::simulation` and the `simulation` module: a fault-injecting schedule and seeded ids, for deterministic simulation tests; never for production |
//! | `opentelemetry` | off | W3C trace context across the durable boundary: a message, a reminder and an effect store the `traceparent` of the span that caused them, and the turn or effect run that takes them up (in any process) continues that trace, through `tracing-opentelemetry` (see the [operating guide](guide::operating#traces-across-the-durable-boundary)) |
//! | `cli` | off | the `solid-objects` command-line tool for operators (`cargo install solid-objects --features cli`) |
//!
//! At least one of `sqlite`, `postgres` and `mysql` is on; a PostgreSQL-only build
//! (`default-features = false, features = ["postgres"]`) compiles no SQLite.
//!
#![cfg_attr(
    feature = "postgres",
    doc = "[builder-postgres]: Builder::postgres",
    doc = "[turn-postgres]: Turn::postgres"
)]
#![cfg_attr(feature = "dashboard", doc = "[dashboard]: dashboard::router")]
#![cfg_attr(
    not(feature = "dashboard"),
    doc = "[dashboard]: https://docs.rs/solid-objects/latest/solid_objects/dashboard/fn.router.html"
)]
// Without the feature the methods do not exist here: link to the docs built with it.
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[builder-postgres]: https://docs.rs/solid-objects/latest/solid_objects/struct.Builder.html#method.postgres",
    doc = "[turn-postgres]: https://docs.rs/solid-objects/latest/solid_objects/struct.Turn.html#method.postgres"
)]
// docs.rs builds with every feature and `--cfg docsrs`: feature-gated items carry a badge.
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's code, compiled and run as doc tests.
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The guide's chapters, one markdown file each in `guide/`. Its examples run on SQLite:
// without that feature the chapters are only read, not tested.
#[cfg(any(doc, feature = "sqlite"))]
#[doc = include_str!("../guide/index.md")]
pub mod guide {
    #[doc = include_str!("../guide/calls.md")]
    pub mod calls {}
    #[doc = include_str!("../guide/effects.md")]
    pub mod effects {}
    #[doc = include_str!("../guide/failures.md")]
    pub mod failures {}
    #[doc = include_str!("../guide/lifecycle.md")]
    pub mod lifecycle {}
    #[doc = include_str!("../guide/watching.md")]
    pub mod watching {}
    #[doc = include_str!("../guide/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../guide/operating.md")]
    pub mod operating {}
    #[doc = include_str!("../guide/backends.md")]
    pub mod backends {}
    #[doc = include_str!("../guide/guarantees.md")]
    pub mod guarantees {}
    #[doc = include_str!("../guide/performance.md")]
    pub mod performance {}
    #[doc = include_str!("../guide/stability.md")]
    pub mod stability {}
}

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!(
    "solid-objects needs a database: enable its `sqlite` feature (the default), `postgres` \
     or `mysql`"
);

mod actor;
pub mod admin;
mod client;
mod codec;
mod engine;
mod error;
mod ids;
mod limits;
pub mod metrics;
#[cfg(feature = "simulation")]
pub mod simulation;
mod store;
mod time;
mod trace_context;
mod validate;
mod web;

pub use actor::migration;
pub use client::effect;
#[cfg(feature = "dashboard")]
pub use web::dashboard;

pub use actor::failure::{Failure, TurnError};
pub use actor::handled::HandlerError;
pub use actor::reminder::ScheduledReminder;
pub use actor::reply::Emitted;
pub use actor::schedule::Missed;
pub use actor::turn::Turn;
pub use actor::{Actor, ActorState, Operations};
pub use client::builder::Builder;
pub use client::message::{MessageRef, MessageStatus};
pub use client::policy;
pub use client::policy::{AllowAll, Policy};
pub use client::reference::{Addressable, Enqueue, Reference};
pub use client::shared::Runtime;
pub use client::shutdown::ShutdownReport;
#[cfg(all(feature = "test-support", any(feature = "postgres", feature = "mysql")))]
#[cfg_attr(
    docsrs,
    doc(cfg(all(feature = "test-support", any(feature = "postgres", feature = "mysql"))))
)]
pub use client::testing::TestDatabase;
pub use client::testing::{Drained, FailedTurn, Testing};
pub use client::watch::{Watch, Watched};
pub use client::workers::Workers;
pub use effect::{Effect, EffectContext, EffectFailure, UnhandledEffects};
pub use error::{Error, Rejection, Result, TypedRejection};
pub use limits::{GroupCommit, Limits, RetryPolicy};
pub use migration::MigrationError;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::sqlite::{Durability, IntoSqliteFile, SqliteFile};
pub use store::Stats;
pub use time::clock::{Clock, IntoDuration, ManualClock, SystemClock};
pub use validate::{MAX_ACTOR_ID_BYTES, MAX_KEY_BYTES};

pub use solid_objects_macros::{
    actor, command, migrate, query, reject, reminder, reply, Rejection,
};

/// The chrono types a handler needs for times (`turn.now()` is a `DateTime<Utc>`).
pub use chrono;

/// What a module that defines or calls actors needs: `use solid_objects::prelude::*;`.
pub mod prelude {
    pub use crate::chrono::{DateTime, TimeDelta, Utc};
    pub use crate::{
        actor, command, migrate, query, reject, reminder, reply, AllowAll, Effect, EffectContext,
        EffectFailure, Error, Failure, IntoDuration, ManualClock, MessageRef, MessageStatus,
        MigrationError, Missed, Policy, Rejection, Runtime, Turn, TurnError, TypedRejection,
        Watched,
    };
    pub use serde_json::{json, Value};
}

/// What the generated code uses; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::actor::handled::Handled;

    /// A rejection whose code `reject!` or `#[derive(Rejection)]` checked at compile time.
    pub fn rejection(code: &'static str, message: impl Into<String>) -> crate::Rejection {
        crate::Rejection::checked(code, message)
    }

    /// A rejection with the HTTP status `#[rejection(status = ..)]` checked at compile time.
    pub fn with_status(rejection: crate::Rejection, status: u16) -> crate::Rejection {
        rejection.with_checked_status(status)
    }
    pub use crate::actor::migration::{
        fallible as migrate_fallible, infallible as migrate_infallible, Migration,
    };
    pub use crate::actor::reply::ReplyStage;
    pub use crate::actor::schedule::{ScheduleStage, UnscheduleStage};
    pub use crate::actor::send::{Registrar, SendStage};
    pub use crate::actor::stored_field::{
        detail_from_value, detail_to_value, state_field, RejectionDetail, StateField,
    };
    pub use crate::actor::turn::ReminderLookup;

    /// Makes the actor type `A` known to the runtime behind `registrar` (the engine): what
    /// `#[actor]` generates as `Actor::register`.
    pub fn register<A: crate::Actor>(registrar: &dyn Registrar) -> crate::Result<()> {
        match registrar
            .runtime()
            .downcast_ref::<crate::engine::Registry>()
        {
            Some(engine) => engine.register::<A>(),
            None => Ok(()),
        }
    }

    /// Stands in for a query's turn in a call only a command can make, which `#[actor]`
    /// reported as a compile error: it never runs.
    pub fn refused_turn<'t, A: crate::Actor>(_turn: &crate::Turn<A>) -> &'t mut crate::Turn<A> {
        unreachable!("#[actor] reported this call as a compile error")
    }
    pub use serde;
    pub use serde_json;
}
