//! A leasehold node: an openraft member whose leader is the speaker, the
//! lock table it grants from, the HTTP API, and the peer routes.
//!
//! [`start`] runs one node on a bound listener; an application can embed a
//! node this way and talk to it like any other.

mod batch;
mod clock;
mod config;
mod embedded;
mod error;
mod forgets;
mod http;
mod node;
mod peers;
mod report;
mod service;
mod speaker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use leasehold_raft::{BasicNode, Faults};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use clock::Clock;
pub use config::{ConfigError, NodeConfig, RebuildMode};
pub use embedded::Embedded;
pub use error::ApiError;
pub use node::Node;
pub use service::{Watch, MAX_WATCH};

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration cannot run.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Raft could not start (data directory, config).
    #[error(transparent)]
    Raft(#[from] leasehold_raft::StartError),
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// The listener has no address.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
}

/// A node running in this process.
pub struct RunningNode {
    node: Arc<Node>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// The node.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the node: hands leadership on if it leads, stops Raft, the
    /// speaker tasks and the HTTP server.
    pub async fn shutdown(self) {
        let raft = self.node.raft.clone();
        if self.node.is_leader() {
            if let Some(next) = self.node.other_members().first() {
                let _ = raft.trigger().transfer_leader(next.0).await;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        let _ = raft.shutdown().await;
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }
}

/// Starts a node serving on `listener`. The cluster forms from
/// `config.peers` on first start (the lowest id initializes it); a restarted
/// node keeps its identity and membership from its data directory.
pub async fn start(config: NodeConfig, listener: TcpListener) -> Result<RunningNode, StartError> {
    config.validate()?;
    let addr = listener.local_addr()?;
    let first_start = matches!(
        leasehold_raft::LogStore::read_node_id(&config.data_dir),
        Ok(None)
    );
    let faults = Faults::default();
    let raft = leasehold_raft::build(
        config.id,
        &config.data_dir,
        &config.timings,
        &config.cluster_token,
        faults.clone(),
    )
    .await?;
    let peers = peers::Peers::new(&config.cluster_token, &config.peers, faults)?;
    let node = Node::new(config, raft.clone(), peers, first_start);
    let (stop, stopped) = watch::channel(false);
    let app = http::router(Arc::clone(&node));
    let mut server_stop = stopped.clone();
    let server = tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = server_stop.changed().await;
        });
        if let Err(e) = serve.await {
            tracing::error!(%e, "http server stopped");
        }
    });
    let leadership = tokio::spawn(speaker::watch_leadership(
        Arc::clone(&node),
        stopped.clone(),
    ));
    let expiry = tokio::spawn(speaker::run_expiry(Arc::clone(&node), stopped.clone()));
    let releases = tokio::spawn(Arc::clone(&node).pass_on_releases(stopped.clone()));
    let batches = tokio::spawn(Arc::clone(&node).send_batches(stopped));
    raft.run();
    let lowest = node.config.peers.keys().next().copied();
    if lowest == Some(node.id()) && !raft.is_initialized().await.unwrap_or(true) {
        let members: BTreeMap<u64, BasicNode> = node
            .config
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        if let Err(e) = raft.initialize(members).await {
            tracing::info!(%e, "cluster already initialized");
        }
    }
    Ok(RunningNode {
        node,
        addr,
        stop,
        tasks: vec![server, leadership, expiry, releases, batches],
    })
}
