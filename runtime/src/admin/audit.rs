//! The audit of every administration call: the policy asked first, a row written before the
//! call runs and finished with how it ended.

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde_json::{json, Value};

use super::{check_actor, resource, Admin};
use crate::client::policy::{AdminAction, AdminRequest, Denied};
use crate::error::{Error, Result};
use crate::store::admin_rows::AdminEventWrite;
use crate::store::ActorKey;
use crate::time::micros::micros;

/// Pauses (`action` [`AdminAction::Pause`]) or resumes an actor, audited; false if it
/// already was as asked.
pub(super) async fn set_paused(
    admin: &Admin,
    action: AdminAction,
    actor_type: &str,
    actor_id: &str,
) -> Result<bool> {
    check_actor(actor_type, actor_id)?;
    let key = ActorKey {
        actor_type,
        actor_id,
    };
    audited(admin, action, resource(key), || async {
        let paused = action == AdminAction::Pause;
        let changed = admin
            .runtime
            .engine()
            .operator_writes()
            .set_paused(key, paused)
            .await?;
        Ok((changed, Some(json!({ "changed": changed }))))
    })
    .await
}

/// Asks the policy, commits the audit row (`allowed`), runs `work`, records on the row
/// how it ended (`done`, with `work`'s details, or `failed`), and returns what `work`
/// returned.
pub(super) async fn audited<T, F, Fut>(
    admin: &Admin,
    action: AdminAction,
    resource: String,
    work: F,
) -> Result<T>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(T, Option<Value>)>>,
{
    authorize(admin, action, &resource).await?;
    let row = record(admin, action, &resource, "allowed", None).await?;
    let (outcome, details, result) = match work().await {
        Ok((value, details)) => ("done", details, Ok(value)),
        Err(error) => {
            let details = json!({ "error": error.to_string() });
            ("failed", Some(details), Err(error))
        }
    };
    if let Err(audit) = finish(admin, row, outcome, details).await {
        // The row stays `allowed`: the log lacks how the call ended, not that it was made.
        tracing::warn!(%audit, action = action.as_str(), "how an administration call ended was not written to its audit row");
    }
    result
}

/// Puts the call to the policy; a refusal is written to the audit table and returned.
pub(super) async fn authorize(admin: &Admin, action: AdminAction, resource: &str) -> Result<()> {
    admin.runtime.ensure_open()?;
    let request = AdminRequest {
        action,
        resource,
        context: admin.context.as_ref(),
    };
    let policy = admin.runtime.policy();
    // The policy is user code: a panic in it denies the call.
    let verdict = catch_unwind(AssertUnwindSafe(|| {
        policy.authorize_administration(&request)
    }))
    .unwrap_or_else(|_| Err(Denied::new("the authorisation policy failed")));
    let Err(denied) = verdict else {
        return Ok(());
    };
    let details = json!({ "reason": denied.reason() });
    record(admin, action, resource, "denied", Some(details)).await?;
    Err(Error::AdministrationDenied {
        action: action.as_str(),
        resource: resource.to_owned(),
        reason: denied.reason().to_owned(),
    })
}

/// Appends an audit row in a transaction of its own; returns its id.
pub(super) async fn record(
    admin: &Admin,
    action: AdminAction,
    resource: &str,
    outcome: &str,
    details: Option<Value>,
) -> Result<i64> {
    let engine = admin.runtime.engine();
    let caller = caller(admin);
    let details = details.map(|details| details.to_string());
    engine
        .operator_writes()
        .record_admin_event(&AdminEventWrite {
            at: micros(engine.core().now()),
            caller: caller.as_deref(),
            action: action.as_str(),
            resource,
            outcome,
            details: details.as_deref(),
        })
        .await
}

/// Records how an allowed call ended on its audit row.
pub(super) async fn finish(
    admin: &Admin,
    row: i64,
    outcome: &str,
    details: Option<Value>,
) -> Result<()> {
    let details = details.map(|details| details.to_string());
    admin
        .runtime
        .engine()
        .operator_writes()
        .finish_admin_event(row, outcome, details.as_deref())
        .await
}

pub(super) fn caller(admin: &Admin) -> Option<String> {
    admin.context.as_ref().map(Value::to_string)
}
