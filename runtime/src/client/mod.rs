//! What an application holds: the runtime handle, its builder, references, enqueued
//! messages, watches, the policy every call is put to, and the testing API.
//!
//! The client calls into the engine and never the other way: the engine knows nothing of a
//! `Runtime`.

pub(crate) mod builder;
pub(crate) mod default_runtime;
pub mod effect;
pub(crate) mod effect_tasks;
pub(crate) mod message;
pub mod policy;
pub(crate) mod reference;
pub(crate) mod runtime;
pub(crate) mod shared;
pub(crate) mod shutdown;
pub(crate) mod stopping;
pub(crate) mod testing;
pub(crate) mod watch;
pub(crate) mod worker;
pub(crate) mod workers;
