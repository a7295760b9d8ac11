//! Raft's leadership as this node sees it, and handing it on.

use std::time::Duration;

use leasehold_raft::{leader_state, WatchReceiver};
use locktable::NodeId;

use super::Node;

impl Node {
    /// The current leader and its address, as Raft knows it.
    pub(crate) fn leader(&self) -> Option<(NodeId, String)> {
        // Read in place (cloning the metrics costs more than a forward's
        // own work), and keep the borrow short: it blocks the Raft core.
        let (leader, addr) = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            let leader = metrics.current_leader?;
            let addr = metrics
                .membership_config
                .membership()
                .get_node(&leader)
                .map(|n| n.addr.clone());
            (leader, addr)
        };
        let addr = addr.or_else(|| self.roster().addr(leader).map(str::to_string))?;
        Some((leader, addr))
    }

    /// Whether this node is the Raft leader (rebuilt or not).
    pub(crate) fn is_leader(&self) -> bool {
        self.raft.as_leader().is_ok()
    }

    /// Hands Raft leadership to another voter, if this node leads; the
    /// table must already be dropped (the transfer lets the target win at
    /// once). Answers the member it was handed to.
    pub(crate) async fn transfer_leadership(&self) -> Option<NodeId> {
        if !self.is_leader() {
            return None;
        }
        let next = self.transfer_target()?;
        match self.raft.trigger().transfer_leader(next).await {
            Ok(()) => Some(next),
            Err(e) => {
                tracing::warn!(%e, to = next, "leadership transfer failed");
                None
            }
        }
    }

    /// Waits until Raft names a leader other than this node; answers it,
    /// or `None` after `patience`.
    pub(crate) async fn wait_for_other_leader(&self, patience: Duration) -> Option<NodeId> {
        let mut metrics = self.raft.metrics();
        let other = |m: &leasehold_raft::RaftMetrics| {
            m.current_leader.filter(|leader| *leader != self.config.id)
        };
        tokio::time::timeout(patience, async {
            loop {
                if let Some(leader) = other(&metrics.borrow_watched()) {
                    return Some(leader);
                }
                if metrics.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// Waits until a speaker of a term above `term` has read this node's
    /// report; answers whether one did within `patience`.
    pub(crate) async fn wait_read_above(&self, term: u64, patience: Duration) -> bool {
        let mut read_by = self.read_by.subscribe();
        tokio::time::timeout(patience, read_by.wait_for(|read| *read > term))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The term this node leads, if it does (rebuilt or not).
    pub fn leading_term(&self) -> Option<u64> {
        leader_state(&self.raft).map(|l| l.term())
    }

    /// The member that speaks (Raft's leader), as this node knows it: an
    /// embedding application sees whether its own node speaks (`Some(id)`
    /// with [`Node::id`]) beside which instance leads its election.
    pub fn speaker(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The voter most caught up with this leader's log, other than itself.
    pub(crate) fn transfer_target(&self) -> Option<NodeId> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let voters: Vec<NodeId> = metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|id| *id != self.config.id)
            .collect();
        let progress = metrics.replication.unwrap_or_default();
        voters
            .into_iter()
            .max_by_key(|id| progress.get(id).cloned().flatten().map(|l| l.index()))
    }
}
