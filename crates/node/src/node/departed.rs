//! Members gone from the roster lately, as the protocol's `Member` keeps
//! them (`Departed`): a rebuild still reads them (or counts them missing)
//! for as long as a lease of theirs may run, unless they handed their
//! records over as they left.

use std::time::Duration;

use locktable::NodeId;

use super::Node;

impl Node {
    /// The members gone from the roster lately, each with how long it
    /// stays departed: what this node's report tells a rebuilding speaker.
    pub(crate) fn departed_with_time_left(&self) -> Vec<crate::report::Departed> {
        let now = self.clock.now();
        let gone = self.state().member.departed_with_time_left(now);
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
        self.state().member.added_again_in(member, self.clock.now())
    }

    /// `member`, gone from the roster, handed every record it kept over
    /// before it left: no rebuild needs to read it (nor take it as
    /// departed from another member's report, for as long as that could
    /// name it).
    pub(crate) fn handed_over(&self, member: NodeId) {
        if self.roster().addr(member).is_some() {
            return;
        }
        let was = self
            .state()
            .member
            .departed_handed_over(member, self.clock.now());
        if was {
            self.forgets.close(member);
            tracing::info!(
                member,
                "a member that left handed its records over: not read again"
            );
        }
    }

    /// The members gone from the roster within the longest lease (plus a
    /// rebuild's time): a rebuild reads them too.
    pub(crate) fn departed(&self) -> Vec<NodeId> {
        let now = self.clock.now();
        let members: Vec<NodeId> = self.roster().ids().collect();
        let (read, ended) = self.state().member.departed_to_read(&members, now);
        self.departed_ended(ended);
        read.into_iter().map(|(id, _)| id).collect()
    }

    /// Members that left whose time ran out: no rebuild reads them any
    /// more, so their releases may stop.
    pub(crate) fn departed_ended(&self, ended: Vec<NodeId>) {
        for member in ended {
            self.forgets.close(member);
        }
    }
}
