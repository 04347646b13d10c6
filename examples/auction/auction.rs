//! One `Auction` actor per lot, and the auction house's policy.
//!
//! An operator opens a lot with a reserve and a closing time; bidders bid as themselves; an
//! hourly reminder keeps a digest of the bidding until the lot closes; the operator settles
//! the sale and archives the lot, which destroys the actor so its id can carry the next lot.
//!
//! The state is at version 2: version 1 kept whole euros and only the leading bid.

use serde::{Deserialize, Serialize};
use solid_objects::policy::{Denied, Request};
use solid_objects::prelude::*;

/// What a new bid must beat the leading one by.
pub const INCREMENT_CENTS: u64 = 500;

/// Why a bid is refused, as the bidder's client can match on it.
#[derive(Debug, PartialEq, Rejection)]
pub enum BidError {
    #[rejection(message = "The lot is not open for bids")]
    NotOpen,
    #[rejection(message = "Bidding on this lot has closed")]
    Closed,
    #[rejection(message = "Bid at least {minimum} cents")]
    TooLow { minimum: u64 },
    #[rejection(message = "You already lead")]
    AlreadyLeading,
}

/// An accepted bid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bid {
    pub bidder: String,
    pub amount_cents: u64,
}

/// What the lot sold for, if anyone bid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sale {
    pub item: String,
    pub winner: Option<Bid>,
}

/// Where the lot is in its life.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum Phase {
    #[default]
    NotOpen,
    /// Bids are taken until `closes_at` (unix seconds).
    Open {
        closes_at: i64,
    },
    Closed,
    Settled(Sale),
}

/// One hourly digest of the bidding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Digest {
    pub minutes_open: i64,
    pub new_bids: u32,
    pub leading: Option<Bid>,
}

/// What a query shows of a lot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub item: String,
    pub phase: Phase,
    pub leading: Option<Bid>,
    pub bids: usize,
    pub incarnation: u64,
}

/// One lot. Version 2: amounts in cents, every accepted bid, the hourly digests.
#[actor(version = 2)]
#[derive(Debug, Default)]
pub struct Auction {
    item: String,
    reserve_cents: u64,
    phase: Phase,
    /// Accepted bids, the leading one last.
    bids: Vec<Bid>,
    opened_at: i64,
    bids_since_digest: u32,
    digests: Vec<Digest>,
}

/// The state as version 1 stored it: whole euros and only the leading bid.
#[derive(Deserialize)]
pub struct AuctionV1 {
    item: String,
    reserve: u64,
    leader: Option<String>,
    high_bid: u64,
    closes_at: i64,
    closed: bool,
}

fn cents(euros: u64) -> Result<u64, MigrationError> {
    euros
        .checked_mul(100)
        .ok_or_else(|| MigrationError::new(format!("{euros} euros overflow in cents")))
}

#[actor]
impl Auction {
    /// Version 1 to 2: euros become cents, the leading bid becomes the bid history.
    #[migrate(from = 1)]
    fn from_v1(old: AuctionV1) -> Result<Auction, MigrationError> {
        let bids = match old.leader {
            Some(bidder) => vec![Bid {
                bidder,
                amount_cents: cents(old.high_bid)?,
            }],
            None => Vec::new(),
        };
        let phase = if old.closed {
            Phase::Closed
        } else {
            Phase::Open {
                closes_at: old.closes_at,
            }
        };
        Ok(Auction {
            item: old.item,
            reserve_cents: cents(old.reserve)?,
            phase,
            bids,
            ..Auction::default()
        })
    }

    /// Opens the lot; returns which incarnation of this id it is.
    #[command]
    pub fn open(
        &mut self,
        turn: &mut Turn<Self>,
        item: String,
        reserve_cents: u64,
        minutes: i64,
    ) -> Result<u64, Rejection> {
        if self.phase != Phase::NotOpen {
            return Err(reject!(already_open, "Lot {} is taken", turn.actor_id()));
        }
        let closes_at = turn.now() + TimeDelta::minutes(minutes);
        *self = Auction {
            item,
            reserve_cents,
            phase: Phase::Open {
                closes_at: closes_at.timestamp(),
            },
            opened_at: turn.now().timestamp(),
            ..Auction::default()
        };
        turn.schedule(closes_at, "close").close();
        turn.schedule_every(TimeDelta::hours(1), "digest").digest();
        Ok(turn.incarnation())
    }

