//! leasehold's Raft layer: every piece of openraft glue, so no other crate
//! needs to name openraft types beyond what this crate re-exports.
//!
//! Raft here elects the speaker and orders terms and membership; nothing
//! about locks is logged. The pieces:
//!
//! - [`types`]: the [`TypeConfig`] and aliases ([`Raft`], [`Vote`], ...).
//! - [`LogStore`]: the durable vote and log (redb), which also pins a data
//!   directory to one node id.
//! - [`StateMachine`]: in memory; last applied id and membership only.
//! - [`NetworkFactory`] / [`raft_router`]: the HTTP peer network, both sides;
//!   [`PeerHttp`]: the one peer HTTP client, which the node's own peer
//!   requests share; [`Transport`]: the round trip under it
//!   ([`Http1Transport`] in production).
//! - [`RaftTimings`] / [`raft_config`]: the openraft config leasehold runs with.
//! - [`leader_state`]: this node's leadership and lease, for the speaker's guard.
//! - [`entropy`]: every random draw (ids, openraft's election timeouts
//!   through [`EntropyRuntime`]), seedable per thread for a simulator.
//!
//! # Running a node
//!
//! ```text
//! let Built { raft, closed, identity, http } = leasehold_raft::build(id, &data_dir, &RaftTimings::default(), &token, Faults::default()).await?;
//! // Serve the peer routes (wrap /internal/ with the token check, then the identity guard) ...
//! let app = axum::Router::new()
//!     .merge(leasehold_raft::raft_router(raft.clone()))
//!     .layer(axum::middleware::from_fn_with_state(identity, leasehold_raft::identity::guard));
//! // ... start the speaker task, then let the node campaign:
//! raft.run();
//! if !raft.is_initialized().await? && id == lowest_peer_id {
//!     raft.initialize(peers /* BTreeMap<u64, BasicNode> */).await.ok();
//! }
//! ```

pub mod auth;
pub mod blocking;
/// The one binary codec, kept in `leasehold-api` so a client builds it
/// without openraft: every current path (`leasehold_raft::codec::...`)
/// still names it.
pub use leasehold_api::codec;
pub mod config;
pub mod entropy;
pub mod faults;
pub mod framed;
pub mod http1;
pub mod identity;
mod ids;
pub mod lease;
pub mod log_store;
mod meta_table;
pub mod network;
pub mod peer_http;
pub mod reach;
pub mod routes;
pub mod runtime;
pub mod server;
pub mod state_machine;
pub mod terms;
pub mod transport;
pub use leasehold_tasks as tasks;
pub mod types;
pub mod version;

use std::path::Path;
use std::sync::Arc;

pub use auth::token_matches;
pub use auth::TOKEN_HEADER;
pub use config::raft_config;
pub use config::RaftTimings;
pub use faults::{FaultPlan, Faults};
pub use framed::FramedTransport;
pub use http1::Http1Transport;
pub use identity::Identity;
pub use lease::LeaderState;
pub use lease::{acked_ago, leader_state};
pub use log_store::LogStore;
pub use log_store::StoreClosed;
pub use log_store::StoreError;
pub use network::NetworkFactory;
pub use peer_http::NetworkInitError;
pub use peer_http::PeerHttp;
pub use runtime::EntropyRuntime;
pub use server::raft_router;
pub use state_machine::StateMachine;
pub use terms::{Terms, TermsBook};
pub use transport::{PeerRequest, PeerResponse, StreamedResponse, Transport, TransportError};
pub use types::*;

/// Why [`build`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be opened, or belongs to another node.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The timings are not a valid openraft config.
    #[error("raft config: {0}")]
    Config(#[from] openraft::ConfigError),
    /// The network could not be set up.
    #[error(transparent)]
    Network(#[from] NetworkInitError),
    /// openraft failed to recover its state from the store.
    #[error("raft: {0}")]
    Fatal(#[from] errors::Fatal),
    /// The data directory's cluster agreed a protocol version above what
    /// this node offers.
    #[error("data dir: {0}")]
    Protocol(version::Mismatch),
}

/// A Raft node built by [`build`].
#[derive(Debug)]
pub struct Built {
    /// The Raft handle.
    pub raft: Raft,
    /// Says when the store is closed after [`Raft::shutdown`].
    pub closed: StoreClosed,
    /// The data directory's identity, for the peer server's [`identity::guard`].
    pub identity: Arc<Identity>,
    /// The peer HTTP client the Raft network sends through, for the node's
    /// own peer requests.
    pub http: PeerHttp,
}

/// Builds (but does not start) node `node_id` with its store in `data_dir`,
/// its peer requests over an [`Http1Transport`].
///
/// Nothing runs until [`Raft::run`] is called, so the HTTP server and the
/// speaker task can hold the handle before the node can campaign. Peer
/// addresses come from the membership (`BasicNode.addr`, `host:port`).
pub async fn build(
    node_id: NodeId,
    data_dir: &Path,
    timings: &RaftTimings,
    cluster_token: &str,
    faults: Faults,
) -> Result<Built, StartError> {
    let transport = Arc::new(Http1Transport::new());
    build_with_transport(
        node_id,
        data_dir,
        timings,
        cluster_token,
        faults,
        transport,
        version::SPEAKS,
    )
    .await
}

/// As [`build`], its peer requests (Raft's and, through [`Built::http`],
/// the node's own) carried by `transport`, offering protocol versions up
/// to `protocol` ([`version`]).
pub async fn build_with_transport(
    node_id: NodeId,
    data_dir: &Path,
    timings: &RaftTimings,
    cluster_token: &str,
    faults: Faults,
    transport: Arc<dyn Transport>,
    protocol: version::Protocol,
) -> Result<Built, StartError> {
    let config = timings.config()?;
    let dir = data_dir.to_path_buf();
    let fresh = identity::StoreId(entropy::random_u128());
    let store = blocking::unblock(move || LogStore::open_named(&dir, node_id, fresh))
        .await
        .map_err(|source| StoreError::Io {
            path: data_dir.to_path_buf(),
            source,
        })??;
    let closed = store.closed();
    let identity = Arc::new(store.identity());
    let cluster = identity.versions().cluster();
    if cluster > protocol {
        return Err(StartError::Protocol(version::Mismatch::ClusterAhead {
            cluster,
            speaks: protocol,
        }));
    }
    identity.versions().offer(protocol);
    let http = PeerHttp::with_transport(identity.clone(), cluster_token, faults, transport)?;
    let network = NetworkFactory::new(http.clone());
    let machine = StateMachine::telling(identity.clone());
    let raft = Raft::build(node_id, config, network, store, machine).await?;
    Ok(Built {
        raft,
        closed,
        identity,
        http,
    })
}
