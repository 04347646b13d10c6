//! `doctor`: the schema, the settings that matter, a write read back, clock skew, stored
//! arguments and waiting effects; exit code 4 when it found a problem.

use solid_objects::admin::Admin;
use solid_objects::Error;

use crate::out::Out;
use crate::Exit;

/// Examines the database and prints what it found.
pub(crate) async fn doctor(admin: &Admin, out: &mut Out) -> Result<Exit, Error> {
    let report = admin.doctor().await?;
    if out.json {
        out.print_json(&report);
    } else {
        say!(out, "backend: {}", report.backend);
        say!(
            out,
            "schema: applied {:?}, this build knows up to {}",
            report.applied_migrations,
            report.known_migration
        );
        for (name, value) in &report.settings {
            say!(out, "{name}: {value}");
        }
        say!(
            out,
            "write and read round trip: {} µs",
            report.round_trip_micros
        );
        if let Some(skew) = report.clock_skew_ms {
            say!(out, "clock skew (database minus this host): {skew} ms");
        }
        match report.checked_actor_types.is_empty() {
            true => say!(
                out,
                "stored arguments: not checked (this tool knows no actor types; call \
                 Admin::doctor or Admin::undecodable from the application's build, \
                 with its actor types registered, to check a deploy)"
            ),
            false => say!(
                out,
                "stored arguments checked for: {}",
                report.checked_actor_types.join(", ")
            ),
        }
        for kind in &report.unhandled_effects {
            say!(
                out,
                "effects waiting to run: {} of kind {} (the oldest since {})",
                kind.count,
                kind.name,
                kind.oldest.to_rfc3339()
            );
        }
        match report.problems.is_empty() {
            true => say!(out, "no problems found"),
            false => report
                .problems
                .iter()
                .for_each(|problem| say!(out, "PROBLEM: {problem}")),
        }
    }
    if !report.problems.is_empty() {
        return Ok(Exit::Problems);
    }
    Ok(Exit::Done)
}
