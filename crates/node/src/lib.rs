//! A leasehold node: an openraft member whose leader is the speaker, the
//! lock table it grants from, the HTTP API, and the peer routes.
//!
//! [`start`] runs one node on a bound listener; an application can embed a
//! node this way and talk to it like any other.

mod batch;
mod clock;
mod config;
mod copier;
mod copies;
mod embedded;
mod error;
mod expiry;
mod forgets;
mod handover;
mod http;
mod identity;
mod lane;
mod membership;
mod metrics;
mod node;
mod peers;
mod queue;
mod release_set;
mod report;
mod roster;
mod service;
mod session_copies;
mod sessions;
mod speak;
mod speaker;
mod tasks;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_raft::{BasicNode, Faults, WatchReceiver};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use clock::Clock;
pub use config::{
    ConfigError, NodeConfig, PeerTransport, RebuildMode, ValidConfig, IDLE_TIMEOUT_RANGE,
};
pub use embedded::Embedded;
pub use error::ApiError;
pub use leasehold_acl::Acl;
pub use leasehold_api::Watch;
pub use leasehold_client as client;
pub use leasehold_protocol::Sabotage;
pub use leasehold_raft::version::Protocol;
pub use leasehold_raft::RaftTimings;
pub use leasehold_tls::Tls;
pub use locktable::LeaseRule;
pub use node::Node;
pub use release_set::ReleasedSet;
pub use roster::Roster;
pub use service::MAX_WATCH;

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration cannot run.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Raft could not start (data directory, config).
    #[error(transparent)]
    Raft(#[from] leasehold_raft::StartError),
    /// The listener has no address.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// The cluster does not know this data directory (see [`leasehold_raft::Identity`]).
    #[error("refused by the cluster: {0}")]
    Refused(String),
    /// The cluster speaks a protocol version above what this node offers
    /// (found as it started: a peer said so, or its log did).
    #[error("cannot speak the cluster's protocol: {0}")]
    Protocol(String),
}

impl StartError {
    /// Whether the node cannot speak its cluster's protocol version (its
    /// data directory's cluster agreed a higher one).
    pub fn is_protocol(&self) -> bool {
        matches!(
            self,
            StartError::Raft(leasehold_raft::StartError::Protocol(_)) | StartError::Protocol(_)
        )
    }
}

/// A [`ValidConfig`] given to [`start`] cannot fail its check.
impl From<std::convert::Infallible> for StartError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// A node running in this process.
pub struct RunningNode {
    node: Arc<Node>,
    addr: SocketAddr,
    store_closed: leasehold_raft::StoreClosed,
}

/// A node whose handle is dropped without [`RunningNode::shutdown`] stops
/// too: every task it started ends (without handing leadership on).
impl Drop for RunningNode {
    fn drop(&mut self) {
        self.node.stop.cancel();
    }
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

    /// Resolves if this node cannot go on, with why: its Raft core stopped
    /// (a fatal storage error, or a panic in it), or a member said that
    /// this node's data directory is not the one the cluster knew (see
    /// [`leasehold_raft::Identity`]). Such a node can never speak or follow again: `serve`
    /// exits non-zero, and an embedder should stop it too.
    pub async fn failed(&self) -> String {
        let raft_failed = async {
            let mut metrics = self.node.raft.metrics();
            loop {
                if let Err(fatal) = &metrics.borrow_watched().running_state {
                    return format!("the Raft core stopped: {fatal}");
                }
                if metrics.changed().await.is_err() {
                    return "the Raft core is gone".to_string();
                }
            }
        };
        tokio::select! {
            why = raft_failed => why,
            why = self.node.identity.refused() => {
                self.node.stop_speaking();
                why
            }
        }
    }

    /// Whether this node stopped ([`RunningNode::failed`]) because it
    /// cannot speak its cluster's protocol version.
    pub fn cannot_speak_cluster(&self) -> bool {
        self.node.identity.cannot_speak_cluster()
    }

