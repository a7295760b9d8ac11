//! The openraft type configuration and the aliases every other crate uses.

use std::fmt;

use serde::Deserialize;
use serde::Serialize;

use crate::state_machine::StateMachine;

/// The application data carried by normal Raft log entries.
///
/// Grants are not logged: leasehold uses Raft for election, terms and
/// membership only, so the one command there is does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// An entry with no effect (e.g. to force a commit in the current term).
    Noop,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Noop => f.write_str("noop"),
        }
    }
}

/// The state machine's answer to an applied [`Command`]: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResponse;

openraft::declare_raft_types!(
    /// leasehold's openraft type configuration.
    ///
    /// The `std` leader id makes a term name exactly one leader, so the term
    /// can serve as the speaker's generation and the high bits of a fence.
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

/// A node id.
pub type NodeId = u64;
/// A node's address record, `addr` being `host:port`.
pub type Node = openraft::BasicNode;
/// A running (or built) Raft member.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
/// What [`Raft::as_leader`] returns while this node is the leader.
pub type Leader = openraft::raft::Leader<TypeConfig, StateMachine>;
/// A leader id: the term and the node elected in it.
pub type LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>;
/// The committed form of a [`LeaderId`] as carried in log ids (just the term).
pub type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>;
/// A vote: a leader id plus whether a quorum granted it.
pub type Vote = openraft::impls::Vote<LeaderId>;
/// A log id: committed leader id plus index.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A Raft log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// A membership config together with the log id that introduced it.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot (its data is always empty: the state machine holds nothing).
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, Vec<u8>>;
/// The full metrics of a Raft node.
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
/// The role/vote/membership metrics, which change only when those do.
pub type RaftServerMetrics = openraft::metrics::RaftServerMetrics<TypeConfig>;
/// What `Raft::metrics()` returns (read it with [`WatchReceiver`]).
pub type MetricsReceiver = openraft::type_config::alias::WatchReceiverOf<TypeConfig, RaftMetrics>;
/// What `Raft::server_metrics()` returns (read it with [`WatchReceiver`]).
pub type ServerMetricsReceiver =
    openraft::type_config::alias::WatchReceiverOf<TypeConfig, RaftServerMetrics>;
/// The trait giving `changed().await` / `borrow_watched()` on metrics receivers.
pub use openraft::async_runtime::WatchReceiver;
/// The monotonic instant type openraft uses (a wrapper of `tokio::time::Instant`).
pub type Instant = openraft::type_config::alias::InstantOf<TypeConfig>;
/// Handle keeping an `on_leader_change` / `on_cluster_leader_change` watcher alive.
pub type WatchChangeHandle = openraft::WatchChangeHandle<TypeConfig>;
/// The trait giving `term()` / `node_id()` on [`LeaderId`].
pub use openraft::vote::RaftLeaderId;
/// The trait giving `leader_id()` / `is_committed()` / `term()` on [`Vote`].
pub use openraft::vote::RaftVote;
/// A node record with an address.
pub use openraft::BasicNode;
/// openraft's configuration struct (build one with [`crate::RaftTimings::config`]).
pub use openraft::Config;
/// The openraft trait that gives `Instant::now()` / `elapsed()` on [`Instant`].
pub use openraft::Instant as InstantExt;
/// Options for [`Raft::ensure_linearizable`] and friends.
pub use openraft::LinearizerOption;
/// How a linearizable read ensures leadership (`ReadIndex` or `LeaseRead`).
pub use openraft::ReadPolicy;
/// The role of a node (`Leader`, `Follower`, `Candidate`, `Learner`, `Shutdown`).
pub use openraft::ServerState;

/// openraft's error types, specialised to [`TypeConfig`].
pub mod errors {
    use super::TypeConfig;

    /// The error of every Raft API: an API error `E` or a fatal one.
    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<TypeConfig, E>;
    /// The node stopped, panicked or hit a storage error.
    pub type Fatal = openraft::error::Fatal<TypeConfig>;
    /// Why `initialize` refused (`NotAllowed` on an initialized node is fine).
    pub type InitializeError = openraft::error::InitializeError<TypeConfig>;
    /// `initialize` on a node that already has state.
    pub type NotAllowed = openraft::error::NotAllowed<TypeConfig>;
    /// Why a client write failed.
    pub type ClientWriteError = openraft::error::ClientWriteError<TypeConfig>;
    /// Why a linearizable read (or `ensure_linearizable`) failed.
    pub type LinearizableReadError = openraft::error::LinearizableReadError<TypeConfig>;
    /// This node is not the leader; maybe it knows who is.
    pub type ForwardToLeader = openraft::error::ForwardToLeader<TypeConfig>;
    /// openraft's stand-in for "no API error".
    pub use openraft::error::Infallible;
    /// openraft's configuration validation error.
    pub use openraft::ConfigError;
}
