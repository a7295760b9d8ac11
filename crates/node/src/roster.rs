//! Who the members are and where: Raft's latest membership (every voter of
//! both halves of a joint configuration, and every learner), or, before
//! the cluster forms, the members the node was started with.
//!
//! openraft applies a membership entry as soon as it is in a member's log,
//! committed or not (docs/design.md, "Membership changes"), so the roster
//! follows the latest one: a rebuild reads every member of it and a
//! release is passed on to each. What a member may be trusted with beyond
//! that (a copy, a forwarded call) needs the committed configuration too:
//! a leader elected without an uncommitted entry never reads the member it
//! adds.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_raft::{RaftMetrics, StoredMembership};
use locktable::NodeId;

/// The members as one node knows them at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roster {
    /// Every member, id to address.
    addrs: BTreeMap<NodeId, String>,
    /// The members that vote (of either half, during a change).
    voters: BTreeSet<NodeId>,
    /// The members of the committed configuration (voters of either half
    /// and learners), and which of them vote.
    committed: BTreeSet<NodeId>,
    committed_voters: BTreeSet<NodeId>,
}

impl Roster {
    /// The members `peers` (id to address), every one a voter: a cluster
    /// as it is first formed.
    pub fn from_peers(peers: &BTreeMap<NodeId, String>) -> Self {
        let ids: BTreeSet<NodeId> = peers.keys().copied().collect();
        Roster {
            addrs: peers.clone(),
            voters: ids.clone(),
            committed: ids.clone(),
            committed_voters: ids,
        }
    }

    /// The members of Raft's latest configuration, `latest`, beside those of
    /// the committed one, `committed`; `None` while the latest has none (the
    /// cluster has not formed, as far as this node knows).
    pub fn from_membership(
        latest: &StoredMembership,
        committed: &StoredMembership,
    ) -> Option<Self> {
        let membership = latest.membership();
        let addrs: BTreeMap<NodeId, String> = membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        if addrs.is_empty() {
            return None;
        }
        let settled = committed.membership();
        Some(Roster {
            addrs,
            voters: membership.voter_ids().collect(),
            committed: settled.nodes().map(|(id, _)| *id).collect(),
            committed_voters: settled.voter_ids().collect(),
        })
    }

    /// The roster Raft's `metrics` show, or else `peers`'.
    pub fn current(metrics: &RaftMetrics, peers: &BTreeMap<NodeId, String>) -> Self {
        Self::from_membership(
            &metrics.membership_config,
            &metrics.committed_membership_config,
        )
        .unwrap_or_else(|| Self::from_peers(peers))
    }

    /// The members a copy may go to: voters of the latest configuration
    /// and of the committed one. A learner may not be running (an operator
    /// may add one before starting it), and a member whose addition has
    /// not committed may be unknown to the next leader.
    pub fn copy_to(&self) -> Vec<NodeId> {
        // A cluster just formed has committed nothing yet: its first
        // configuration is the only one there is.
        if self.committed_voters.is_empty() {
            return self.voters.iter().copied().collect();
        }
        self.voters
            .intersection(&self.committed_voters)
            .copied()
            .collect()
    }

    /// How many voters the committed configuration has (the latest's,
    /// while nothing is committed yet): a fall of the copies a grant needs
    /// counts only once the configuration that causes it has committed.
    pub fn committed_voter_count(&self) -> usize {
        if self.committed_voters.is_empty() {
            return self.voters.len();
        }
        self.committed_voters.len()
    }

    /// Whether `id` is a member of the latest configuration and of the
    /// committed one: one whose records every later leader reads.
    pub fn is_settled(&self, id: NodeId) -> bool {
        self.addrs.contains_key(&id) && self.committed.contains(&id)
    }

    /// Whether the committed configuration names `id`.
    pub fn is_committed_member(&self, id: NodeId) -> bool {
        self.committed.contains(&id)
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
        let committed = stored(vec![old.clone()], &[1, 2, 3, 4, 5]);
        let latest = stored(vec![old, new], &[1, 2, 3, 4, 5]);
        let roster = Roster::from_membership(&latest, &committed).unwrap();
        assert_eq!(roster.ids().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert!((1..=4).all(|id| roster.is_voter(id)));
        assert!(!roster.is_voter(5), "5 is a learner");
        assert_eq!(
            roster.copy_to(),
            [1, 2, 3],
            "4's addition has not committed; 5 is a learner"
        );
        assert!(roster.is_settled(5) && !roster.is_settled(6));
        assert_eq!(roster.id_at("127.0.0.1:4"), Some(4));
        assert_eq!(roster.addr(5), Some("127.0.0.1:5"));
    }

    #[test]
    fn no_membership_yet_means_the_members_the_node_was_started_with() {
        let peers: BTreeMap<NodeId, String> =
            [(1, "a:1".to_string()), (2, "b:2".to_string())].into();
        let none = StoredMembership::default();
        assert_eq!(Roster::from_membership(&none, &none), None);
        let roster = Roster::from_peers(&peers);
        assert_eq!(
            roster.members().collect::<Vec<_>>(),
            [(1, "a:1"), (2, "b:2")]
        );
        assert!(roster.is_voter(2));
        assert_eq!(roster.copy_to(), [1, 2]);
    }

    #[test]
    fn a_member_being_added_gets_no_copy_until_its_addition_commits() {
        let one: BTreeSet<NodeId> = [1].into();
        let two: BTreeSet<NodeId> = [1, 2].into();
        // A single node with a learner that may not run yet: copies stay
        // with the node.
        let learner = stored(vec![one.clone()], &[1, 2]);
        let roster = Roster::from_membership(&learner, &learner).unwrap();
        assert_eq!(roster.copy_to(), [1]);
        // Its addition as a voter appended, not committed.
        let roster =
            Roster::from_membership(&stored(vec![two.clone()], &[1, 2]), &learner).unwrap();
        assert_eq!(roster.copy_to(), [1]);
        let committed = stored(vec![two], &[1, 2]);
        let roster = Roster::from_membership(&committed, &committed).unwrap();
        assert_eq!(roster.copy_to(), [1, 2]);
        // A removal appended: its member gets no more copies at once.
        let three = stored(vec![[1, 2, 3].into()], &[1, 2, 3]);
        let roster = Roster::from_membership(&committed, &three).unwrap();
        assert_eq!(roster.copy_to(), [1, 2]);
        assert_eq!(roster.committed_voter_count(), 3);
        assert!(!roster.is_settled(3));
        // A cluster just formed, its first configuration not committed.
        let none = StoredMembership::default();
        let roster = Roster::from_membership(&three, &none).unwrap();
        assert_eq!(roster.copy_to(), [1, 2, 3]);
        assert_eq!(roster.committed_voter_count(), 3);
    }
}
