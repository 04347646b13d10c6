//! One ledger account per customer: the ordered-jobs guide's actor.
//!
//! Entries arrive as enqueued messages and apply one at a time, in the order they were
//! enqueued. Each applied entry writes a row of the application's own `ledger_entries` table
//! in the turn's transaction, so the row and the new balance commit together or not at all;
//! the row (unique per account and entry) is what makes a repeated delivery harmless.

use std::path::Path;

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;

/// The application's own table, created by the application's own migration.
pub const LEDGER_ENTRIES: &str = "
    CREATE TABLE IF NOT EXISTS ledger_entries (
        id           INTEGER PRIMARY KEY,
        account_id   TEXT    NOT NULL,
        entry_id     TEXT    NOT NULL,
        kind         TEXT    NOT NULL,
        amount_cents INTEGER NOT NULL,
        UNIQUE (account_id, entry_id)
    )";

/// Whether an entry was applied to an account.
const APPLIED: &str = "SELECT COUNT(*) FROM ledger_entries WHERE account_id = ? AND entry_id = ?";

/// Records an applied entry.
const RECORD: &str = "INSERT INTO ledger_entries (account_id, entry_id, kind, amount_cents)
                      VALUES (?, ?, ?, ?)";

/// [`APPLIED`] in PostgreSQL's form (numbered placeholders).
const APPLIED_POSTGRES: &str =
    "SELECT COUNT(*) FROM ledger_entries WHERE account_id = $1 AND entry_id = $2";

/// [`RECORD`] in PostgreSQL's form (numbered placeholders).
const RECORD_POSTGRES: &str =
    "INSERT INTO ledger_entries (account_id, entry_id, kind, amount_cents)
                               VALUES ($1, $2, $3, $4)";

/// Creates the application's tables in the database file the runtime uses.
pub async fn migrate(database: &Path) -> Result<(), sqlx::Error> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(database)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await?;
    sqlx::query(LEDGER_ENTRIES).execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// Whether an entry adds or takes money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Deposit,
    Withdrawal,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Deposit => "deposit",
            Self::Withdrawal => "withdrawal",
        }
    }
}

/// One customer's account.
#[actor]
#[derive(Debug, Default)]
pub struct LedgerAccount {
    pub balance_cents: i64,
    /// The balance when the daily statement last closed.
    pub statement_balance_cents: Option<i64>,
}

#[actor]
impl LedgerAccount {
    /// Applies an entry once: a repeated entry id returns the balance and changes nothing;
    /// a withdrawal below zero is rejected with `insufficient_funds`.
    #[command]
    pub async fn apply(
        &mut self,
        turn: &mut Turn<Self>,
        entry_id: String,
        kind: EntryKind,
        amount_cents: i64,
    ) -> Result<i64, TurnError> {
        let account_id = turn.actor_id().to_owned();
        let applied: i64 = match turn.sqlite().await {
            Ok(sqlite) => {
                sqlx::query_scalar(APPLIED)
                    .bind(&account_id)
                    .bind(&entry_id)
                    .fetch_one(sqlite)
                    .await?
            }
            Err(Error::Config(_)) => match turn.postgres().await {
                Ok(postgres) => {
                    sqlx::query_scalar(APPLIED_POSTGRES)
                        .bind(&account_id)
                        .bind(&entry_id)
                        .fetch_one(postgres)
                        .await?
                }
                Err(Error::Config(_)) => {
                    sqlx::query_scalar(APPLIED)
                        .bind(&account_id)
                        .bind(&entry_id)
                        .fetch_one(turn.mysql().await?)
                        .await?
                }
                Err(error) => return Err(error.into()),
            },
            Err(error) => return Err(error.into()),
        };
        if applied > 0 {
            return Ok(self.balance_cents);
        }
        let change = match kind {
            EntryKind::Deposit => amount_cents,
            EntryKind::Withdrawal => -amount_cents,
        };
        if self.balance_cents + change < 0 {
            return Err(reject!(
                insufficient_funds,
                "The balance is too low for this withdrawal"
            )
            .into());
        }
        self.balance_cents += change;
        // The row commits with the new balance, on whichever database the actors are in.
        match turn.sqlite().await {
            Ok(sqlite) => {
                sqlx::query(RECORD)
                    .bind(&account_id)
                    .bind(&entry_id)
                    .bind(kind.as_str())
                    .bind(amount_cents)
                    .execute(sqlite)
                    .await?;
            }
            Err(Error::Config(_)) => match turn.postgres().await {
                Ok(postgres) => {
                    sqlx::query(RECORD_POSTGRES)
                        .bind(&account_id)
                        .bind(&entry_id)
                        .bind(kind.as_str())
                        .bind(amount_cents)
                        .execute(postgres)
                        .await?;
                }
                Err(Error::Config(_)) => {
                    sqlx::query(RECORD)
                        .bind(&account_id)
                        .bind(&entry_id)
                        .bind(kind.as_str())
                        .bind(amount_cents)
                        .execute(turn.mysql().await?)
                        .await?;
                }
                Err(error) => return Err(error.into()),
            },
            Err(error) => return Err(error.into()),
        }
        let tomorrow = turn.now() + TimeDelta::days(1);
        turn.schedule(tomorrow, "daily").close_statement();
        Ok(self.balance_cents)
    }

    /// Closes the daily statement.
    #[reminder]
    fn close_statement(&mut self) -> i64 {
        self.statement_balance_cents = Some(self.balance_cents);
        self.balance_cents
    }

    /// The current balance, in mailbox order.
    #[query]
    pub fn balance(&self) -> i64 {
        self.balance_cents
    }
}
