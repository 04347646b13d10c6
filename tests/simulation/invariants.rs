//! What must hold after every run, whatever failed, hung or crashed on the way: each
//! acknowledged operation applied once, nothing applied twice, each actor's order, each
//! reminder fired and each effect run and replied, no work left, and no error that said
//! "nothing was written" after something was.

use std::collections::{BTreeMap, BTreeSet};

use super::box_office::{Show, Ticket, CAPACITY, TICKS, TICK_EVERY};
use super::workload::{Ledger, Operation, Work};

/// The violations of the run whose operations were `operations`, whose ledgers ended as
/// `ledgers`, whose charges' effects ran `charges` times, and which left `ready` messages.
pub(crate) fn check(
    operations: &[Operation],
    ledgers: &[Ledger],
    charges: &BTreeMap<u64, u32>,
    ready: i64,
    died: &BTreeSet<u64>,
) -> Vec<String> {
    let mut violations = Vec::new();
    if ready != 0 {
        violations.push(format!("{ready} messages still ready after the recovery"));
    }
    for (account, ledger) in ledgers.iter().enumerate() {
        for (list, name) in [
            (&ledger.entries, "entries"),
            (&ledger.credits, "credits"),
            (&ledger.reminded, "reminded"),
            (&ledger.charged, "charged"),
        ] {
            let mut seen = BTreeMap::new();
            for entry in list {
                *seen.entry(entry).or_insert(0) += 1;
            }
            for (entry, times) in seen.into_iter().filter(|(_, times)| *times > 1) {
                violations.push(format!(
                    "entry {entry} is in l-{account}'s {name} {times} times"
                ));
            }
        }
    }
    for operation in operations {
        let ledger = &ledgers[operation.account];
        let (list, name) = match &operation.work {
            Work::Apply | Work::Enqueue | Work::Transfer { .. } => (&ledger.entries, "entries"),
            Work::Remind { .. } => (&ledger.reminded, "reminded"),
            Work::Charge => (&ledger.charged, "charged"),
            Work::Hold { .. } | Work::Confirm { .. } | Work::Issue | Work::Void { .. } => continue,
        };
        let present = list.contains(&operation.entry);
        let entry = operation.entry;
        if operation.acknowledged_at.is_some() && !present {
            violations.push(format!(
                "operation {entry} ({:?}) was acknowledged but is not in l-{}'s {name}",
                operation.work, operation.account
            ));
        }
        if operation.acknowledged_at.is_none()
            && operation.unknown == 0
            && operation.said_nothing > 0
            && present
        {
            violations.push(format!(
                "operation {entry} ({:?}) was told \"nothing was written\" each time, but is in \
                 l-{}'s {name}",
                operation.work, operation.account
            ));
        }
        let counted = matches!(operation.work, Work::Apply | Work::Transfer { .. });
        if let (true, Some(answer)) = (counted, operation.answer.as_deref()) {
            let position = list.iter().position(|&at| at == entry).map(|at| at + 1);
            if answer.parse().ok() != position {
                violations.push(format!(
                    "operation {entry} ({:?}) answered {answer} entries, but is entry {position:?} \
                     of l-{}",
                    operation.work, operation.account
                ));
            }
        }
        if let Work::Transfer { to } = operation.work {
            let credited = ledgers[to].credits.contains(&entry);
            if credited != present {
                violations.push(format!(
                    "transfer {entry}: applied {present} but credited {credited}: not one commit"
                ));
            }
        }
        if operation.work == Work::Charge && present && charges.get(&entry).is_none() {
            violations.push(format!("charge {entry} replied, but its effect never ran"));
        }
    }
    violations.extend(order(operations, ledgers, died));
    violations
}

/// Each charge's effect counted an attempt for every time its handler ran: a runner that
/// stopped mid-attempt (its lease taken over by another) still spent one, so a retry
/// policy's limit holds however often runners die.
pub(crate) fn attempts_cover_runs(
    runs: &BTreeMap<u64, u32>,
    attempts: &BTreeMap<u64, i64>,
) -> Vec<String> {
    runs.iter()
        .filter_map(|(entry, &ran)| {
            let counted = attempts.get(entry).copied().unwrap_or_default();
            (counted < i64::from(ran)).then(|| {
                format!("charge {entry}: its handler ran {ran} times, but {counted} attempts are counted")
            })
        })
        .collect()
}

/// Each account's acknowledged operations in the order they were acknowledged: one
/// acknowledged before another was first made is applied (and credited) before it, unless it
/// `died` (a dead letter lets later messages pass; an operator's redrive runs it after them).
fn order(operations: &[Operation], ledgers: &[Ledger], died: &BTreeSet<u64>) -> Vec<String> {
    let mut violations = Vec::new();
    let applied = |operation: &Operation| {
        matches!(
            operation.work,
            Work::Apply | Work::Enqueue | Work::Transfer { .. }
        )
    };
    for (account, ledger) in ledgers.iter().enumerate() {
        let position = |entry: u64| ledger.entries.iter().position(|&at| at == entry);
        let mine: Vec<&Operation> = operations
            .iter()
            .filter(|operation| operation.account == account && applied(operation))
            .collect();
        for later in &mine {
            let Some(at) = position(later.entry) else {
                continue;
            };
            for earlier in &mine {
                let before = !died.contains(&earlier.entry)
                    && earlier
                        .acknowledged_at
                        .is_some_and(|acknowledged| acknowledged < later.issued_at);
                if before && position(earlier.entry).is_some_and(|earlier_at| earlier_at > at) {
                    violations.push(format!(
                        "l-{account}: entry {} was acknowledged before entry {} was made, but \
                         applied after it",
                        earlier.entry, later.entry
                    ));
                }
            }
        }
    }
    violations
}