    /// Reads the TLS certificate, key and CA files again (a renewal):
    /// new connections, to and from members and clients, use them. On an
    /// error the ones in use stay. `Ok(false)`: the node runs without TLS.
    pub fn reload_tls(&self) -> Result<bool, leasehold_tls::TlsError> {
        match &self.node.config.tls {
            Some(tls) => tls.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Resolves once this node is removed from the cluster (by a
    /// membership change): it then serves its clients no more, and should
    /// be shut down ([`RunningNode::shutdown`] hands leadership on if it
    /// still leads, and waits until the next speaker has read its locks).
    pub async fn removed(&self) {
        self.node.wait_removed().await
    }

    /// Stops the node: first releases the locks this process's own clients
    /// hold (taken through [`Node::client`]: elections it leads are resigned,
    /// so another candidate leads at once, whichever of a resign and this
    /// comes first), then stops granting (drops the table), hands leadership
    /// on if it leads and waits until another member leads (or says the
    /// hand-over was not confirmed), then stops Raft, the speaker tasks and
    /// the HTTP server. When it returns, the data directory is closed and
    /// may be opened again.
    pub async fn shutdown(self) {
        let released = self.node.release_local_locks().await;
        if released > 0 {
            tracing::info!(released, "shutdown: this process's own locks released");
        }
        let led = self.node.leading_term();
        self.node.stop_speaking();
        if let Some(term) = led {
            self.hand_over(term).await;
        }
        // Every member hands its records over, so its leaving costs none:
        // then its next start forgot nothing. A speaker does so once the
        // next one has read it: what it granted, its own clients' locks and
        // the copies it kept would otherwise be left with a record fewer.
        if self.node.hand_records_over().await {
            if let Err(e) = self.node.identity.left_cleanly().await {
                tracing::warn!(%e, "could not record that this node stopped cleanly");
            }
        }
        let raft = self.node.raft.clone();
        let _ = raft.shutdown().await;
        self.node.stop.cancel();
        self.node.tasks.close();
        let waited = tokio::time::timeout(Duration::from_secs(5), self.node.tasks.wait()).await;
        if waited.is_err() {
            tracing::warn!(
                left = self.node.tasks.len(),
                "shutdown: tasks still running after 5 s"
            );
        }
        if !self.store_closed.wait(Duration::from_secs(5)).await {
            tracing::warn!("shutdown: the Raft store is still open");
        }
    }

    /// Hands leadership of `term` to another member, then stays until the
    /// new speaker has read this node's report: its `Granted` holds every
    /// lock granted in `term`, and a rebuild that missed it would let the
    /// next speaker grant them again (proceed mode) or hold every new grant
    /// back (strict mode).
    async fn hand_over(&self, term: u64) {
        if self.node.transfer_target().is_none() {
            tracing::info!("shutdown: no other voter to hand leadership to");
            return;
        }
        let Some(to) = self.node.transfer_leadership().await else {
            tracing::warn!("shutdown: leadership could not be handed over");
            return;
        };
        let Some(leader) = self.node.wait_for_other_leader(HANDOVER_PATIENCE).await else {
            tracing::warn!(
                to,
                "shutdown: no other leader within {HANDOVER_PATIENCE:?}; \
                 the cluster elects one when this node's heartbeats stop"
            );
            return;
        };
        let patience = self.node.config.rebuild_timeout + HANDOVER_PATIENCE;
        if self.node.wait_read_above(term, patience).await {
            tracing::info!(
                to,
                leader,
                "shutdown: leadership handed over, and this node's locks read by the new speaker"
            );
        } else {
            tracing::warn!(
                to,
                leader,
                "shutdown: leadership handed over, but the new speaker did not read this node within {patience:?}"
            );
        }
    }
}

/// How long a stopping leader waits for the member it handed leadership to.
const HANDOVER_PATIENCE: Duration = Duration::from_secs(2);

/// Starts a node serving on `listener`. The cluster forms from
/// `config.peers` on first start (the lowest id initializes it); a restarted
/// node keeps its identity and membership from its data directory.
///
/// `config` is a [`NodeConfig`], checked here before anything is opened,
/// or a [`ValidConfig`], checked already.
pub async fn start<C>(config: C, listener: TcpListener) -> Result<RunningNode, StartError>
where
    C: TryInto<ValidConfig>,
    StartError: From<C::Error>,
{
    let config: ValidConfig = config.try_into()?;
    let seams = Seams::production_for(&config);
    // Answers go out as they are ready: on a binary connection two answers
    // in a row would otherwise wait, the second for the caller's delayed
    // acknowledgement of the first (docs/benchmarks.md, "Members over the
    // binary transport").
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%e, "TCP_NODELAY could not be set on an accepted connection");
        }
    });
    start_with::<ValidConfig, _>(config, listener, seams).await
}

