//! The doctor's examination: what it reads of the database, the probe of a write read back,
//! and the stored rows this build cannot decode.

use std::time::Instant;

use serde_json::json;

use super::{Admin, DoctorReport, StoredKind, Undecodable};
use crate::client::effect::UnhandledEffects;
use crate::engine::DatabaseFacts;
use crate::error::{Error, Result};
use crate::store::ActorKey;
use crate::time::micros::micros;

/// Stored rows read per page while looking for those this build cannot decode.
const DECODE_PAGE: i64 = 1000;

/// Undecodable rows the doctor lists.
const DOCTOR_UNDECODABLE: usize = 100;

/// The actor type of the doctor's scratch actor.
const DOCTOR_TYPE: &str = "solid_objects.doctor";

/// Passes that left one ready message unrun (its turn kept conflicting, or its commit kept
/// going unanswered) past which the doctor reports it: about 10 s of a hot actor that never
/// gets its turn through.
pub const STALLS_WARNING: i64 = 50;

/// Stalled messages the doctor names.
const DOCTOR_STALLED: i64 = 10;

/// Clock skew past which the doctor reports a problem: leases and due times go wrong.
const SKEW_WARNING_MS: i64 = 1000;

/// The doctor's report on the database `admin` reaches.
pub(super) async fn examine(admin: &Admin) -> Result<DoctorReport> {
    let engine = admin.runtime.engine();
    let DatabaseFacts {
        backend,
        known_migration,
        applied_migrations,
        settings,
        clock_micros,
    } = engine.describe_database().await?;
    let mut problems = Vec::new();
    match applied_migrations.iter().max() {
        Some(&newest) if newest > known_migration => problems.push(format!(
            "the database has schema version {newest}, newer than this build's \
             {known_migration}: upgrade this build"
        )),
        _ => {}
    }
    let setting = |name: &str| {
        settings
            .iter()
            .find(|(setting, _)| setting == name)
            .map(|(_, value)| value.as_str())
    };
    if setting("journal_mode").is_some_and(|mode| !mode.eq_ignore_ascii_case("wal")) {
        problems.push("SQLite is not in WAL mode: readers block the writer".to_owned());
    }
    if setting("synchronous").is_some_and(|mode| mode == "off") {
        problems.push("SQLite synchronous is off: a crash can lose committed turns".to_owned());
    }
    if setting("synchronous_commit").is_some_and(|mode| mode == "off") {
        problems.push(
            "PostgreSQL synchronous_commit is off: a crash can lose committed turns".to_owned(),
        );
    }
    let round_trip_micros = round_trip(admin).await?;
    let clock_skew_ms = clock_micros.map(|database| (database - micros(chrono::Utc::now())) / 1000);
    if let Some(skew) = clock_skew_ms.filter(|skew| skew.abs() > SKEW_WARNING_MS) {
        problems.push(format!(
            "this host's clock is {skew} ms behind the database's (negative: ahead); \
             leases and due times assume clocks within a second"
        ));
    }
    let checked_actor_types = engine.registry().registered_types();
    let undecodable = find_undecodable(admin, DOCTOR_UNDECODABLE).await?;
    for row in &undecodable {
        let kind = match row.kind {
            StoredKind::Message => "message",
            StoredKind::Reminder => "reminder",
        };
        problems.push(format!(
            "{kind} {} ({} {}/{}) does not decode with this build: {}; keep the old \
             operation or accept the old arguments (serde aliases, defaults) before \
             deploying it",
            row.id, row.operation, row.actor_type, row.actor_id, row.error
        ));
    }
    let stalled = engine
        .reads()
        .stalled_messages(STALLS_WARNING, DOCTOR_STALLED)
        .await?;
    if !stalled.is_empty() {
        let named: Vec<String> = stalled
            .iter()
            .map(|row| {
                format!(
                    "message {} of {}/{} ({} passes)",
                    row.id, row.actor_type, row.actor_id, row.stalls
                )
            })
            .collect();
        problems.push(format!(
            "ready messages were left unrun by {STALLS_WARNING} or more passes each, their \
             turns conflicting with other transactions (a hot actor written through several \
             Galera nodes, say) or their commits going unanswered: {}; send an actor's \
             writes through one node, or find what cuts the connections",
            named.join(", ")
        ));
    }
    let unhandled_effects: Vec<UnhandledEffects> = engine
        .effects()
        .unhandled_effects()
        .await?
        .into_iter()
        .map(UnhandledEffects::new)
        .collect();
    // The command-line tool runs no effects: there, waiting effects are no problem.
    if !checked_actor_types.is_empty() {
        for kind in &unhandled_effects {
            problems.push(format!(
                "{} effects of kind {:?} wait to run (the oldest since {}) and this \
                 runtime has no handler for them: register one with Builder::effect in \
                 a process that runs effects, or they never run",
                kind.count,
                kind.name,
                kind.oldest.to_rfc3339()
            ));
        }
    }
    Ok(DoctorReport {
        backend,
        applied_migrations,
        known_migration,
        settings,
        round_trip_micros,
        clock_skew_ms,
        checked_actor_types,
        undecodable,
        unhandled_effects,
        problems,
    })
}

/// Decodes every unfinished message, then every scheduled reminder, of a registered
/// type, until `limit` do not decode.
pub(super) async fn find_undecodable(admin: &Admin, limit: usize) -> Result<Vec<Undecodable>> {
    let engine = admin.runtime.engine();
    let store = engine.reads();
    let mut found = Vec::new();
    for kind in [StoredKind::Message, StoredKind::Reminder] {
        let mut after_id = 0;
        while found.len() < limit {
            let rows = match kind {
                StoredKind::Message => store.pending_arguments(after_id, DECODE_PAGE).await?,
                StoredKind::Reminder => store.reminder_arguments(after_id, DECODE_PAGE).await?,
            };
            let Some(last) = rows.last() else {
                break;
            };
            after_id = last.id;
            for row in rows {
                let Some(runner) = engine.registry().runner(&row.actor_type) else {
                    continue;
                };
                if let Err(error) =
                    runner.check_stored(&row.actor_id, &row.operation, &row.arguments)
                {
                    found.push(Undecodable {
                        kind,
                        id: row.id,
                        actor_type: row.actor_type,
                        actor_id: row.actor_id,
                        operation: row.operation,
                        error: error.to_string(),
                    });
                }
            }
        }
    }
    found.truncate(limit);
    Ok(found)
}

/// Writes a scratch actor's state and reads it back inside one transaction, then rolls
/// it back (so an interrupted doctor leaves nothing behind); returns how long that took.
pub(super) async fn round_trip(admin: &Admin) -> Result<u64> {
    let engine = admin.runtime.engine();
    let probe = uuid::Uuid::new_v4().to_string();
    let key = ActorKey {
        actor_type: DOCTOR_TYPE,
        actor_id: &probe,
    };
    let state = json!({ "probe": probe }).to_string();
    let started = Instant::now();
    let read = engine
        .operator_writes()
        .probe_round_trip(key, &state)
        .await?;
    if read.as_deref() != Some(state.as_str()) {
        return Err(Error::Config(
            "the doctor's scratch actor did not read back as written".to_owned(),
        ));
    }
    Ok(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
}
