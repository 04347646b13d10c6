//! The arguments of a send or a schedule may read the turn: the builders hold no borrow of
//! it (`turn.send::<Bidder>(previous).outbid(turn.actor_id().to_owned(), amount)`).

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Bidder {
    outbid_on: Vec<String>,
}

#[actor]
impl Bidder {
    #[command]
    pub fn outbid(&mut self, auction: String, amount: u64) {
        self.outbid_on.push(format!("{auction}:{amount}"));
    }
}

#[actor]
#[derive(Default)]
pub struct Auction {
    leader: Option<String>,
    amount: u64,
    closes_at: i64,
}

#[actor]
impl Auction {
    #[command]
    pub fn bid(&mut self, turn: &mut Turn<Self>, bidder: String, amount: u64) {
        if let Some(previous) = self.leader.replace(bidder) {
            turn.send::<Bidder>(previous).outbid(turn.actor_id().to_owned(), amount);
        }
        self.amount = amount;
        turn.schedule(turn.now() + TimeDelta::hours(1), "close")
            .close(turn.now().timestamp());
        turn.unschedule(turn.actor_id().to_owned()).remind();
    }

    #[reminder]
    fn close(&mut self, closes_at: i64) {
        self.closes_at = closes_at;
    }

    #[reminder]
    fn remind(&mut self) {}
}

fn main() {
    let _ = Auction::reference("a-1");
}
