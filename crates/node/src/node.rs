//! The node: the member protocol's state behind one lock, Raft, and the
//! signals the driver's tasks wait on.

mod departed;
mod leadership;
mod members;
mod reports;
mod table;
mod telemetry;
mod terms;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_api::{ForwardAnswer, ForwardCall};
use leasehold_protocol::{Member, MemberConfig, Sabotage};
use leasehold_raft::{Identity, PeerHttp, Raft, WatchReceiver};
use locktable::{NodeId, WaiterId};
use tokio::sync::{oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SuspendWatch};
use crate::config::NodeConfig;
use crate::copier::Copier;
use crate::error::ApiError;
use crate::forgets::Releases;
use crate::peers::Peers;
use crate::queue::Queue;
use crate::roster::Roster;
use crate::tasks::Tasks;

/// The copies a grant needs in the cluster `roster` shows
/// ([`leasehold_protocol::copies_in`]).
fn copies_of(config: &NodeConfig, roster: &Roster) -> usize {
    let copy_to = roster.copy_to().len();
    leasehold_protocol::copies_in(config.copies, copy_to, roster.committed_voter_count())
}

/// A forwarded call waiting for a batch, and where its answer goes.
pub(crate) type Pending = (
    ForwardCall,
    oneshot::Sender<Result<ForwardAnswer, ApiError>>,
);

/// What a node keeps behind its one lock: the protocol's state, and where
/// the answers to waiting requests go.
pub(crate) struct State {
    pub(crate) member: Member,
    pub(crate) waiters: HashMap<WaiterId, oneshot::Sender<locktable::Answer>>,
}

/// A running node's shared parts.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) raft: Raft,
    pub(crate) clock: Clock,
    /// Notices suspends, which Raft's acknowledgement times cannot show
    /// (none on a clock that counts no suspends).
    suspends: Option<SuspendWatch>,
    pub(crate) peers: Arc<Peers>,
    /// The members now, as Raft's latest membership says.
    roster: watch::Sender<Arc<Roster>>,
    /// Whether a roster from Raft ever named this node.
    was_member: std::sync::atomic::AtomicBool,
    /// Whether this node joins rather than forms the cluster
    /// ([`Node::is_joiner`]).
    joining: std::sync::atomic::AtomicBool,
    /// Whether a roster from Raft was seen at all.
    saw_roster: std::sync::atomic::AtomicBool,
    /// Held across a membership change on the speaker and across the
    /// agreement of a protocol version, so that no member is added between
    /// the check that every member offers a version and its entry.
    pub(crate) membership_writes: tokio::sync::Mutex<()>,
    /// Whether this node was removed from the cluster.
    pub(crate) removed: watch::Sender<bool>,
    /// Whether this node, the speaker, appended its own removal (it
    /// stopped granting; it is removed once that commits).
    pub(crate) removing_self: std::sync::atomic::AtomicBool,
    /// This node's data directory's identity and what it knows of the others'.
    pub(crate) identity: Arc<Identity>,
    /// Whether this process forgot nothing a rebuild counts on: the node's
    /// first (a new data directory), or one whose last process handed
    /// every record over as it stopped.
    pub(crate) first_start: bool,
    /// Locks this process's own clients took through the in-process client
    /// ([`crate::Embedded`]), by id, with their names: they end with the
    /// process, and a shutdown releases them first.
    pub(crate) local_locks: Mutex<BTreeMap<String, String>>,
    state: Mutex<State>,
    /// Rung when the table changes, so the expiry task re-arms its timer.
    pub(crate) table_changed: Notify,
    /// Counts changes of the table's locks, for gets that watch a lock.
    changes: watch::Sender<u64>,
    /// When the expiry task next wakes (table clock, ns); 0 while it works.
    pub(crate) expiry_armed: AtomicU64,
    /// The highest term whose speaker has read this node's report (the
    /// member's, mirrored for those who wait on it).
    read_by: watch::Sender<u64>,
    /// The node's Prometheus series.
    pub(crate) metrics: crate::metrics::Metrics,
    /// The last rebuilds of this node's, with when each ended.
    history: Mutex<std::collections::VecDeque<leasehold_api::HistoryEntry>>,
    /// Releases to pass on to the members that may keep a record of them.
    pub(crate) forgets: Releases,
    /// Calls to forward to the speaker in the next batch.
    pub(crate) batches: Queue<Pending>,
    /// Copies on their way to the other members.
    pub(crate) copier: Copier,
    /// Every task the node started, so that a shutdown waits for them.
    pub(crate) tasks: Tasks,
    /// Members whose timings were logged as leaving the guard no room.
    warned_timings: Mutex<std::collections::BTreeSet<NodeId>>,
    /// Cancelled when the node stops: every task it started ends on it.
    pub(crate) stop: CancellationToken,
}

