//! The soak over a three-node MariaDB Galera cluster that loses a node.
//!
//! The soak of [`chaos`](crate::chaos) (4 worker processes, one SIGKILLed every 2 s, and 8
//! drivers over 50 actors: sync calls and enqueues, sends, effects, reminders) runs with its
//! driver and its checks on node 0 and its workers spread over all three nodes (two on node
//! 2, one each on nodes 0 and 1). From half its chaos time, node 2's `mariadbd`, which two
//! workers use and the driver does not, is SIGKILLed; once the other two nodes have a
//! cluster of two, it is started again on its datadir and rejoins (by IST, or SST) until it
//! is synced in a cluster of three. Workers restarted while it is away start once it
//! answers. The soak's checks then hold: nothing lost, nothing applied twice, every actor's
//! order exact, every effect run, every reminder fired once. It prints how long the node was
//! away and how it rejoined.
//!
//! About 60 s of wall time: the cluster's start (an SST to each of two nodes, about 15 s),
//! 20 s of chaos at least with the node's absence inside it, then the drain.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chaos::{self, Disturbance, Topology};
use crate::support::galera::Galera;

/// The node the disturbance kills: two workers use it, the driver and the checks do not.
const KILLED_NODE: usize = 2;
/// How long the killed node stays down once the others have a cluster without it.
const AWAY_FOR: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soak_loses_nothing_over_three_galera_nodes_when_one_is_killed_and_rejoins() {
    let _turn = chaos::SOAKS.lock().await;
    let Some(cluster) = Galera::start_aside().await else {
        return;
    };
    let database = cluster.database().await;
    let topology = Topology {
        driver: cluster.url(0, &database),
        checks: cluster.url(0, &database),
        workers: [2, 0, 1, 2]
            .into_iter()
            .map(|node| cluster.url(node, &database))
            .collect(),
    };
    let cluster = Arc::new(Mutex::new(cluster));
    let dir = tempfile::tempdir().expect("a temp dir");
    let disturbance: Disturbance = Box::pin(kill_and_rejoin(Arc::clone(&cluster)));
    chaos::soak("galera", &topology, 4, dir.path(), Some(disturbance)).await;
}

/// SIGKILLs [`KILLED_NODE`]'s `mariadbd`, waits until the other two have a cluster without
/// it, keeps it down [`AWAY_FOR`], starts it again and waits until it is synced in a cluster
/// of three; returns the figures.
async fn kill_and_rejoin(cluster: Arc<Mutex<Galera>>) -> String {
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster.lock().expect("the cluster");
        let transfers_before = incremental_transfers(&cluster);
        let killed = Instant::now();
        cluster.kill_node(KILLED_NODE);
        let left = killed.elapsed();
        std::thread::sleep(AWAY_FOR);
        let restarted = killed.elapsed();
        cluster.restart_node(KILLED_NODE);
        let back = killed.elapsed();
        let transfer = if incremental_transfers(&cluster) > transfers_before {
            "IST"
        } else {
            "SST"
        };
        format!(
            "node {KILLED_NODE} killed (kill -9 of its mariadbd): out of the cluster after \
             {:.1} s, restarted after {:.1} s, synced again by {transfer} after {:.1} s away",
            left.as_secs_f64(),
            restarted.as_secs_f64(),
            back.as_secs_f64()
        )
    })
    .await
    .expect("the node is killed and rejoins")
}

/// How many incremental state transfers the killed node's log shows it received.
fn incremental_transfers(cluster: &Galera) -> usize {
    cluster
        .error_log(KILLED_NODE)
        .matches("IST received")
        .count()
}
