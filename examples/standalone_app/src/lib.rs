//! A lending library on solid-objects: each book is an actor, and so is each member.
//!
//! A book lent out is due back after [`LOAN`]. If it is still out then, its durable reminder
//! marks it overdue, sends the member a message, and emits an [`OverdueNotice`] effect, which
//! the application's mailer (here an in-memory [`Outbox`]) delivers after the turn commits.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use solid_objects::prelude::*;
use solid_objects::{Builder, Clock, Effect, EffectContext};

/// How long a member may keep a book.
pub const LOAN: TimeDelta = TimeDelta::days(14);

/// One copy of a book: who has it and until when.
#[actor]
#[derive(Default)]
pub struct Book {
    loan: Option<Loan>,
}

/// A book's current loan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loan {
    /// The member who has the book.
    pub member: String,
    /// When the book is due back, in seconds since the Unix epoch.
    pub due_at: i64,
    /// Whether the due date passed with the book still out.
    pub overdue: bool,
}

#[actor]
impl Book {
    /// Lends the book to `member`; returns when it is due back.
    #[command]
    pub fn lend(&mut self, turn: &mut Turn<Self>, member: String) -> Result<i64, Rejection> {
        if let Some(loan) = &self.loan {
            return Err(reject!(already_lent, "The book is lent to {}", loan.member));
        }
        let due = turn.now() + LOAN;
        turn.schedule(due, "due").fall_due(due.timestamp());
        self.loan = Some(Loan {
            member,
            due_at: due.timestamp(),
            overdue: false,
        });
        Ok(due.timestamp())
    }

    /// Takes the book back from `member`.
    #[command]
    pub fn take_back(&mut self, turn: &mut Turn<Self>, member: String) -> Result<(), Rejection> {
        if self.loan.as_ref().is_none_or(|loan| loan.member != member) {
            return Err(reject!(
                not_lent_to_member,
                "{member} does not have this book"
            ));
        }
        self.loan = None;
        turn.unschedule("due").fall_due();
        let book = turn.actor_id().to_owned();
        turn.send::<Member>(member).returned(book);
        Ok(())
    }

    /// The current loan, if the book is out.
    #[query]
    pub fn loan(&self) -> Option<Loan> {
        self.loan.clone()
    }

    /// The due date came. Delivery is at least once, so it checks the date it carries.
    #[reminder]
    fn fall_due(&mut self, turn: &mut Turn<Self>, due_at: i64) {
        let Some(loan) = self.loan.as_mut().filter(|loan| loan.due_at == due_at) else {
            return;
        };
        if loan.overdue {
            return;
        }
        loan.overdue = true;
        let (member, book) = (loan.member.clone(), turn.actor_id().to_owned());
        turn.send::<Member>(member.clone())
            .book_overdue(book.clone());
        turn.emit(OverdueNotice { member, book });
    }
}

/// A member of the library: the books they have kept past their due date.
#[actor]
#[derive(Default)]
pub struct Member {
    overdue: BTreeSet<String>,
}

#[actor]
impl Member {
    /// A book this member has is overdue.
    #[command]
    pub fn book_overdue(&mut self, book: String) {
        self.overdue.insert(book);
    }

    /// This member brought a book back.
    #[command]
    pub fn returned(&mut self, book: String) {
        self.overdue.remove(&book);
    }

    /// The books this member has kept past their due date.
    #[query]
    pub fn overdue_books(&self) -> Vec<String> {
        self.overdue.iter().cloned().collect()
    }
}

/// Tell a member that a book is overdue: work outside the database, run after the commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverdueNotice {
    /// Who is told.
    pub member: String,
    /// Which book.
    pub book: String,
}

impl Effect for OverdueNotice {
    const NAME: &'static str = "overdue_notice";
    type Output = ();
}

/// Where notices go: stands in for a mailer. Each notice is kept once per effect id, as an
/// outside service would deduplicate by the idempotency key.
#[derive(Clone, Debug, Default)]
pub struct Outbox {
    sent: Arc<Mutex<Vec<(String, OverdueNotice)>>>,
}

impl Outbox {
    /// The notices delivered so far, in order.
    pub fn sent(&self) -> Vec<OverdueNotice> {
        let sent = self.sent.lock().expect("outbox lock");
        sent.iter().map(|(_, notice)| notice.clone()).collect()
    }

    fn deliver(&self, key: &str, notice: OverdueNotice) {
        let mut sent = self.sent.lock().expect("outbox lock");
        if !sent.iter().any(|(sent_key, _)| sent_key == key) {
            sent.push((key.to_owned(), notice));
        }
    }
}

/// Starts the library's runtime on the SQLite file at `path`.
pub async fn start(
    path: impl Into<PathBuf>,
    clock: impl Clock,
    outbox: Outbox,
) -> Result<Runtime, Error> {
    start_on(Runtime::builder().sqlite(path), clock, outbox).await
}

/// Starts the library's runtime on the database `builder` names (its tests pass a
/// PostgreSQL or MySQL database of their own).
pub async fn start_on(
    builder: Builder,
    clock: impl Clock,
    outbox: Outbox,
) -> Result<Runtime, Error> {
    builder
        .clock(clock)
        .policy(AllowAll)
        .actor::<Book>()
        .actor::<Member>()
        .effect(move |notice: OverdueNotice, context: EffectContext| {
            let outbox = outbox.clone();
            async move {
                outbox.deliver(context.id(), notice);
                Ok::<(), Failure>(())
            }
        })
        .start()
        .await
}
