use solid_objects::prelude::*;

#[path = "../support/ledger_at_version_3.rs"]
mod ledger_at_version_3;

use ledger_at_version_3::Ledger;

#[actor]
impl Ledger {
    #[migrate(from = 1)]
    fn reads_self(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    #[migrate(from = 2)]
    async fn is_async(old: serde_json::Value) {
        let _ = old;
    }

    #[migrate(since = 0)]
    fn unknown_option(old: serde_json::Value) -> serde_json::Value {
        old
    }

    #[migrate(from = 2)]
    #[command]
    fn both(&mut self) {}
}

fn main() {}
