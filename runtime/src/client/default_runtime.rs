//! Which runtime `Actor::reference(id)` reaches when the caller names none.
//!
//! The rule, in order: the runtime of the enclosing [`Runtime::scope`] (a task-local
//! override, so parallel tests each reach their own); else the process default, set only
//! when asked ([`Runtime::make_default`] or [`Builder::set_default`]); else none
//! ([`Error::NoRuntime`]). Starting a runtime never makes it the default by itself, so a
//! second runtime in the process never changes where existing code goes.
//!
//! [`Runtime::scope`]: crate::Runtime::scope
//! [`Runtime::make_default`]: crate::Runtime::make_default
//! [`Builder::set_default`]: crate::Builder::set_default
//! [`Error::NoRuntime`]: crate::Error::NoRuntime

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use crate::client::shared::Runtime;

/// The process default. It keeps its runtime alive (a runtime started with
/// `Builder::set_default()` whose handle the caller dropped is still reached) until another
/// runtime becomes the default.
static DEFAULT: Mutex<Option<Runtime>> = Mutex::new(None);

tokio::task_local! {
    /// The runtime of the enclosing `Runtime::scope`, if any.
    static SCOPED: Runtime;
}

/// The runtime a reference without one reaches now, if any.
pub(crate) fn current() -> Option<Runtime> {
    if let Ok(scoped) = SCOPED.try_with(Runtime::clone) {
        return Some(scoped);
    }
    DEFAULT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Makes `runtime` the process default.
pub(crate) fn set(runtime: &Runtime) {
    *DEFAULT.lock().unwrap_or_else(PoisonError::into_inner) = Some(runtime.clone());
}

/// Runs `future` with `runtime` as the default of the references inside it.
pub(crate) async fn scope<F: Future>(runtime: Runtime, future: F) -> F::Output {
    SCOPED.scope(runtime, future).await
}
