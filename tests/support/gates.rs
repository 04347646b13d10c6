//! Named gates that a handler waits at while holding its turn, opened by the test: the
//! concurrency of the wedge cases is forced with these, never with sleeps.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use tokio::sync::Semaphore;

/// A point where a handler waits until the test opens it; `entered` counts arrivals.
pub struct Gate {
    entered: Semaphore,
    open: Semaphore,
}

impl Gate {
    /// A closed gate nobody reached.
    pub fn new() -> Self {
        Self {
            entered: Semaphore::new(0),
            open: Semaphore::new(0),
        }
    }

    /// In a handler: says it got here, then waits until the gate opens.
    pub async fn pass(&self) {
        self.entered.add_permits(1);
        // A closed semaphore is an open gate.
        let _ = self.open.acquire().await;
    }

    /// In the test: waits until `n` handlers reached the gate.
    pub async fn reached(&self, n: u32) {
        let reached = async {
            self.entered.acquire_many(n).await.unwrap().forget();
        };
        tokio::time::timeout(std::time::Duration::from_secs(15), reached)
            .await
            .unwrap_or_else(|_| {
                panic!("a handler reaching its gate did not finish within 15 s: wedged")
            });
    }

    /// In the test: lets every handler at the gate (and any later one) through.
    pub fn open(&self) {
        self.open.close();
    }
}

/// Gates by name, shared by handlers and tests (tests of this file run in parallel, so each
/// uses its own names).
static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

pub fn gate(name: &str) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        gates
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Gate::new())),
    )
}
