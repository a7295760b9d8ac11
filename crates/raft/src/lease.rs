//! This node's leadership, read from openraft in plain tokio types (on
//! tokio's clock, which is the machine's monotonic clock unless a
//! simulator drives it).
//!
//! For the speaker's guard: grant only while [`leader_state`] names the
//! generation (term) the table was rebuilt in and
//! `Instant::now() < LeaderState::lease_deadline(..)`.

use std::time::Duration;

use openraft::vote::RaftLeaderId;
use openraft::Instant as _;

use crate::types::LeaderId;
use crate::types::Raft;
use crate::types::WatchReceiver;

/// What `Raft::as_leader()` reports while this node is the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderState {
    /// The leader id: this node, elected in `leader_id.term`.
    pub leader_id: LeaderId,
    /// When a quorum last acknowledged this leader (the *send* time of the
    /// acknowledged heartbeat), or `None` if no quorum has acknowledged it yet.
    pub quorum_acked_at: Option<tokio::time::Instant>,
}

impl LeaderState {
    /// The term this node leads in.
    pub fn term(&self) -> u64 {
        self.leader_id.term()
    }

    /// Until when no other leader can exist: `quorum_acked_at + lease - margin`.
    ///
    /// `lease` is `election_timeout_max` ([`crate::RaftTimings::leader_lease`]).
    /// `None` (not yet acknowledged) means: not a valid leader.
    pub fn lease_deadline(
        &self,
        lease: Duration,
        margin: Duration,
    ) -> Option<tokio::time::Instant> {
        let acked = self.quorum_acked_at?;
        (acked + lease).checked_sub(margin)
    }
}

/// This node's leadership, or `None` if it is not the (committed) leader.
///
/// Reads the metrics channel (no round trip to the Raft core), which the
/// core refreshes on every loop iteration; the acknowledgement time it shows
/// can only be older than the core's, which errs on the safe side.
///
/// A sole voter is its own quorum at every instant (openraft keeps its
/// acknowledgement time at the election and never refreshes it), so for a
/// one-voter cluster `quorum_acked_at` is now.
pub fn leader_state(raft: &Raft) -> Option<LeaderState> {
    let leader = raft.as_leader().ok()?;
    // Counted in place: `voter_ids()` would clone the membership on every
    // grant. The borrow blocks the Raft core, so it is kept this short.
    let sole_voter = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        let mut voters = metrics.membership_config.membership().voter_ids();
        voters.next() == Some(*raft.node_id()) && voters.next().is_none()
    };
    if sole_voter {
        return Some(LeaderState {
            leader_id: *leader.leader_id(),
            quorum_acked_at: Some(tokio::time::Instant::now()),
        });
    }
    let quorum_acked_at = leader.last_quorum_acked().and_then(|acked| {
        // openraft's instant wraps tokio's; carry it over as an age. `now`
        // is read first, so a stall between the two reads makes the
        // acknowledgement look older, never newer.
        let now = tokio::time::Instant::now();
        let age = acked.elapsed();
        now.checked_sub(age)
    });
    Some(LeaderState {
        leader_id: *leader.leader_id(),
        quorum_acked_at,
    })
}
/// How long ago `member` last acknowledged a heartbeat or an append of
/// this leader, by its `metrics`; `None` on a node that does not lead, or
/// for a member that has not answered it.
pub fn acked_ago(
    metrics: &crate::types::RaftMetrics,
    member: crate::types::NodeId,
) -> Option<Duration> {
    let acked = metrics.heartbeat.as_ref()?.get(&member)?.as_ref()?;
    Some(acked.elapsed())
}
