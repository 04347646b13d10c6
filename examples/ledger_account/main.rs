//! The ordered-jobs guide: one `LedgerAccount` actor per customer.
//!
//! `cargo run --example ledger_account` enqueues entries for two accounts in one mixed
//! order, lets the workers apply them, and prints each account's entries in the order the
//! `ledger_entries` table received them.

mod ledger;

use std::time::Duration;

use ledger::{EntryKind, LedgerAccount};
use solid_objects::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("ledger.db");
    ledger::migrate(&database).await?;
    let runtime = Runtime::builder()
        .sqlite(&database)
        .policy(AllowAll)
        .set_default() // `LedgerAccount::reference(id)` below reaches this runtime
        .start()
        .await?;
    let workers = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run().await }
    });

    let entries = [
        ("alice", "a-1", EntryKind::Deposit, 100),
        ("bob", "b-1", EntryKind::Deposit, 30),
        ("alice", "a-2", EntryKind::Withdrawal, 80),
        ("bob", "b-2", EntryKind::Withdrawal, 30),
        ("alice", "a-3", EntryKind::Deposit, 5),
    ];
    let mut pending = Vec::new();
    for (account, entry_id, kind, cents) in entries {
        let message = LedgerAccount::reference(account)
            .enqueue()
            .idempotency_key(entry_id)
            .apply(entry_id, kind, cents)
            .await?;
        pending.push((account, entry_id, message));
    }
    for (account, entry_id, message) in pending {
        let balance = message.wait(Duration::from_secs(10)).await?;
        println!("{account} applied {entry_id}: balance {balance}");
    }
    for (account, expected) in [("alice", 25), ("bob", 0)] {
        let balance = LedgerAccount::reference(account).balance().await?;
        println!("{account}: {balance} cents");
        assert_eq!(
            balance, expected,
            "{account}'s entries applied once each, in order"
        );
    }
    runtime.shutdown();
    workers.await??;
    runtime.close().await;
    Ok(())
}