/// What a simulator swaps to run the node's own code: everything else is
/// the same in production and under simulation.
#[derive(Debug, Clone)]
pub struct Seams {
    /// The lease clock's source (a node counts its uptime from its own
    /// start, whenever the clock was made).
    pub clock: Clock,
    /// What carries the node's peer requests (Raft's and its own).
    pub transport: Arc<dyn leasehold_raft::Transport>,
    /// Safety mechanisms switched off, for a simulation's self-test: its
    /// checks must see what each one prevents. [`Sabotage::NONE`] in
    /// production.
    pub sabotage: Sabotage,
}

impl Seams {
    /// The machine's: `CLOCK_BOOTTIME`, and the members over TCP (the
    /// binary transport where it can, HTTP otherwise).
    pub fn production() -> Self {
        Seams {
            clock: Clock::new(),
            transport: Arc::new(leasehold_raft::FramedTransport::new()),
            sabotage: Sabotage::NONE,
        }
    }

    /// The machine's, for a node run with `config`: to the members over TLS
    /// if it has TLS, over the transport it names.
    pub fn production_for(config: &NodeConfig) -> Self {
        use leasehold_raft::{FramedTransport, Http1Transport};
        let tls = config.tls.as_ref().map(Arc::clone);
        let transport: Arc<dyn leasehold_raft::Transport> = match (config.peer_transport, tls) {
            (PeerTransport::Frames, Some(tls)) => Arc::new(FramedTransport::with_tls(tls)),
            (PeerTransport::Frames, None) => Arc::new(FramedTransport::new()),
            (PeerTransport::Http, Some(tls)) => Arc::new(Http1Transport::with_tls(tls)),
            (PeerTransport::Http, None) => Arc::new(Http1Transport::new()),
        };
        Seams {
            transport,
            ..Seams::production()
        }
    }
}

/// [`start`], on any `axum::serve::Listener`, with `seams` (a simulated
/// network's listener, transport and clock, in the whole-node simulation).
pub async fn start_with<C, L>(
    config: C,
    listener: L,
    seams: Seams,
) -> Result<RunningNode, StartError>
where
    C: TryInto<ValidConfig>,
    StartError: From<C::Error>,
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let config = config.try_into()?.into_inner();
    let span = tracing::info_span!("node", id = config.id);
    start_valid(config, listener, seams).instrument(span).await
}

/// [`start_with`] once the configuration is valid, inside the node's span:
/// every task it spawns carries the span, so each log line names its node.
async fn start_valid<L>(
    config: NodeConfig,
    listener: L,
    seams: Seams,
) -> Result<RunningNode, StartError>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let addr = listener.local_addr()?;
    let first_start = matches!(
        leasehold_raft::LogStore::read_node_id(&config.data_dir),
        Ok(None)
    );
    let leasehold_raft::Built {
        raft,
        closed: store_closed,
        identity,
        http,
    } = leasehold_raft::build_with_transport(
        config.id,
        &config.data_dir,
        &config.timings,
        config.sent_peer_token(),
        Faults::default(),
        seams.transport,
        config.protocol,
    )
    .await?;
    // A node whose last process handed every record over as it stopped
    // forgot nothing that counts, as a first start did not.
    let left_cleanly = match identity.take_left_cleanly().await {
        Ok(clean) => clean,
        Err(e) => {
            tracing::warn!(%e, "could not read whether this node stopped cleanly");
            false
        }
    };
    // A directory no configuration ever named replacing its id's lost one
    // (a first start, or a restart before its join was answered): refusals
    // of it are expected until the cluster removed the old one.
    let rejoin = config.rejoin && identity.was_named() == Some(false);
    identity.set_rejoining(rejoin);
    let node = Node::new(
        config,
        raft.clone(),
        http,
        identity,
        first_start || left_cleanly,
        seams.clock.restarted(),
        seams.sabotage,
    );
    let answered = match identity::check_at_start(&node).await {
        Ok(answered) => answered,
        Err(why) => {
            let _ = raft.shutdown().await;
            if node.identity.cannot_speak_cluster() {
                return Err(StartError::Protocol(why));
            }
            return Err(StartError::Refused(why));
        }
    };
    let app = http::router(Arc::clone(&node));
    let (tasks, stop) = (&node.tasks, &node.stop);
    let (tls, idle) = (node.config.tls.clone(), node.config.idle_timeout);
    let serving = http::serve(
        listener,
        app,
        Arc::clone(&node),
        tls,
        idle,
        tasks.clone(),
        stop.clone(),
    );
    tasks.spawn(serving.in_current_span());
    tasks.spawn(speaker::watch_leadership(Arc::clone(&node), stop.clone()).in_current_span());
    tasks.spawn(expiry::run_expiry(Arc::clone(&node), stop.clone()).in_current_span());
    node.forgets.set_members(node.roster().members());
    tasks.spawn(
        Arc::clone(&node)
            .pass_on_releases(stop.clone())
            .in_current_span(),
    );
    tasks.spawn(
        Arc::clone(&node)
            .follow_roster(stop.clone())
            .in_current_span(),
    );
    tasks.spawn(membership::pin_members(Arc::clone(&node), stop.clone()).in_current_span());
    tasks.spawn(
        Arc::clone(&node)
            .send_batches(stop.clone())
            .in_current_span(),
    );
    if !answered {
        tasks.spawn(
            identity::probe_until_answered(Arc::clone(&node), stop.clone()).in_current_span(),
        );
    }
    tasks.spawn(run_raft(Arc::clone(&node), stop.clone(), rejoin).in_current_span());
    Ok(RunningNode {
        node,
        addr,
        store_closed,
    })
}

