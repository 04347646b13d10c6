//! An auction house: one `Auction` actor per lot, for an actor that lives for years.
//!
//! `cargo run --example auction` shows, on a SQLite file in a temp dir and a manual clock:
//!
//! - **a state migration**: a lot stored by last year's build at state version 1 (whole
//!   euros, only the leading bid), written here with raw SQL before this build starts, is
//!   read through `#[migrate(from = 1)]` by this `#[actor(version = 2)]` build; reading
//!   migrates in memory, the next committed turn stores version 2;
//! - **typed rejections**: `bid` returns `Result<u64, BidError>`, and the caller gets its
//!   `BidError` back with `error.rejection::<BidError>()`;
//! - **a recurring reminder**: opening a lot schedules an hourly digest with
//!   `turn.schedule_every`; the close stops it with `turn.unschedule("digest").digest()`;
//! - **destroy and incarnations**: archiving a settled lot calls `turn.destroy()`, and an
//!   operator withdraws a lot with `reference.destroy()`, which the `AuctionHouse` policy
//!   allows operators only; each time the id starts over as a new incarnation.
//!
//! Every step prints what happened and asserts it.

mod auction;

use std::path::Path;

use auction::{Auction, AuctionHouse, AuctionRef, Bid, BidError, Digest, Phase, Sale};
use solid_objects::prelude::*;

type Outcome<T> = Result<T, Box<dyn std::error::Error>>;

/// One lot as each caller reaches it: the context says who calls, and the policy decides.
struct Callers {
    olga: AuctionRef,
    ana: AuctionRef,
    ben: AuctionRef,
    cy: AuctionRef,
}

impl Callers {
    fn on(runtime: &Runtime, lot: &str) -> Self {
        let as_caller = |who: Value| runtime.reference::<Auction>(lot).context(who);
        Self {
            olga: as_caller(json!({ "operator": "olga" })),
            ana: as_caller(json!({ "bidder": "ana" })),
            ben: as_caller(json!({ "bidder": "ben" })),
            cy: as_caller(json!({ "bidder": "cy" })),
        }
    }
}

#[tokio::main]
async fn main() -> Outcome<()> {
    let dir = tempfile::tempdir()?;
    let database = dir.path().join("auctions.db");
    last_years_build(&database).await?;

    let clock = ManualClock::starting_now();
    let runtime = Runtime::builder()
        .sqlite(&database)
        .clock(clock.clone())
        .policy(AuctionHouse)
        .start()
        .await?;
    migrated_lot(&Callers::on(&runtime, "lot-1").olga, &database).await?;

    println!("-- lot-7: bids, an hourly digest, the close");
    let lot_7 = Callers::on(&runtime, "lot-7");
    bidding(&runtime, &clock, &lot_7).await?;

    println!("-- lot-7 again: a new incarnation, withdrawn by an operator");
    withdrawn_lot(&runtime, &clock, &lot_7).await?;

    runtime.close().await;
    Ok(())
}

/// What last year's deployment left in the database: the runtime's schema, and lot-1's
/// state as version 1 stored it (whole euros, only the leading bid), closed but not settled.
async fn last_years_build(database: &Path) -> Outcome<()> {
    println!("-- lot-1, stored by last year's build at state version 1");
    // The schema is the runtime's own: starting one creates it.
    let runtime = Runtime::builder()
        .sqlite(database)
        .policy(AuctionHouse)
        .start()
        .await?;
    runtime.close().await;

    let v1 = r#"{"item":"Oak writing desk","reserve":120,"leader":"ana","high_bid":150,"closes_at":1700000000,"closed":true}"#;
    let pool = pool(database).await?;
    sqlx::query(
        "INSERT INTO solid_instances (actor_type, actor_id, state, state_version, updated_at)
         VALUES ('Auction', 'lot-1', ?1, 1, 0)",
    )
    .bind(v1)
    .execute(&pool)
    .await?;
    pool.close().await;
    println!("stored with raw SQL: {v1}");
    Ok(())
}

