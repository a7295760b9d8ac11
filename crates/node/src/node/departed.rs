//! Members gone from the roster lately, as the protocol's `Departed` keeps
//! them: a rebuild still reads them (or counts them missing) for as long as
//! a lease of theirs may run, unless they handed their records over as they
//! left.

use std::sync::MutexGuard;
use std::time::Duration;

use leasehold_protocol::Departed;
use locktable::NodeId;

use super::Node;

impl Node {
    /// The departed set, behind its own lock (never taken with the
    /// state's).
    pub(super) fn departed_set(&self) -> MutexGuard<'_, Departed> {
        self.departed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The members gone from the roster lately, each with how long it
    /// stays departed: what this node's report tells a rebuilding speaker.
    pub(crate) fn departed_with_time_left(&self) -> Vec<crate::report::Departed> {
        let now = self.clock.now();
        let gone = self.departed_set().with_time_left(now);
        gone.into_iter()
            .map(|gone| crate::report::Departed {
                node: gone.member,
                addr: gone.addr,
                left_ms: leasehold_api::millis_ceil(gone.left),
            })
            .collect()
    }

    /// How long until `member` may be added again, if it left lately.
    pub(crate) fn added_again_in(&self, member: NodeId) -> Option<Duration> {
        self.departed_set().added_again_in(member, self.clock.now())
    }

    /// Takes `member` at `addr`, which another member saw leave the
    /// cluster, as departed for `left` more (or longer, if this node knew
    /// so already); answers whether it did not know it as departed.
    pub(crate) fn adopt_departed(&self, member: NodeId, addr: &str, left: Duration) -> bool {
        let now = self.clock.now();
        self.departed_set().adopt(member, addr, now + left, now)
    }

    /// `member`, gone from the roster, handed every record it kept over
    /// before it left: no rebuild needs to read it (nor take it as
    /// departed from another member's report, for as long as that could
    /// name it).
    pub(crate) fn handed_over(&self, member: NodeId) {
        if self.roster().addr(member).is_some() {
            return;
        }
        let until = self.state().member.departed_until(self.clock.now());
        let was = self.departed_set().handed_over(member, until);
        if was {
            self.forgets.close(member);
            tracing::info!(
                member,
                "a member that left handed its records over: not read again"
            );
        }
    }

    /// The members gone from the roster within the longest lease (plus a
    /// rebuild's time), with their addresses: a rebuild reads them too.
    pub(crate) fn departed(&self) -> Vec<(NodeId, String)> {
        let now = self.clock.now();
        let members: Vec<NodeId> = self.roster().ids().collect();
        let (read, ended) = self.departed_set().to_read(&members, now);
        for member in ended {
            // No rebuild reads it any more: its releases may stop.
            self.forgets.close(member);
        }
        read
    }
}
