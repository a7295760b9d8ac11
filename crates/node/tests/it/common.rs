//! Members embedded in this process, on loopback ports the kernel picks.

use std::collections::BTreeMap;
use std::path::Path;

use leasehold_node::{NodeConfig, RunningNode};
use tokio::net::TcpListener;

/// `n` listeners on loopback ports the kernel picks, and the members'
/// addresses by id (1 to `n`, in the listeners' order).
pub async fn listeners(n: u64) -> (Vec<TcpListener>, BTreeMap<u64, String>) {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers = listeners
        .iter()
        .zip(1..)
        .map(|(l, id)| (id, l.local_addr().unwrap().to_string()))
        .collect();
    (listeners, peers)
}

/// `n` members of the cluster `name`, started in this process with their
/// data directories under `dir`.
pub async fn start_nodes(n: u64, dir: &Path, name: &str) -> Vec<RunningNode> {
    let (listeners, peers) = listeners(n).await;
    let mut nodes = Vec::new();
    for (listener, id) in listeners.into_iter().zip(1..) {
        let config = NodeConfig::new(id, peers.clone(), dir.join(format!("node-{id}")), name);
        nodes.push(leasehold_node::start(config, listener).await.unwrap());
    }
    nodes
}

/// A one-node cluster on loopback with cluster token `token`, configured
/// by `configure`: the node, its address, and the directory it keeps.
pub async fn start_one(
    token: &str,
    configure: impl FnOnce(NodeConfig) -> NodeConfig,
) -> (RunningNode, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let peers = BTreeMap::from([(1, addr.clone())]);
    let config = configure(NodeConfig::new(1, peers, dir.path().join("node-1"), token));
    let running = leasehold_node::start(config, listener).await.unwrap();
    (running, addr, dir)
}
