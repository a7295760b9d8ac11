//! Who the members are and where: Raft's latest membership (every voter of
//! both halves of a joint configuration, and every learner), or, before
//! the cluster forms, the members the node was started with.
//!
//! openraft applies a membership entry as soon as it is in a member's log,
//! committed or not (docs/design.md, "Membership changes"), so the roster
//! follows the latest one: a rebuild reads every member of it, a copy may
//! go to any of them, and a release is passed on to each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leasehold_raft::{RaftMetrics, StoredMembership, WatchReceiver};
use locktable::NodeId;
use tokio_util::sync::CancellationToken;

use crate::node::Node;

/// The members as one node knows them at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roster {
    /// Every member, id to address.
    addrs: BTreeMap<NodeId, String>,
    /// The members that vote (of either half, during a change).
    voters: BTreeSet<NodeId>,
}

impl Roster {
    /// The members `peers` (id to address), every one a voter: a cluster
    /// as it is first formed.
    pub fn from_peers(peers: &BTreeMap<NodeId, String>) -> Self {
        Roster {
            addrs: peers.clone(),
            voters: peers.keys().copied().collect(),
        }
    }

    /// The members of Raft's latest configuration; `None` while it has none
    /// (the cluster has not formed, as far as this node knows).
    pub fn from_membership(stored: &StoredMembership) -> Option<Self> {
        let membership = stored.membership();
        let addrs: BTreeMap<NodeId, String> = membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        if addrs.is_empty() {
            return None;
        }
        Some(Roster {
            addrs,
            voters: membership.voter_ids().collect(),
        })
    }

    /// The roster Raft's `metrics` show, or else `peers`'.
    pub fn current(metrics: &RaftMetrics, peers: &BTreeMap<NodeId, String>) -> Self {
        Self::from_membership(&metrics.membership_config).unwrap_or_else(|| Self::from_peers(peers))
    }

    /// Every member's id, in order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.addrs.keys().copied()
    }

    /// Every member, id and address, in id order.
    pub fn members(&self) -> impl Iterator<Item = (NodeId, &str)> {
        self.addrs.iter().map(|(id, addr)| (*id, addr.as_str()))
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Member `id`'s address.
    pub fn addr(&self, id: NodeId) -> Option<&str> {
        self.addrs.get(&id).map(String::as_str)
    }

    /// The member at `addr`.
    pub fn id_at(&self, addr: &str) -> Option<NodeId> {
        self.addrs
            .iter()
            .find(|(_, a)| *a == addr)
            .map(|(id, _)| *id)
    }

    /// Whether `id` votes.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
    }
}

/// Keeps `node`'s roster in step with Raft's latest membership until `stop`:
/// on every change the protocol's member list follows, and the members new
/// to it get their lanes of releases.
pub(crate) async fn follow(node: Arc<Node>, stop: CancellationToken) {
    let mut metrics = node.raft.metrics();
    loop {
        let latest = Roster::from_membership(&metrics.borrow_watched().membership_config);
        if let Some(latest) = latest {
            node.roster_changed(latest);
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_raft::{BasicNode, LogId};
    use openraft::Membership;

    fn stored(configs: Vec<BTreeSet<NodeId>>, nodes: &[NodeId]) -> StoredMembership {
        let nodes: BTreeMap<NodeId, BasicNode> = nodes
            .iter()
            .map(|id| (*id, BasicNode::new(format!("127.0.0.1:{id}"))))
            .collect();
        let membership = Membership::new(configs, nodes).unwrap();
        StoredMembership::new(None::<LogId>, membership)
    }

    #[test]
    fn a_joint_configuration_counts_both_halves_and_the_learners() {
        let old: BTreeSet<NodeId> = [1, 2, 3].into();
        let new: BTreeSet<NodeId> = [2, 3, 4].into();
        let roster = Roster::from_membership(&stored(vec![old, new], &[1, 2, 3, 4, 5])).unwrap();
        assert_eq!(roster.ids().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert!((1..=4).all(|id| roster.is_voter(id)));
        assert!(!roster.is_voter(5), "5 is a learner");
        assert_eq!(roster.id_at("127.0.0.1:4"), Some(4));
        assert_eq!(roster.addr(5), Some("127.0.0.1:5"));
    }

    #[test]
    fn no_membership_yet_means_the_members_the_node_was_started_with() {
        let peers: BTreeMap<NodeId, String> =
            [(1, "a:1".to_string()), (2, "b:2".to_string())].into();
        let none = StoredMembership::default();
        assert_eq!(Roster::from_membership(&none), None);
        let roster = Roster::from_peers(&peers);
        assert_eq!(
            roster.members().collect::<Vec<_>>(),
            [(1, "a:1"), (2, "b:2")]
        );
        assert!(roster.is_voter(2));
    }
}