    /// Takes a bid; returns the next minimum.
    #[command]
    pub fn bid(
        &mut self,
        turn: &mut Turn<Self>,
        bidder: String,
        amount_cents: u64,
    ) -> Result<u64, BidError> {
        match self.phase {
            Phase::NotOpen => return Err(BidError::NotOpen),
            // The close reminder may not have run yet: the deadline decides.
            Phase::Open { closes_at } if turn.now().timestamp() < closes_at => {}
            _ => return Err(BidError::Closed),
        }
        if self.leading().is_some_and(|bid| bid.bidder == bidder) {
            return Err(BidError::AlreadyLeading);
        }
        let minimum = self.minimum();
        if amount_cents < minimum {
            return Err(BidError::TooLow { minimum });
        }
        self.bids.push(Bid {
            bidder,
            amount_cents,
        });
        self.bids_since_digest += 1;
        Ok(self.minimum())
    }

    /// Records the sale of a closed lot (again, the same sale).
    #[command]
    pub fn settle(&mut self) -> Result<Sale, Rejection> {
        match &self.phase {
            Phase::Closed => {
                let sale = Sale {
                    item: self.item.clone(),
                    winner: self.leading().cloned(),
                };
                self.phase = Phase::Settled(sale.clone());
                Ok(sale)
            }
            Phase::Settled(sale) => Ok(sale.clone()),
            Phase::Open { .. } => Err(reject!(still_open, "The lot is still open")),
            Phase::NotOpen => Err(reject!(not_open, "The lot was never opened")),
        }
    }

    /// Archives a settled lot: the actor is destroyed when this turn commits, and its id
    /// starts a new incarnation for the next lot.
    #[command]
    pub fn archive(&mut self, turn: &mut Turn<Self>) -> Result<Sale, Rejection> {
        let Phase::Settled(sale) = &self.phase else {
            return Err(reject!(not_settled, "Settle the lot before archiving it"));
        };
        turn.destroy();
        Ok(sale.clone())
    }

    /// Closes the bidding at the deadline and stops the hourly digest.
    #[reminder]
    fn close(&mut self, turn: &mut Turn<Self>) {
        if matches!(self.phase, Phase::Open { .. }) {
            self.phase = Phase::Closed;
        }
        turn.unschedule("digest").digest();
    }

    /// Every hour while the lot is open: how the bidding went since the last digest.
    /// `unschedule` stops the occurrences not yet fired; one fired at the moment of the close
    /// is already a message behind it, so the digest checks the phase.
    #[reminder]
    fn digest(&mut self, turn: &mut Turn<Self>) {
        if !matches!(self.phase, Phase::Open { .. }) {
            return;
        }
        let at = turn.scheduled_at().unwrap_or_else(|| turn.now());
        self.digests.push(Digest {
            minutes_open: (at.timestamp() - self.opened_at) / 60,
            new_bids: std::mem::take(&mut self.bids_since_digest),
            leading: self.leading().cloned(),
        });
    }

    #[query]
    pub fn summary(&self, turn: &Turn<Self>) -> Summary {
        Summary {
            item: self.item.clone(),
            phase: self.phase.clone(),
            leading: self.leading().cloned(),
            bids: self.bids.len(),
            incarnation: turn.incarnation(),
        }
    }

    /// The hourly digests so far.
    #[query]
    pub fn digests(&self) -> Vec<Digest> {
        self.digests.clone()
    }

    fn leading(&self) -> Option<&Bid> {
        self.bids.last()
    }

    fn minimum(&self) -> u64 {
        match self.leading() {
            Some(bid) => bid.amount_cents + INCREMENT_CENTS,
            None => self.reserve_cents,
        }
    }
}

/// Who may do what. The caller's context (`reference.context(..)`) says who calls:
/// `{"operator": name}` runs the house, `{"bidder": name}` bids as themselves and reads.
pub struct AuctionHouse;

enum Caller<'a> {
    Operator,
    Bidder(&'a str),
    Nobody,
}

fn caller<'a>(request: &Request<'a>) -> Caller<'a> {
    let context = request.context;
    let name = |role| context.and_then(|context| context.get(role)?.as_str());
    match (name("operator"), name("bidder")) {
        (Some(_), _) => Caller::Operator,
        (None, Some(bidder)) => Caller::Bidder(bidder),
        (None, None) => Caller::Nobody,
    }
}

impl Policy for AuctionHouse {
    fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
        match (caller(request), request.operation) {
            (Caller::Operator, _) => Ok(()),
            (Caller::Bidder(bidder), "bid") if request.arguments["bidder"] == bidder => Ok(()),
            (Caller::Bidder(_), "bid") => Err(Denied::new("bid in your own name")),
            _ => Err(Denied::new("only an operator runs a lot")),
        }
    }

    fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied> {
        match caller(request) {
            Caller::Nobody => Err(Denied::new("sign in first")),
            _ => Ok(()),
        }
    }

    fn authorize_destroy(&self, request: &Request<'_>) -> Result<(), Denied> {
        match caller(request) {
            Caller::Operator => Ok(()),
            _ => Err(Denied::new("only an operator withdraws a lot")),
        }
    }
}
