//! A reminder lookup on PostgreSQL, which stores no NUL byte in text: a key the server would
//! refuse is an error the handler can handle, and its turn still commits.

use solid_objects::prelude::*;

use crate::administration::Postgres;

#[actor]
#[derive(Debug, Default)]
struct Probe {
    probes: u32,
}

#[actor]
impl Probe {
    /// Looks a reminder up by a key the caller gave, treating a failed lookup as "not
    /// scheduled", and counts the probe.
    #[command]
    async fn probe(&mut self, turn: &mut Turn<Self>, key: String) -> Result<String, TurnError> {
        let looked_up = turn.reminder(key).expire().await;
        self.probes += 1;
        Ok(match looked_up {
            Ok(due) => format!("ok {due:?}"),
            Err(error) => format!("lookup error: {error}"),
        })
    }

    #[reminder]
    fn expire(&mut self) {}
}

/// A reminder lookup whose key holds a NUL byte is an error the handler handles, and its turn commits.
/// Ids and keys a database would refuse are a typed error at the door, never a database error
/// halfway through a turn: the key is checked before it reaches PostgreSQL, which would
/// otherwise abort the whole turn transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_lookup_with_a_nul_key_leaves_a_turn_that_handled_the_error_to_commit() {
    let Some((_db, runtime)) = Postgres::with_runtime(4).await else {
        return;
    };
    let probe = runtime.reference::<Probe>("p");

    let answer = probe.probe("hold\0x".to_owned()).await;
    let probes = probe.snapshot().await.unwrap().probes;
    runtime.close().await;
    assert!(
        answer.is_ok() && probes == 1,
        "a handler that handled its lookup's error must still commit: the call got \
         {answer:?}, probes committed: {probes}"
    );
}
