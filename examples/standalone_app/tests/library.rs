//! The library's actors under the runtime's testing API: a manual clock, due reminders fired
//! by hand, mailboxes drained, effects run, and nothing left to a sleep.
//!
//! Each test has a database of its own: a temporary SQLite file, or, with
//! `LIBRARY_TEST_SERVER` set to a PostgreSQL or MySQL server URL
//! (`postgres://postgres@localhost/postgres`), a database created on that server for the
//! test and dropped after it, so tests running side by side never fire each other's
//! reminders.

use std::time::Duration;

use solid_objects::{Error, ManualClock, Runtime, TestDatabase};
use standalone_app::{Book, LOAN, Loan, Member, Outbox, OverdueNotice, start_on};

struct Library {
    clock: ManualClock,
    outbox: Outbox,
    runtime: Runtime,
    /// The test's database, removed when the test ends.
    _database: TestDatabase,
}

async fn library() -> Library {
    let clock = ManualClock::starting_now();
    let outbox = Outbox::default();
    let database = TestDatabase::from_env("LIBRARY_TEST_SERVER")
        .await
        .expect("a database of this test's own");
    let runtime = start_on(database.builder(4), clock.clone(), outbox.clone()).await;
    Library {
        clock,
        outbox,
        runtime: runtime.expect("the runtime starts"),
        _database: database,
    }
}

fn past_due() -> Duration {
    (LOAN + solid_objects::chrono::TimeDelta::minutes(1))
        .to_std()
        .expect("a positive duration")
}

#[tokio::test]
async fn a_book_is_lent_once_and_the_loan_reads_back() -> Result<(), Error> {
    let library = library().await;
    let book = library.runtime.reference::<Book>("dune-1");

    let due_at = book.lend("ana").await?;
    assert_eq!(due_at, (library.clock.now() + LOAN).timestamp());
    assert_eq!(
        book.loan().await?,
        Some(Loan {
            member: "ana".into(),
            due_at,
            overdue: false
        })
    );

    let Err(Error::Rejected(rejection)) = book.lend("ben").await else {
        panic!("a book already lent cannot be lent again");
    };
    assert_eq!(rejection.code(), "already_lent");
    assert_eq!(
        book.loan().await?.map(|loan| loan.member),
        Some("ana".into())
    );
    Ok(())
}

#[tokio::test]
async fn the_due_reminder_marks_the_loan_and_tells_the_member_once() -> Result<(), Error> {
    let library = library().await;
    let testing = library.runtime.testing();
    let book = library.runtime.reference::<Book>("dune-1");
    let ana = library.runtime.reference::<Member>("ana");
    book.lend("ana").await?;

    // Not due yet: nothing fires.
    library.clock.advance(Duration::from_secs(60 * 60));
    assert_eq!(testing.run_due_reminders().await?.occurrences_fired, 0);
    assert!(!book.loan().await?.expect("lent").overdue);

    // Past the due date: the reminder fires, its message to the member is drained.
    library.clock.advance(past_due());
    assert_eq!(testing.run_due_reminders().await?.occurrences_fired, 1);
    assert!(book.loan().await?.expect("lent").overdue);
    assert_eq!(ana.overdue_books().await?, vec!["dune-1".to_owned()]);

    // The notice is an effect: it runs after the commit, once.
    assert!(library.outbox.sent().is_empty());
    assert_eq!(testing.run_effects().await?, 1);
    assert_eq!(testing.run_effects().await?, 0);
    let notice = OverdueNotice {
        member: "ana".into(),
        book: "dune-1".into(),
    };
    assert_eq!(library.outbox.sent(), vec![notice]);
    Ok(())
}

#[tokio::test]
async fn a_book_back_in_time_cancels_its_reminder_and_a_late_one_clears_it() -> Result<(), Error> {
    let library = library().await;
    let testing = library.runtime.testing();
    let ana = library.runtime.reference::<Member>("ana");

    // Back before the due date: the reminder is gone, nothing is overdue.
    let early = library.runtime.reference::<Book>("dune-1");
    early.lend("ana").await?;
    early.take_back("ana").await?;
    assert_eq!(
        testing.drain().await?.turns,
        1,
        "the member hears that the book came back"
    );
    library.clock.advance(past_due());
    assert_eq!(testing.run_due_reminders().await?.occurrences_fired, 0);
    assert_eq!(early.loan().await?, None);

    // Back late: the member's overdue list empties again.
    let late = library.runtime.reference::<Book>("emma-1");
    late.lend("ana").await?;
    library.clock.advance(past_due());
    assert_eq!(testing.run_due_reminders().await?.occurrences_fired, 1);
    assert_eq!(ana.overdue_books().await?, vec!["emma-1".to_owned()]);
    late.take_back("ana").await?;
    testing.drain().await?;
    assert!(ana.overdue_books().await?.is_empty());

    // Only the member who has the book can bring it back.
    late.lend("ana").await?;
    let Err(Error::Rejected(rejection)) = late.take_back("ben").await else {
        panic!("ben does not have the book");
    };
    assert_eq!(rejection.code(), "not_lent_to_member");
    Ok(())
}
