//! The journal the call and delivery cases run on: it records entries, and fails, rejects or
//! panics in each of the ways a handler can when a case tells it to.

use solid_objects::prelude::*;

/// An actor that records entries in order and can be told to fail.
#[actor]
#[derive(Default)]
pub struct Journal {
    /// The entries recorded, in order.
    pub entries: Vec<String>,
    /// How often the `ping` reminder rang.
    pub pings: u32,
    /// Whether [`Journal::fragile`] fails.
    pub broken: bool,
}

#[actor]
impl Journal {
    /// Records `entry`; answers how many entries there are.
    #[command]
    pub fn record(&mut self, entry: String) -> usize {
        self.entries.push(entry);
        self.entries.len()
    }

    /// Records `entry` and schedules a ping, then panics: none of it is kept.
    #[command]
    pub fn record_then_panic(&mut self, turn: &mut Turn<Self>, entry: String) -> usize {
        self.entries.push(entry);
        turn.schedule(turn.now(), "never").ping();
        panic!("the handler broke");
    }

    /// Records `entry` and schedules a ping, then rejects: none of it is kept.
    #[command]
    pub fn record_then_reject(
        &mut self,
        turn: &mut Turn<Self>,
        entry: String,
    ) -> Result<usize, Rejection> {
        self.entries.push(entry);
        turn.schedule(turn.now(), "never").ping();
        Err(reject!(refused, "refused"))
    }

    /// Schedules a ping `minutes` from now.
    #[command]
    pub fn ping_in(&mut self, turn: &mut Turn<Self>, minutes: i64) {
        let at = turn.now() + TimeDelta::minutes(minutes);
        turn.schedule(at, "ping").ping();
    }

    /// Cancels the ping.
    #[command]
    pub fn cancel_ping(&mut self, turn: &mut Turn<Self>) {
        turn.unschedule("ping").ping();
    }

    #[reminder]
    fn ping(&mut self) -> u32 {
        self.pings += 1;
        self.pings
    }

    /// Refuses every call before the journal has an entry.
    #[command]
    pub fn amend(&mut self, entry: String) -> Result<usize, Rejection> {
        if self.entries.is_empty() {
            return Err(reject!(
                nothing_to_amend,
                "There is no entry to amend with {entry}"
            ));
        }
        Ok(self.record(entry))
    }

    /// Fails on its first `failures` attempts, then records `entry`.
    #[command]
    pub fn flaky(
        &mut self,
        turn: &mut Turn<Self>,
        entry: String,
        failures: u32,
    ) -> Result<usize, Failure> {
        if turn.attempt() <= failures {
            return Err(Failure::retryable(format!(
                "attempt {} failed",
                turn.attempt()
            )));
        }
        Ok(self.record(entry))
    }

    /// Fails while the journal is broken, then records `entry`.
    #[command]
    pub fn fragile(&mut self, entry: String) -> Result<usize, Failure> {
        if self.broken {
            return Err(Failure::retryable("the log is broken"));
        }
        Ok(self.record(entry))
    }

    /// Breaks the journal, or mends it.
    #[command]
    pub fn set_broken(&mut self, broken: bool) {
        self.broken = broken;
    }

    /// Fails for good.
    #[command]
    pub fn invalid(&mut self) -> Result<(), Failure> {
        Err(Failure::permanent("this can never work"))
    }

    /// Rejects with a code made at run time, which `Rejection::new` checks.
    #[command]
    pub fn reject_with(&mut self, code: String) -> Result<(), TurnError> {
        Err(Rejection::new(code, "Refused")?.into())
    }

    /// Writes `entry` to the application's `notes` table in the turn, then rejects.
    #[command]
    pub async fn note_then_reject(
        &mut self,
        turn: &mut Turn<Self>,
        entry: String,
    ) -> Result<(), TurnError> {
        super::execute_in_turn(turn, "INSERT INTO notes (label) VALUES (?)", &[&entry]).await?;
        self.entries.push(entry);
        Err(reject!(changed_my_mind, "The note is withdrawn").into())
    }

    /// Writes `entry` to `notes` in a transaction of the handler's own, begun on the turn's
    /// connection and committed, then rejects if `reject`.
    #[command]
    pub async fn note_in_own_transaction(
        &mut self,
        turn: &mut Turn<Self>,
        entry: String,
        reject: bool,
    ) -> Result<(), TurnError> {
        use sqlx::Connection;
        const INSERT: &str = "INSERT INTO notes (label) VALUES (?)";
        if turn.sqlite().await.is_ok() {
            let mut own = turn.sqlite().await?.begin().await?;
            sqlx::query(INSERT).bind(&entry).execute(&mut *own).await?;
            own.commit().await?;
        } else if turn.postgres().await.is_ok() {
            let mut own = turn.postgres().await?.begin().await?;
            let numbered = super::numbered_placeholders(INSERT);
            sqlx::query(&numbered)
                .bind(&entry)
                .execute(&mut *own)
                .await?;
            own.commit().await?;
        } else {
            let mut own = turn.mysql().await?.begin().await?;
            sqlx::query(INSERT).bind(&entry).execute(&mut *own).await?;
            own.commit().await?;
        }
        self.entries.push(entry);
        if reject {
            return Err(reject!(changed_my_mind, "The note is withdrawn").into());
        }
        Ok(())
    }

    /// The entries recorded, in order.
    #[query]
    pub fn entries(&self) -> Vec<String> {
        self.entries.clone()
    }

    /// Panics while reading.
    #[query]
    pub fn entry_count_then_panic(&self) -> usize {
        panic!("the query broke after {} entries", self.entries.len())
    }
}
