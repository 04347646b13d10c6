//! Every scenario under "What the tests prove" in the ordered-jobs guide.

#[path = "../../examples/ledger_account/ledger.rs"]
mod ledger;
use crate::support;

use std::time::Duration;

use ledger::{EntryKind, LedgerAccount, LedgerAccountMessage};
use solid_objects::prelude::*;
use support::workers::{fire_due_reminders, run_workers_of};
use support::{count, eventually, rejection_code, Backend, Harness};

/// The ledger's `ledger_entries` table in MySQL's form, for the run on MariaDB.
const LEDGER_ENTRIES_MYSQL: &str = "
    CREATE TABLE IF NOT EXISTS ledger_entries (
        id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
        account_id   VARCHAR(255) NOT NULL,
        entry_id     VARCHAR(255) NOT NULL,
        kind         VARCHAR(16)  NOT NULL,
        amount_cents BIGINT       NOT NULL,
        UNIQUE (account_id, entry_id)
    ) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/// The ledger's `ledger_entries` table in PostgreSQL's form, for the run on PostgreSQL.
const LEDGER_ENTRIES_POSTGRES: &str = "
    CREATE TABLE IF NOT EXISTS ledger_entries (
        id           BIGSERIAL PRIMARY KEY,
        account_id   TEXT      NOT NULL,
        entry_id     TEXT      NOT NULL,
        kind         TEXT      NOT NULL,
        amount_cents BIGINT    NOT NULL,
        UNIQUE (account_id, entry_id)
    )";

/// A runtime on a database that has the application's `ledger_entries` table.
async fn ledger_runtime(harness: &Harness) -> Option<Runtime> {
    match harness.backend() {
        Backend::MariaDb => support::execute(harness, LEDGER_ENTRIES_MYSQL).await,
        Backend::Postgres => support::execute(harness, LEDGER_ENTRIES_POSTGRES).await,
        Backend::Sqlite => ledger::migrate(&harness.path()).await.unwrap(),
    }
    Some(harness.start().await)
}