/// Lets Raft run once the longest leader lease this node may have backed
/// before it (re)started has passed, then forms the cluster if this node
/// is the lowest id and nothing is initialized yet.
///
/// A leader's guard counts on every member that acknowledged its heartbeat
/// refusing to vote for `election_timeout_max` after that heartbeat.
/// openraft reloads a vote with a zero lease on restart, so a restarted
/// member would grant (pre-)votes at once; not running Raft at all until
/// that long after the process started (it cannot have acknowledged
/// anything since) keeps the premise. Raft messages that arrive meanwhile
/// wait in openraft's queue. A first start waits too: a wiped data
/// directory looks the same. A node restarted with a shorter lease than
/// it last ran with (its data directory records it) waits the longer one.
async fn run_raft(node: Arc<Node>, stop: CancellationToken, rejoin: bool) {
    let ours = node.config.timings.leader_lease();
    let before = node.identity.ran_with_leader_lease();
    let wait = if node.sabotage().no_restart_wait {
        Duration::ZERO
    } else {
        before.map_or(ours, |before| before.max(ours))
    };
    if before.is_some_and(|before| before != ours) {
        tracing::warn!(
            before_ms = before.map_or(0, |b| b.as_millis() as u64),
            now_ms = ours.as_millis() as u64,
            "this node ran with another --election-timeout-max before: it waits the longer \
             one out; give every member the same timings once the change is done"
        );
    }
    tracing::info!(
        ?wait,
        store = %node.identity.store(),
        new = node.identity.was_named() == Some(false),
        "waiting out any leader lease this node may have backed before Raft runs"
    );
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.cancelled() => return,
    }
    // From here on this node honours its own lease, and a later start
    // must wait it out.
    if let Err(e) = node.identity.runs_with_leader_lease(ours).await {
        tracing::error!(%e, "could not record this node's leader lease in its data directory");
    }
    if rejoin && !membership::retire_old_self(&node, &stop).await {
        return;
    }
    let raft = node.raft.clone();
    raft.run();
    if node.is_joiner() {
        membership::join(node, stop).await;
        return;
    }
    let lowest = node.config.peers.keys().next().copied();
    if lowest != Some(node.id()) {
        return;
    }
    let Some(cluster) = identity::await_bootstrap(&node, stop).await else {
        return;
    };
    let members: BTreeMap<u64, BasicNode> = node
        .config
        .peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => tracing::info!(%cluster, "cluster bootstrapped"),
        Err(e) => tracing::info!(%e, "cluster already initialized"),
    }
}

/// The Rust examples of `docs/client.md`, compiled (and the ones not marked
/// `no_run` run) by `cargo test --doc -p leasehold-node`: this crate sees
/// every type they use, the client's included.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/client.md")]
pub struct ClientDocs;
