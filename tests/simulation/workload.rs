//! The actors a simulated run works on, and the operations its callers make, each as a real
//! client would: a synchronous call or an enqueue under an idempotency key, retried later
//! under the same key when it failed.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::Effect;

use super::box_office::{self, Show, Ticket};

/// The accounts the runs' ledgers are.
pub(crate) const ACCOUNTS: usize = 3;

/// A ledger: entries applied in order, credits sent by other ledgers, reminders that came
/// due, and charges whose effect replied. Its messages die after a few failed attempts, so
/// faults make dead letters, which an operator redrives.
#[actor(max_attempts = 2)]
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) entries: Vec<u64>,
    pub(crate) credits: Vec<u64>,
    pub(crate) reminded: Vec<u64>,
    pub(crate) charged: Vec<u64>,
}

#[actor]
impl Ledger {
    /// Applies `entry`; returns how many entries are applied.
    #[command]
    fn apply(&mut self, entry: u64) -> usize {
        self.entries.push(entry);
        self.entries.len()
    }

    /// Applies `entry` here and credits it to the ledger `to`, with the same commit.
    #[command]
    fn transfer(&mut self, turn: &mut Turn<Self>, entry: u64, to: String) -> usize {
        self.entries.push(entry);
        turn.send::<Ledger>(to).credit(entry);
        self.entries.len()
    }

    #[command]
    fn credit(&mut self, entry: u64) {
        self.credits.push(entry);
    }

    /// Reminds this ledger of `entry` `after_millis` from now.
    #[command]
    fn remind(&mut self, turn: &mut Turn<Self>, entry: u64, after_millis: i64) {
        turn.schedule(
            turn.now() + TimeDelta::milliseconds(after_millis),
            format!("r-{entry}"),
        )
        .recall(entry);
    }

    /// A reminder comes at least once per occurrence: the guard keeps it once.
    #[reminder]
    fn recall(&mut self, entry: u64) {
        if !self.reminded.contains(&entry) {
            self.reminded.push(entry);
        }
    }

    /// Charges `entry` outside the database; the charge's reply records it.
    #[command]
    fn charge(&mut self, turn: &mut Turn<Self>, entry: u64) {
        turn.emit(Charge { entry }).on_success().charged();
    }

    #[reply]
    fn charged(&mut self, entry: u64) {
        self.charged.push(entry);
    }
}

/// An effect: a charge the world counts the runs of.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Charge {
    pub(crate) entry: u64,
}

impl Effect for Charge {
    const NAME: &'static str = "charge";
    type Output = u64;
}

/// What one caller's operation does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Work {
    /// A synchronous `apply`.
    Apply,
    /// An enqueued `apply`.
    Enqueue,
    /// A synchronous `transfer` to another account.
    Transfer { to: usize },
    /// A synchronous `remind`.
    Remind { after_millis: i64 },
    /// A synchronous `charge`.
    Charge,
    /// A synchronous hold of `seats` on the show `account`.
    Hold { seats: u32 },
    /// A synchronous confirmation of the hold made by operation `hold` on the show `account`.
    Confirm { hold: u64 },
    /// A synchronous issue of the ticket of this operation's entry.
    Issue,
    /// A synchronous void (a destroy) of the ticket operation `ticket` issued.
    Void { ticket: u64 },
}

/// One operation of a run, as the model keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Operation {
    /// Its entry: the operation's number in the run, unique.
    pub(crate) entry: u64,
    pub(crate) account: usize,
    pub(crate) work: Work,
    /// When it was first made, and when (if ever) it was acknowledged, in operations.
    pub(crate) issued_at: usize,
    pub(crate) acknowledged_at: Option<usize>,
    /// How many attempts ended in an error that says nothing was written, and how many
    /// ended otherwise unacknowledged (cancelled, crashed, an error that says nothing).
    pub(crate) said_nothing: usize,
    pub(crate) unknown: usize,
    /// What its acknowledged attempt answered.
    pub(crate) answer: Option<String>,
    /// How long its caller waits for a synchronous answer, if less than the runtime's
    /// minute: a client with a short deadline.
    pub(crate) deadline_millis: Option<u64>,
}

impl Operation {
    pub(crate) fn key(&self) -> String {
        format!("e-{}", self.entry)
    }
}

/// The account's id.
pub(crate) fn account(account: usize) -> String {
    format!("l-{account}")
}

/// Runs one attempt of `operation` on `runtime`: `Ok` with what it answered (a rejection is
/// an answer), or the error.
pub(crate) async fn attempt(
    runtime: &Runtime,
    operation: &Operation,
) -> solid_objects::Result<String> {
    match answer(runtime, operation).await {
        Err(Error::Rejected(rejection)) => Ok(format!("rejected {}", rejection.code())),
        answered => answered,
    }
}

async fn answer(runtime: &Runtime, operation: &Operation) -> solid_objects::Result<String> {
    let deadline = Duration::from_millis(operation.deadline_millis.unwrap_or(60_000));
    let ledger = runtime
        .reference::<Ledger>(account(operation.account))
        .idempotency_key(operation.key())
        .timeout(deadline);
    let show = runtime
        .reference::<Show>(box_office::show(operation.account))
        .idempotency_key(operation.key())
        .timeout(deadline);
    let entry = operation.entry;
    match &operation.work {
        Work::Apply => ledger.apply(entry).await.map(|count| count.to_string()),
        Work::Enqueue => runtime
            .reference::<Ledger>(account(operation.account))
            .enqueue()
            .idempotency_key(operation.key())
            .apply(entry)
            .await
            .map(|_| "enqueued".to_owned()),
        Work::Transfer { to } => ledger
            .transfer(entry, account(*to))
            .await
            .map(|count| count.to_string()),
        Work::Remind { after_millis } => ledger
            .remind(entry, *after_millis)
            .await
            .map(|()| "scheduled".to_owned()),
        Work::Charge => ledger.charge(entry).await.map(|()| "emitted".to_owned()),
        Work::Hold { seats } => show
            .hold(entry, *seats)
            .await
            .map(|left| format!("held, {left} left")),
        Work::Confirm { hold } => show.confirm(*hold).await.map(|()| "confirmed".to_owned()),
        Work::Issue => runtime
            .reference::<Ticket>(box_office::ticket(entry))
            .idempotency_key(operation.key())
            .timeout(deadline)
            .issue(entry)
            .await
            .map(|()| "issued".to_owned()),
        Work::Void { ticket } => runtime
            .reference::<Ticket>(box_office::ticket(*ticket))
            .idempotency_key(operation.key())
            .timeout(deadline)
            .void()
            .await
            .map(|()| "voided".to_owned()),
    }
}

/// Whether an error says, without a condition, that nothing of the attempt was written.
/// (A timeout of a call whose group commit had not ended says "nothing of it was kept" only
/// if its message is not found: a condition, not a claim.)
pub(crate) fn says_nothing_was_written(error: &Error) -> bool {
    let text = error.to_string();
    [
        "nothing was written",
        "nothing was enqueued",
        "nothing of this call was written",
        "nothing of it was kept: run it again",
        "(nothing of it was kept)",
        "nothing was kept",
        "nothing changed",
    ]
    .iter()
    .any(|claim| text.contains(claim))
}

/// An error's variant, for the trace (its text names times the run does not fix).
pub(crate) fn variant(error: &Error) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}
