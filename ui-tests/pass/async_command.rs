//! A command may be `async fn`; the turn waits for it.

use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Mailbox {
    delivered: u32,
}

#[actor]
impl Mailbox {
    #[command]
    pub async fn deliver(&mut self, turn: &mut Turn<Self>, count: u32) -> u32 {
        tokio::task::yield_now().await;
        let _ = turn.now();
        self.delivered += count;
        self.delivered
    }

    #[query]
    pub async fn delivered(&self) -> u32 {
        self.delivered
    }
}

fn main() {
    let _ = Mailbox::reference("m-1");
}
