//! A throwaway three-node MariaDB Galera cluster on loopback: the first node's datadir from
//! `mariadb-install-db`, bootstrapped with `--wsrep-new-cluster` (what `galera_new_cluster`
//! does); the other two join it with empty datadirs and take a state snapshot (SST) by
//! rsync. Each node is a `mariadbd` under a temp dir of its own, on free loopback ports
//! (client, group communication, incremental state transfer, rsync), run as the `mysql`
//! user when the test runs as root (the rsync daemon of an SST cannot write as root).
//!
//! Every node is killed when the cluster is dropped and, through a watchdog shell per node
//! (as tests/support/mariadb.rs does), when the test process ends without dropping it.
//! [`Galera::shared`] is one cluster for every test of a process; [`Galera::start`] is a
//! cluster of the test's own, whose nodes it may kill and bring back.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::mariadb::{binary, Mariadbd};
use super::servers::{database_name, free_port, skipped};

/// The Galera library Debian's `galera-4` installs.
pub const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// How many nodes a cluster has.
pub const NODES: usize = 3;

/// How long a node may take to start, join and be synced (an SST included).
const JOIN_WITHIN: Duration = Duration::from_secs(180);

/// One node: its `mariadbd`, and the ports it talks to the other nodes on.
struct Node {
    server: Mariadbd,
    /// Group communication (`base_port`), incremental state transfer, and the rsync
    /// daemon a joiner runs for a full state transfer.
    group_port: u16,
    ist_port: u16,
    sst_port: u16,
}

/// A running three-node cluster; every node is killed on drop.
pub struct Galera {
    nodes: Vec<Node>,
    /// Holds the nodes' directories; declared after the nodes, so dropped after them.
    dir: tempfile::TempDir,
}

impl Galera {
    /// Starts a cluster and waits until it has three synced nodes. Without MariaDB or the
    /// Galera library on the machine it returns `None` (the test then says it skipped),
    /// except under CI (`CI` set), where it panics.
    pub fn start() -> Option<Self> {
        if let Some(missing) = missing() {
            return skipped(missing);
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let nodes = (0..NODES)
            .map(|index| Node {
                server: Mariadbd::new(dir.path().join(format!("node{index}")), server_user()),
                group_port: free_port(),
                ist_port: free_port(),
                sst_port: free_port(),
            })
            .collect();
        let mut cluster = Self { nodes, dir };
        // The server user writes the nodes' temporary files from the bootstrap on.
        cluster.own_by_server_user();
        cluster.nodes[0].server.install();
        cluster.own_by_server_user();
        cluster.launch(0, true);
        cluster.wait_until_synced(&[0], 1);
        for index in 1..NODES {
            cluster.launch(index, false);
            let up: Vec<usize> = (0..=index).collect();
            cluster.wait_until_synced(&up, up.len());
        }
        Some(cluster)
    }

    /// [`Galera::start`] on a blocking thread (the start waits for the nodes), for an async
    /// test of its own cluster.
    pub async fn start_aside() -> Option<Self> {
        tokio::task::spawn_blocking(Self::start)
            .await
            .expect("the cluster starts")
    }

    /// One cluster for every test of this process.
    pub fn shared() -> Option<&'static Self> {
        static SHARED: OnceLock<Option<Galera>> = OnceLock::new();
        SHARED.get_or_init(Self::start).as_ref()
    }

