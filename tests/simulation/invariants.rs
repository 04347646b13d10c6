//! What must hold after every run, whatever failed, hung or crashed on the way: each
//! acknowledged operation applied once, nothing applied twice, each actor's order, each
//! reminder fired and each effect run and replied, no work left, and no error that said
//! "nothing was written" after something was.

use std::collections::BTreeMap;

use super::workload::{Ledger, Operation, Work};

/// The violations of the run whose operations were `operations`, whose ledgers ended as
/// `ledgers`, whose charges' effects ran `charges` times, and which left `ready` messages.
pub(crate) fn check(
    operations: &[Operation],
    ledgers: &[Ledger],
    charges: &BTreeMap<u64, u32>,
    ready: i64,
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
    violations.extend(order(operations, ledgers));
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
/// acknowledged before another was first made is applied (and credited) before it.
fn order(operations: &[Operation], ledgers: &[Ledger]) -> Vec<String> {
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
                let before = earlier
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