/// Reads lot-1 through this build's migration, settles it (stored at version 2) and
/// archives it (`turn.destroy()`).
async fn migrated_lot(lot: &AuctionRef, database: &Path) -> Outcome<()> {
    let summary = lot.summary().await?;
    let version = stored_version(database, "lot-1").await?;
    println!(
        "read by this build: {}, {:?}, {} leads at {}; still stored at version {version}",
        summary.item,
        summary.phase,
        bidder(&summary.leading),
        euros(summary.leading.as_ref().map_or(0, |bid| bid.amount_cents)),
    );
    assert_eq!(summary.phase, Phase::Closed);
    assert_eq!(summary.leading, Some(bid("ana", 15_000)));
    assert_eq!(version, 1, "reading migrates in memory only");

    let sale = lot.settle().await?;
    let version = stored_version(database, "lot-1").await?;
    println!("settled: {}; now stored at version {version}", sold(&sale));
    assert_eq!(sale.winner, Some(bid("ana", 15_000)));
    assert_eq!(version, 2, "the committed turn stores the current version");

    lot.archive().await?;
    let summary = lot.summary().await?;
    println!(
        "archived: lot-1 is now incarnation {}, item {:?}, {} bids",
        summary.incarnation, summary.item, summary.bids
    );
    assert_eq!((summary.incarnation, summary.bids), (2, 0));
    Ok(())
}

/// A lot's life: typed rejections, an hourly digest on the manual clock, the close that
/// stops it, the sale, and the archive that destroys the actor.
async fn bidding(runtime: &Runtime, clock: &ManualClock, lot: &Callers) -> Outcome<()> {
    let Callers { olga, ana, ben, cy } = lot;
    let reserve = 20_000; // cents, like every amount
    let incarnation = olga.open("Brass telescope", reserve, 150).await?;
    println!(
        "olga opens lot-7: Brass telescope, reserve {}, closing in 150 min: incarnation {incarnation}",
        euros(reserve)
    );
    assert_eq!(incarnation, 1);

    assert_eq!(
        place(ana, "ana", 15_000).await?,
        Err(BidError::TooLow { minimum: 20_000 })
    );
    assert_eq!(place(ana, "ana", 20_000).await?, Ok(20_500));
    assert_eq!(
        place(ana, "ana", 21_000).await?,
        Err(BidError::AlreadyLeading)
    );
    assert_eq!(
        place(ben, "ben", 20_300).await?,
        Err(BidError::TooLow { minimum: 20_500 })
    );
    let impersonation = ben.bid("ana", 24_000).await.unwrap_err();
    println!("ben bids {} in ana's name: {impersonation}", euros(24_000));
    assert!(matches!(impersonation, Error::Unauthorized { .. }));
    assert_eq!(place(ben, "ben", 24_000).await?, Ok(24_500));

    assert_eq!(advance(runtime, clock, 60).await?, 1);
    assert_eq!(place(ana, "ana", 26_000).await?, Ok(26_500));
    assert_eq!(advance(runtime, clock, 60).await?, 1);
    let digests = olga.digests().await?;
    for digest in &digests {
        println!(
            "  digest at {} min: {} new bid(s), {} leads at {}",
            digest.minutes_open,
            digest.new_bids,
            bidder(&digest.leading),
            euros(digest.leading.as_ref().map_or(0, |bid| bid.amount_cents)),
        );
    }
    assert_eq!(
        digests,
        [
            digest(60, 2, bid("ben", 24_000)),
            digest(120, 1, bid("ana", 26_000)),
        ]
    );

    assert_eq!(advance(runtime, clock, 30).await?, 1, "the close");
    let phase = olga.summary().await?.phase;
    println!("  lot-7 is {phase:?}; the close unscheduled the digest");
    assert_eq!(phase, Phase::Closed);
    assert_eq!(
        advance(runtime, clock, 30).await?,
        0,
        "no digest after the close"
    );
    assert_eq!(advance(runtime, clock, 60).await?, 0);
    assert_eq!(olga.digests().await?.len(), 2);
    assert_eq!(place(cy, "cy", 30_000).await?, Err(BidError::Closed));

    let sale = olga.settle().await?;
    println!("olga settles: {}", sold(&sale));
    assert_eq!(sale.winner, Some(bid("ana", 26_000)));
    olga.archive().await?;
    let summary = olga.summary().await?;
    println!(
        "olga archives lot-7 (turn.destroy()): incarnation {}, {} bids",
        summary.incarnation, summary.bids
    );
    assert_eq!((summary.incarnation, summary.bids), (2, 0));
    Ok(())
}

