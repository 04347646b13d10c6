//! A query may name a value of its own `turn` (a board game's player turns, say) and call
//! its methods, whatever they are called: only calls on the query's `&Turn<Self>` are a
//! command's alone.

use solid_objects::prelude::*;

/// A player's turn in the game, not the runtime's.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PlayerTurn {
    player: String,
    minutes: u32,
}

impl PlayerTurn {
    /// When the turn is planned, as the game's agenda shows it.
    pub fn schedule(&self) -> String {
        format!("{} for {} minutes", self.player, self.minutes)
    }
}

#[actor]
#[derive(Default)]
pub struct Game {
    turns: Vec<PlayerTurn>,
}

#[actor]
impl Game {
    #[command]
    pub fn plan(&mut self, player: String, minutes: u32) {
        self.turns.push(PlayerTurn { player, minutes });
    }

    #[query]
    pub fn agenda(&self, turn: &Turn<Self>) -> Vec<String> {
        let now = turn.now().timestamp();
        self.turns
            .iter()
            .map(|turn| turn.schedule() + &format!(" (as of {now})"))
            .collect()
    }
}

fn main() {
    let _ = Game::reference("g-1");
}