impl Node {
    /// A node of `config` around Raft, its protocol member and its tasks,
    /// speaking for no term yet.
    pub(crate) fn new(
        config: NodeConfig,
        raft: Raft,
        http: PeerHttp,
        identity: Arc<Identity>,
        first_start: bool,
        clock: Clock,
        sabotage: Sabotage,
    ) -> Arc<Self> {
        let roster = Roster::current(&raft.metrics().borrow_watched(), &config.peers);
        let roster = watch::Sender::new(Arc::new(roster));
        let peers = Peers::new(roster.subscribe(), http);
        let member = Member::new(MemberConfig {
            id: config.id,
            members: roster.borrow().ids().collect(),
            copy_to: roster.borrow().copy_to(),
            copies: copies_of(&config, &roster.borrow()),
            lease: config.lease,
            rebuild_mode: config.rebuild_mode,
            leader_lease: config.timings.leader_lease(),
            rebuild_timeout: config.rebuild_timeout,
            sabotage,
        });
        let node = Arc::new(Node {
            state: Mutex::new(State {
                member,
                waiters: HashMap::new(),
            }),
            forgets: Releases::new(config.id),
            copier: Copier::default(),
            roster,
            local_locks: Mutex::new(BTreeMap::new()),
            was_member: std::sync::atomic::AtomicBool::new(false),
            joining: std::sync::atomic::AtomicBool::new(!config.join.is_empty()),
            saw_roster: std::sync::atomic::AtomicBool::new(false),
            membership_writes: tokio::sync::Mutex::new(()),
            removed: watch::Sender::new(false),
            removing_self: std::sync::atomic::AtomicBool::new(false),
            metrics: crate::metrics::Metrics::new(config.metrics_prefix_depth),
            config,
            raft,
            clock,
            suspends: clock.counts_suspends().then(SuspendWatch::new),
            peers: Arc::new(peers),
            identity,
            first_start,
            table_changed: Notify::new(),
            changes: watch::Sender::new(0),
            expiry_armed: AtomicU64::new(0),
            read_by: watch::Sender::new(0),
            history: Mutex::default(),
            batches: Queue::new(),
            tasks: Tasks::default(),
            warned_timings: Mutex::default(),
            stop: CancellationToken::new(),
        });
        let own = node.state().member.own_terms(node.clock.now());
        node.identity.terms().set(leasehold_raft::Terms {
            copies: own.copies,
            max_lease: own.max_lease,
            leader_lease: own.leader_lease.unwrap_or_default(),
        });
        let heard = Arc::downgrade(&node);
        node.identity
            .terms()
            .on_heard(Box::new(move |from, terms, answer| {
                if let Some(node) = heard.upgrade() {
                    node.heard_terms(from, terms, answer);
                }
            }));
        node
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The protocol's state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; carry on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this node's cluster speaks data revisions (protocol
    /// [`leasehold_raft::version::DATA_REVS`], as applied here): reports
    /// carry them, and a lock's data may change after its grant.
    pub(crate) fn data_revs(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::DATA_REVS
    }

    /// Whether this node's cluster speaks lock kinds (protocol
    /// [`leasehold_raft::version::LOCK_KINDS`], as applied here): a name
    /// may be held shared or as permits.
    pub(crate) fn lock_kinds(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::LOCK_KINDS
    }

    /// Whether this node's cluster speaks sets (protocol
    /// [`leasehold_raft::version::LOCK_SETS`], as applied here): names may
    /// be asked for all at once.
    pub(crate) fn lock_sets(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::LOCK_SETS
    }

    /// Whether this node's cluster speaks lock-delays (protocol
    /// [`leasehold_raft::version::LOCK_DELAYS`], as applied here).
    pub(crate) fn lock_delays(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::LOCK_DELAYS
    }

    /// Whether this node's cluster speaks sessions (protocol
    /// [`leasehold_raft::version::SESSIONS`], as applied here).
    pub(crate) fn sessions(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::SESSIONS
    }

    /// Whether this node's cluster speaks lock-delays on locks of sessions
    /// (protocol [`leasehold_raft::version::SESSION_DELAYS`], as applied
    /// here).
    pub(crate) fn session_delays(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::SESSION_DELAYS
    }

    /// Whether this node's cluster speaks a set's release in one call
    /// (protocol [`leasehold_raft::version::SET_RELEASES`], as applied
    /// here): a follower forwards the set whole.
    pub(crate) fn set_releases(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::SET_RELEASES
    }

    /// The layout reports are read in: the one this node's cluster speaks.
    pub(crate) fn report_layout(&self) -> crate::report::Layout {
        crate::report::Layout::of_cluster(self.identity.versions().cluster())
    }
}