/// The entry ids of an account, in the order `ledger_entries` received them.
async fn entries(harness: &Harness, account: &str) -> Vec<String> {
    let sql = "SELECT entry_id FROM ledger_entries WHERE account_id = ? ORDER BY id";
    support::column(harness, sql, &[account]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_apply_each_accounts_entries_in_enqueue_order() {
    let harness = Harness::new();
    let Some(caller) = ledger_runtime(&harness).await else {
        return;
    };
    let mixed = [
        ("alice", "a-1", EntryKind::Deposit, 100),
        ("bob", "b-1", EntryKind::Deposit, 30),
        ("alice", "a-2", EntryKind::Withdrawal, 80),
        ("bob", "b-2", EntryKind::Withdrawal, 30),
        ("alice", "a-3", EntryKind::Deposit, 5),
    ];
    let mut messages = Vec::new();
    for (account, entry_id, kind, cents) in mixed {
        let message = caller
            .reference::<LedgerAccount>(account)
            .enqueue()
            .idempotency_key(entry_id)
            .apply(entry_id, kind, cents)
            .await
            .unwrap();
        messages.push(message);
    }
    assert_eq!(
        count(&harness, "ledger_entries").await,
        0,
        "nothing ran yet"
    );

    let first = harness.start().await;
    let second = harness.start().await;
    let workers = [&first, &second].map(run_workers_of::<LedgerAccount>);
    let all_done = eventually(Duration::from_secs(20), || async {
        count(&harness, "solid_messages WHERE status = 'completed'").await == 5
    })
    .await;
    first.shutdown();
    second.shutdown();
    for worker in workers {
        worker.await.unwrap().unwrap();
    }

    assert!(all_done, "the workers did not finish the five entries");
    assert_eq!(entries(&harness, "alice").await, ["a-1", "a-2", "a-3"]);
    assert_eq!(entries(&harness, "bob").await, ["b-1", "b-2"]);
    let alice = caller.reference::<LedgerAccount>("alice");
    let bob = caller.reference::<LedgerAccount>("bob");
    assert_eq!(alice.snapshot().await.unwrap().balance_cents, 25);
    assert_eq!(bob.snapshot().await.unwrap().balance_cents, 0);
    let results: Vec<i64> = futures_results(&messages).await;
    assert_eq!(results, [100, 30, 20, 0, 25]);
    caller.close().await;
}

async fn futures_results(messages: &[MessageRef<i64>]) -> Vec<i64> {
    let mut results = Vec::new();
    for message in messages {
        results.push(message.result().await.unwrap().expect("the message ran"));
    }
    results
}

#[tokio::test]
async fn a_too_large_withdrawal_is_rejected_and_the_deposit_after_it_applies() {
    let harness = Harness::new();
    let Some(runtime) = ledger_runtime(&harness).await else {
        return;
    };
    let account = runtime.reference::<LedgerAccount>("carol");
    let withdrawal = account
        .enqueue()
        .apply("c-1", EntryKind::Withdrawal, 500)
        .await
        .unwrap();
    let deposit = account
        .enqueue()
        .apply("c-2", EntryKind::Deposit, 40)
        .await
        .unwrap();

    assert_eq!(runtime.testing().drain().await.unwrap().turns, 2);

    assert_eq!(
        rejection_code(withdrawal.result().await),
        "insufficient_funds"
    );
    assert_eq!(deposit.result().await.unwrap(), Some(40));
    assert_eq!(entries(&harness, "carol").await, ["c-2"]);
    runtime.close().await;
}

#[tokio::test]
async fn two_enqueues_with_one_key_and_a_direct_delivery_apply_the_entry_once() {
    let harness = Harness::new();
    let Some(runtime) = ledger_runtime(&harness).await else {
        return;
    };
    let account = runtime.reference::<LedgerAccount>("dave");

    let first = account
        .enqueue()
        .idempotency_key("d-1")
        .apply("d-1", EntryKind::Deposit, 70)
        .await
        .unwrap();
    let second = account
        .enqueue()
        .idempotency_key("d-1")
        .apply("d-1", EntryKind::Deposit, 70)
        .await
        .unwrap();
    assert_eq!(first.id(), second.id());
    runtime.testing().drain().await.unwrap();
    let repeat = LedgerAccountMessage::Apply {
        entry_id: "d-1".into(),
        kind: EntryKind::Deposit,
        amount_cents: 70,
    };
    let balance = runtime
        .testing()
        .deliver::<LedgerAccount>("dave", repeat)
        .await
        .unwrap();

    assert_eq!(balance, 70);
    assert_eq!(account.balance().await.unwrap(), 70);
    assert_eq!(entries(&harness, "dave").await, ["d-1"]);
    assert_eq!(
        count(&harness, "solid_messages WHERE actor_id = 'dave'").await,
        2
    );
    runtime.close().await;
}

#[tokio::test]
async fn after_102_entries_the_first_entry_again_changes_nothing() {
    let harness = Harness::new();
    let Some(runtime) = ledger_runtime(&harness).await else {
        return;
    };
    let account = runtime.reference::<LedgerAccount>("erin");
    for entry in 1..=102 {
        account
            .apply(format!("e-{entry}"), EntryKind::Deposit, 1)
            .await
            .unwrap();
    }

    let again = account.apply("e-1", EntryKind::Deposit, 1).await.unwrap();

    assert_eq!(again, 102);
    assert_eq!(account.balance().await.unwrap(), 102);
    assert_eq!(entries(&harness, "erin").await.len(), 102);
    runtime.close().await;
}

#[tokio::test]
async fn the_statement_reminder_runs_after_the_runtime_is_reopened() {
    let harness = Harness::new();
    let Some(runtime) = ledger_runtime(&harness).await else {
        return;
    };
    let account = runtime.reference::<LedgerAccount>("fay");
    account.apply("f-1", EntryKind::Deposit, 60).await.unwrap();
    runtime.close().await;
    drop(runtime);

    harness.advance_minutes(25 * 60);
    let runtime = harness.start().await;
    let account = runtime.reference::<LedgerAccount>("fay");
    assert_eq!(
        account.snapshot().await.unwrap().statement_balance_cents,
        None
    );
    assert_eq!(fire_due_reminders(&runtime).await, 1);

    assert_eq!(
        account.snapshot().await.unwrap().statement_balance_cents,
        Some(60)
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_rejected_or_failed_turn_leaves_no_application_row() {
    let harness = Harness::new();
    let Some(runtime) = ledger_runtime(&harness).await else {
        return;
    };
    let account = runtime.reference::<LedgerAccount>("gus");
    account.apply("g-1", EntryKind::Deposit, 10).await.unwrap();
    sqlx_rename_table(&harness).await;

    let failed = account.apply("g-2", EntryKind::Deposit, 10).await;

    assert!(
        matches!(
            &failed,
            Err(Error::HandlerFailed {
                retry_at: Some(_),
                ..
            })
        ),
        "{failed:?}"
    );
    assert_eq!(account.snapshot().await.unwrap().balance_cents, 10);
    assert_eq!(
        rejection_code(
            runtime
                .reference::<LedgerAccount>("hal")
                .apply("h-1", EntryKind::Withdrawal, 5)
                .await
        ),
        "insufficient_funds"
    );
    assert_eq!(count(&harness, "ledger_entries_moved").await, 1);
    runtime.close().await;
}

/// Moves `ledger_entries` away so that the next insert fails mid-turn, after the handler's
/// first statement ran behind the savepoint: reads still work, through a view that takes no
/// insert (MySQL inserts through a plain view; not through one with DISTINCT).
async fn sqlx_rename_table(harness: &Harness) {
    support::execute(
        harness,
        "CREATE TABLE ledger_entries_moved AS SELECT * FROM ledger_entries;
         DROP TABLE ledger_entries;
         CREATE VIEW ledger_entries AS SELECT DISTINCT * FROM ledger_entries_moved;",
    )
    .await;
}
