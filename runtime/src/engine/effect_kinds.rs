//! [`EffectKinds`]: the kinds of effect this runtime has handlers for (the handlers
//! themselves are the client's), with their retry policies, and the kinds already reported
//! as having none here.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError, RwLock};

use super::insert_bounded;
use crate::error::{Error, Result};
use crate::limits::RetryPolicy;

/// The effect kinds this runtime has handlers for (the handlers themselves are the client's),
/// and the kinds already reported as having none here.
pub(crate) struct EffectKinds {
    /// The kinds handled here, each with its own retry policy, if it has one.
    kinds: RwLock<HashMap<&'static str, Option<RetryPolicy>>>,
    /// Effect kinds already reported as having no handler here.
    reported_unhandled: Mutex<HashSet<String>>,
    /// The runtime's retry policy, for kinds without their own.
    retry: RetryPolicy,
}

impl EffectKinds {
    /// No handlers yet; a kind without its own retry policy is retried by `retry`.
    pub(super) fn new(retry: RetryPolicy) -> Self {
        Self {
            kinds: RwLock::default(),
            reported_unhandled: Mutex::default(),
            retry,
        }
    }

    /// Records that this runtime has a handler for the effects named `name`, retried by
    /// `retry` (their kind's own policy) or, when it is `None`, by the runtime's.
    pub(crate) fn register(&self, name: &'static str, retry: Option<RetryPolicy>) -> Result<()> {
        let mut kinds = self.kinds.write().unwrap_or_else(PoisonError::into_inner);
        if kinds.insert(name, retry).is_some() {
            return Err(Error::Config(format!(
                "two handlers for the effect {name:?}; register one"
            )));
        }
        Ok(())
    }

    /// How effects named `name` are retried: their kind's own policy, or the runtime's.
    pub(crate) fn retry(&self, name: &str) -> RetryPolicy {
        let mut retry = self
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied()
            .flatten()
            .unwrap_or(self.retry);
        // Its field is public: an effect gets at least one attempt, as a message does.
        retry.max_attempts = retry.max_attempts.max(1);
        retry
    }

    /// Whether a handler for `name` is registered here.
    pub(crate) fn handles(&self, name: &str) -> bool {
        self.kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
    }

    /// Whether this runtime runs effects: it has a handler for at least one kind.
    pub(crate) fn runs_any(&self) -> bool {
        !self
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Refuses, in a runtime that runs effects, the kinds of `declared` (each with the actor
    /// type that emits it) that have no handler here: they would wait for ever.
    pub(crate) fn refuse_unhandled(&self, declared: &[(&str, &str)]) -> Result<()> {
        if !self.runs_any() {
            return Ok(());
        }
        let missing: Vec<String> = declared
            .iter()
            .filter(|(_, effect)| !self.handles(effect))
            .map(|(actor, effect)| format!("{effect:?} (emitted by {actor})"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::Config(format!(
            "this runtime runs effects but has no handler for {}: register each with \
             Builder::effect, or run this runtime without effect handlers and let another \
             process run them",
            missing.join(", ")
        )))
    }

    /// The names of the kinds handled here, as a JSON array.
    pub(super) fn handled(&self) -> String {
        let handled: Vec<&str> = self
            .kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        serde_json::Value::from(handled).to_string()
    }

    /// Whether `name` is reported as having no handler here for the first time (and so is
    /// to be reported now).
    pub(super) fn first_report_of_unhandled(&self, name: &str) -> bool {
        insert_bounded(&self.reported_unhandled, name.to_owned())
    }
}
