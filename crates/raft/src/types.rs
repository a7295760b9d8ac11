//! The openraft type configuration and the aliases every other crate uses.

use std::fmt;

use serde::Deserialize;
use serde::Serialize;

use crate::ids::StoreId;
use crate::runtime::EntropyRuntime;
use crate::state_machine::StateMachine;
use crate::version::Protocol;

/// The application data carried by normal Raft log entries.
///
/// Grants are not logged: leasehold uses Raft for election, terms and
/// membership only; its commands say nothing about locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// An entry with no effect (e.g. to force a commit in the current term).
    Noop,
    /// Member `member` runs on the data directory `store`: written by the
    /// speaker before it adds a node (from the node's own stamp), so that
    /// every member, in log order, knows which directory that id is on
    /// ([`crate::Identity::pin`]).
    MemberStore {
        /// The member.
        member: NodeId,
        /// Its data directory's id.
        store: StoreId,
    },
    /// From this entry on the cluster speaks protocol version `0`
    /// ([`crate::version`]): appended by the speaker once every member of
    /// the committed configuration offers it. Since version 1: a build
    /// before it cannot read this entry, and it is never appended while
    /// such a build is a member.
    Protocol(Protocol),
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Noop => f.write_str("noop"),
            Command::MemberStore { member, store } => write!(f, "member {member} on {store}"),
            Command::Protocol(version) => write!(f, "protocol {version}"),
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
    /// The runtime is tokio, with its randomness from [`crate::entropy`].
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        AsyncRuntime = EntropyRuntime,
);

pub use crate::ids::NodeId;
/// A running (or built) Raft member.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
/// A leader id: the term and the node elected in it.
pub type LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>;
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
/// The trait giving `changed().await` / `borrow_watched()` on metrics receivers.
pub use openraft::async_runtime::WatchReceiver;
/// A node record with an address.
pub use openraft::BasicNode;
/// A change of the members: add or remove voters or learners.
pub type ChangeMembers = openraft::ChangeMembers<NodeId, openraft::BasicNode>;
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
    /// Why a write (a membership change among them) failed.
    pub type ClientWriteError = openraft::error::ClientWriteError<TypeConfig>;
    /// Why a membership change was refused.
    pub type ChangeMembershipError = openraft::error::ChangeMembershipError<
        openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>,
        super::NodeId,
    >;
}

#[cfg(test)]
mod wire_tests {
    use super::*;
    use crate::codec::{decode, encode};

    /// The entries a build before versions reads keep their bytes: bincode
    /// numbers variants in order, so a new one goes last.
    #[test]
    fn the_entries_older_builds_read_keep_their_encoding() {
        assert_eq!(encode(&Command::Noop).unwrap(), vec![0]);
        let store = StoreId(0x0102);
        let pin = encode(&Command::MemberStore { member: 7, store }).unwrap();
        assert_eq!(pin[..2], [1, 7], "variant 1, then the member");
        assert_eq!(encode(&Command::Protocol(1)).unwrap(), vec![2, 1]);
        assert_eq!(
            decode::<Command>(&pin).unwrap(),
            Command::MemberStore { member: 7, store }
        );
    }
}