    /// A new, empty database, created through the first node and present on every node once
    /// this returns; its name.
    pub async fn database(&self) -> String {
        let name = database_name("galera");
        self.nodes[0].server.create_database(&name).await;
        for node in 0..NODES {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match sqlx::MySqlPool::connect(&self.url(node, &name)).await {
                    Ok(pool) => {
                        pool.close().await;
                        break;
                    }
                    Err(error) => assert!(
                        Instant::now() < deadline,
                        "database {name} did not reach node {node} in 30 s: {error}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        name
    }

    /// The URL of `database` on node `node` (from 0).
    pub fn url(&self, node: usize, database: &str) -> String {
        self.nodes[node].server.url(database)
    }

    /// SIGKILLs node `node`'s `mariadbd`, and waits until the other nodes have a cluster of
    /// two without it.
    pub fn kill_node(&mut self, node: usize) {
        let killed = self.nodes[node].server.kill();
        assert!(killed, "kill -9 of node {node}'s mariadbd");
        let others: Vec<usize> = (0..NODES).filter(|other| *other != node).collect();
        self.wait_until_synced(&others, others.len());
    }

    /// Starts node `node` again on its datadir (it rejoins by IST, or SST if the others'
    /// cache no longer holds what it missed) and waits until all three nodes are synced.
    pub fn restart_node(&mut self, node: usize) {
        self.launch(node, false);
        let all: Vec<usize> = (0..NODES).collect();
        self.wait_until_synced(&all, NODES);
    }

    /// The node's error log, for a failing test's message.
    pub fn error_log(&self, node: usize) -> String {
        self.nodes[node].server.error_log()
    }

    /// Runs node `node`'s `mariadbd` with the cluster's options; the first node of a new
    /// cluster bootstraps it.
    fn launch(&mut self, node: usize, bootstrap: bool) {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.group_port))
            .collect();
        let this = &mut self.nodes[node];
        let mut options: Vec<String> = [
            "--wsrep-on=ON",
            "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2",
            "--default-storage-engine=InnoDB",
            "--wsrep-sst-method=rsync",
        ]
        .map(str::to_owned)
        .into();
        options.extend([
            format!("--wsrep-provider={PROVIDER}"),
            format!("--wsrep-node-name=node{node}"),
            format!("--wsrep-cluster-address=gcomm://{}", addresses.join(",")),
            format!("--wsrep-node-address=127.0.0.1:{}", this.group_port),
            format!("--wsrep-sst-receive-address=127.0.0.1:{}", this.sst_port),
            format!(
                "--wsrep-provider-options=base_port={};ist.recv_addr=127.0.0.1:{};\
                 gcache.size=64M",
                this.group_port, this.ist_port
            ),
        ]);
        if bootstrap {
            options.push("--wsrep-new-cluster".to_owned());
        }
        this.server.launch(&options);
    }

    /// Waits until each of `nodes` answers, is `Synced` and sees a cluster of `size`.
    fn wait_until_synced(&self, nodes: &[usize], size: usize) {
        let started = Instant::now();
        for &node in nodes {
            loop {
                let status = self.status(node);
                let synced = status
                    .iter()
                    .any(|(name, value)| name == "wsrep_local_state_comment" && value == "Synced");
                let sized = status.iter().any(|(name, value)| {
                    name == "wsrep_cluster_size" && value == &size.to_string()
                });
                if synced && sized {
                    break;
                }
                assert!(
                    started.elapsed() < JOIN_WITHIN,
                    "node {node} was not synced in a cluster of {size} within {JOIN_WITHIN:?} \
                     (status {status:?}): {}",
                    self.error_log(node)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Gives the cluster's directory to the user the servers run as, where that is `mysql`.
    fn own_by_server_user(&self) {
        if server_user() == "mysql" {
            let owned = Command::new("chown")
                .args(["-R", "mysql:mysql"])
                .arg(self.dir.path())
                .status()
                .expect("chown runs");
            assert!(owned.success(), "chown of the cluster's dir to mysql");
        }
    }

    /// Node `node`'s wsrep status (name, value), empty while it does not answer.
    fn status(&self, node: usize) -> Vec<(String, String)> {
        let Some(client) = binary("mariadb") else {
            panic!("the mariadb client beside mariadbd");
        };
        let output = Command::new(client)
            .args(["--no-defaults", "-h127.0.0.1", "-uroot", "-N", "-B"])
            .arg(format!("-P{}", self.nodes[node].server.port()))
            .arg("--connect-timeout=2")
            .args(["-e", "SHOW STATUS LIKE 'wsrep%'"])
            .stderr(Stdio::null())
            .output();
        let Ok(output) = output else {
            return Vec::new();
        };
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }
}

/// The user the nodes run as: `mysql` when the tests run as root (an SST's rsync daemon
/// started by root writes as `nobody`), else whoever runs them.
fn server_user() -> &'static str {
    static USER: OnceLock<String> = OnceLock::new();
    USER.get_or_init(|| {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|output| output.stdout.trim_ascii() == b"0");
        if root {
            "mysql".to_owned()
        } else {
            std::env::var("USER").unwrap_or_else(|_| "mysql".to_owned())
        }
    })
}

/// Why no cluster can start here (`None` when `mariadbd`, the Galera library and rsync are
/// on the machine).
pub fn missing() -> Option<&'static str> {
    super::mariadb::missing().or_else(|| {
        if !Path::new(PROVIDER).exists() {
            Some("Galera not found (/usr/lib/galera/libgalera_smm.so); install galera-4")
        } else if binary("rsync").is_none() {
            Some("rsync not found (a joining Galera node's state transfer); install rsync")
        } else {
            None
        }
    })
}