/// Whether `operation` was acknowledged with an answer that starts with `answered`.
fn answered(operation: &Operation, answered: &str) -> bool {
    operation
        .answer
        .as_deref()
        .is_some_and(|answer| answer.starts_with(answered))
}

/// The shows after the recovery: every hold expired or was confirmed (never both, never
/// twice), as its caller was told; the seats confirmed fit the show; each occurrence of the
/// recurring tick came once, in order, and it came.
pub(crate) fn shows(operations: &[Operation], shows: &[Show]) -> Vec<String> {
    let mut violations = Vec::new();
    for (index, show) in shows.iter().enumerate() {
        let name = format!("s-{index}");
        if !show.holds.is_empty() {
            violations.push(format!("{name}: holds never expired: {:?}", show.holds));
        }
        let seats: u32 = show.confirmed.values().sum();
        if seats > CAPACITY {
            violations.push(format!("{name}: {seats} seats confirmed of {CAPACITY}"));
        }
        let mut expired = show.expired.clone();
        expired.sort_unstable();
        expired.dedup();
        if expired.len() != show.expired.len() {
            violations.push(format!("{name}: a hold expired twice: {:?}", show.expired));
        }
        for entry in &show.expired {
            if show.confirmed.contains_key(entry) {
                violations.push(format!("{name}: hold {entry} both expired and confirmed"));
            }
        }
        let every = TICK_EVERY.num_seconds();
        let on_time = show
            .ticks
            .windows(2)
            .all(|pair| pair[0] < pair[1] && (pair[1] - pair[0]) % every == 0);
        if !on_time {
            violations.push(format!(
                "{name}: a tick's occurrence came twice, out of order or off its interval: {:?}",
                show.ticks
            ));
        }
        let opened = !show.confirmed.is_empty() || !show.expired.is_empty();
        if opened && show.ticks.len() != TICKS {
            violations.push(format!(
                "{name}: its recurring tick came {} times, not {TICKS}: {:?}",
                show.ticks.len(),
                show.ticks
            ));
        }
    }
    for operation in operations {
        if !matches!(operation.work, Work::Hold { .. } | Work::Confirm { .. }) {
            continue;
        }
        let entry = operation.entry;
        let show = &shows[operation.account];
        let name = format!("s-{}", operation.account);
        match operation.work {
            Work::Hold { seats } => {
                let kept = show
                    .confirmed
                    .get(&entry)
                    .copied()
                    .or_else(|| show.expired.contains(&entry).then_some(seats));
                if answered(operation, "held") && kept != Some(seats) {
                    violations.push(format!(
                        "{name}: hold {entry} of {seats} was answered held, but is {kept:?}"
                    ));
                }
                let refused = answered(operation, "rejected")
                    || (operation.acknowledged_at.is_none()
                        && operation.unknown == 0
                        && operation.said_nothing > 0);
                if refused && kept.is_some() {
                    violations.push(format!(
                        "{name}: hold {entry} was refused ({:?}), but was kept",
                        operation.answer
                    ));
                }
            }
            Work::Confirm { hold } => {
                let confirmed = show.confirmed.contains_key(&hold);
                if answered(operation, "confirmed") && !confirmed {
                    violations.push(format!(
                        "{name}: hold {hold}'s confirmation {entry} was answered, but it is not \
                         confirmed"
                    ));
                }
            }
            _ => {}
        }
    }
    violations
}

/// The tickets after the recovery: each issued one lapsed by its reminder, unless voided;
/// each voided one (voided after its issue was answered) is gone, its reminder with it.
pub(crate) fn tickets(operations: &[Operation], tickets: &BTreeMap<u64, Ticket>) -> Vec<String> {
    let mut violations = Vec::new();
    for issue in operations
        .iter()
        .filter(|operation| operation.work == Work::Issue)
    {
        let entry = issue.entry;
        let Some(ticket) = tickets.get(&entry) else {
            continue;
        };
        let voids: Vec<&Operation> = operations
            .iter()
            .filter(|operation| operation.work == Work::Void { ticket: entry })
            .collect();
        let voided = voids.iter().any(|void| void.acknowledged_at.is_some());
        if voided {
            if *ticket != Ticket::default() {
                violations.push(format!(
                    "t-{entry} was voided, but its incarnation holds {ticket:?}"
                ));
            }
        } else if voids.is_empty() && issue.acknowledged_at.is_some() {
            let lapsed = Ticket {
                issued: Some(entry),
                lapsed: true,
            };
            if *ticket != lapsed {
                violations.push(format!(
                    "t-{entry} was issued and never voided, but is {ticket:?}"
                ));
            }
        }
    }
    violations
}
