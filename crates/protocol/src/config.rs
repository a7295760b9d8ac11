//! What a member needs to know of its cluster and settings.

use std::time::Duration;

use locktable::{LeaseRule, NodeId};

use crate::Sabotage;

/// What a rebuild that could not read every member does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RebuildMode {
    /// Serve with what was read (the seed's behaviour): a lock held through
    /// a member that did not answer may be granted again until the next
    /// rebuild settles it.
    #[default]
    Proceed,
    /// Also refuse new grants for the longest lease while holders reclaim,
    /// so no two holders ever overlap.
    Strict,
}

/// One member's settings, as the protocol uses them.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// This member's id.
    pub id: NodeId,
    /// Every member's id, this one's included.
    pub members: Vec<NodeId>,
    /// The members a copy may go to: the voters of the committed
    /// configuration that the latest one keeps (a learner may be absent,
    /// and a member whose addition has not committed may be unknown to
    /// the next leader, which would never read its copies).
    pub copy_to: Vec<NodeId>,
    /// How many members hold a record of every grant and renewal before
    /// its client hears of it.
    pub copies: usize,
    /// The default and longest leases.
    pub lease: LeaseRule,
    /// What a rebuild that missed members does.
    pub rebuild_mode: RebuildMode,
    /// The longest a rebuild reads members (`--rebuild-timeout`).
    pub rebuild_timeout: Duration,
    /// How long after a quorum's acknowledgement no other leader can
    /// exist (openraft's `election_timeout_max`).
    pub leader_lease: Duration,
    /// Safety mechanisms switched off, in a simulation's self-test only.
    pub sabotage: Sabotage,
}

/// The least time a rebuild attempt waits for a quorum to confirm this
/// leader, however short `--rebuild-timeout` is.
const CONFIRM_AT_LEAST: Duration = Duration::from_secs(1);

impl MemberConfig {
    /// How long a rebuild attempt waits for a quorum to confirm this member
    /// still leads (openraft's ReadIndex) before it fails and is tried
    /// again: the rebuild timeout, and at least a second.
    pub fn confirm_within(&self) -> Duration {
        self.rebuild_timeout.max(CONFIRM_AT_LEAST)
    }

    /// The members in id order, without duplicates.
    pub(crate) fn sorted(mut self) -> Self {
        self.members.sort_unstable();
        self.members.dedup();
        self.copy_to.sort_unstable();
        self.copy_to.dedup();
        self
    }
}