/// The id carries the next lot; a bidder may not withdraw it, an operator may
/// (`reference.destroy()`), and its reminders go with it.
async fn withdrawn_lot(runtime: &Runtime, clock: &ManualClock, lot: &Callers) -> Outcome<()> {
    let Callers { olga, ana, ben, .. } = lot;
    let reserve = 8_000;
    let incarnation = olga.open("Walnut clock", reserve, 120).await?;
    println!(
        "olga opens lot-7: Walnut clock, reserve {}: incarnation {incarnation}",
        euros(reserve)
    );
    assert_eq!(incarnation, 2);
    assert_eq!(place(ana, "ana", 8_000).await?, Ok(8_500));

    let refused = ben.destroy().await.unwrap_err();
    println!("ben withdraws lot-7: {refused}");
    assert!(matches!(refused, Error::Unauthorized { .. }));

    olga.destroy().await?;
    let summary = olga.summary().await?;
    println!(
        "olga withdraws lot-7 (reference.destroy()): incarnation {}, item {:?}, {} bids",
        summary.incarnation, summary.item, summary.bids
    );
    assert_eq!((summary.incarnation, summary.bids), (3, 0));
    assert_eq!(
        advance(runtime, clock, 180).await?,
        0,
        "the withdrawn lot's close and digest went with it"
    );
    Ok(())
}

/// Places a bid and prints it; a rejection comes back as the command's own `BidError`.
async fn place(lot: &AuctionRef, bidder: &str, cents: u64) -> Outcome<Result<u64, BidError>> {
    let outcome = match lot.bid(bidder, cents).await {
        Ok(next) => Ok(next),
        Err(error) => match error.rejection::<BidError>() {
            Some(rejection) => Err(rejection),
            None => return Err(error.into()),
        },
    };
    match &outcome {
        Ok(next) => println!(
            "{bidder} bids {}: leads; next minimum {}",
            euros(cents),
            euros(*next)
        ),
        Err(rejection) => println!("{bidder} bids {}: {rejection:?}", euros(cents)),
    }
    Ok(outcome)
}

/// Moves the manual clock and fires what fell due; returns how many reminders fired.
async fn advance(runtime: &Runtime, clock: &ManualClock, minutes: i64) -> Outcome<usize> {
    clock.advance(TimeDelta::minutes(minutes));
    let fired = runtime
        .testing()
        .run_due_reminders()
        .await?
        .occurrences_fired;
    println!("  {minutes} min later: {fired} reminder(s) fired");
    Ok(fired)
}

async fn pool(database: &Path) -> Result<sqlx::SqlitePool, sqlx::Error> {
    sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(database))
        .await
}

/// The state version stored beside lot `id`'s state.
async fn stored_version(database: &Path, id: &str) -> Result<i64, sqlx::Error> {
    let pool = pool(database).await?;
    let version = sqlx::query_scalar(
        "SELECT state_version FROM solid_instances WHERE actor_type = 'Auction' AND actor_id = ?1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await;
    pool.close().await;
    version
}

fn euros(cents: u64) -> String {
    format!("€{}.{:02}", cents / 100, cents % 100)
}

fn bidder(bid: &Option<Bid>) -> &str {
    bid.as_ref().map_or("nobody", |bid| &bid.bidder)
}

fn sold(sale: &Sale) -> String {
    match &sale.winner {
        Some(winner) => format!(
            "{} to {} for {}",
            sale.item,
            winner.bidder,
            euros(winner.amount_cents)
        ),
        None => format!("{} unsold", sale.item),
    }
}

fn bid(bidder: &str, amount_cents: u64) -> Bid {
    Bid {
        bidder: bidder.to_owned(),
        amount_cents,
    }
}

fn digest(minutes_open: i64, new_bids: u32, leading: Bid) -> Digest {
    Digest {
        minutes_open,
        new_bids,
        leading: Some(leading),
    }
}
