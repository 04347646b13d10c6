//! `audit`: the audit log of administration calls, newest first.

use serde_json::Value;
use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::table::Table;
use crate::Exit;

/// Prints the newest `limit` audit rows.
pub(crate) async fn audit(admin: &Admin, limit: u32, out: &mut Out) -> Result<Exit, Error> {
    let events = admin.audit_log(limit).await?;
    out.listing(&events, "no administration calls", || {
        let header = ["ID", "AT", "ACTION", "RESOURCE", "OUTCOME", "CALLER"];
        Table::of(&header, &events, |e| {
            vec![
                e.id.to_string(),
                e.at.to_string(),
                e.action.clone(),
                e.resource.clone(),
                e.outcome.clone(),
                e.caller.as_ref().map_or_else(String::new, Value::to_string),
            ]
        })
    });
    Ok(Exit::Done)
}
