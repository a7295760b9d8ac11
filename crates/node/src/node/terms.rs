//! What this node runs with and hears the others run with: the copies a
//! grant needs or may have, and the leader leases its guard counts on.

use locktable::NodeId;

use super::Node;

impl Node {
    /// How many members hold a record of every grant, in the cluster as it
    /// is now.
    pub(crate) fn copies(&self) -> usize {
        self.state().member.config().copies
    }

    /// What this node's report says of copies: the fewest a running grant
    /// may have as far as it knows (`u64::MAX`: nothing known, so the
    /// reader counts on its own).
    pub(crate) fn reported_copies(&self) -> u64 {
        let now = self.clock.now();
        let fewest = self.state().member.fewest_copies(now);
        fewest.map_or(u64::MAX, |f| f as u64)
    }

    /// Member `from` said what it runs with: the fewest copies its grants
    /// may have are counted for a lease from now, and the guard counts on
    /// its leader lease if it is shorter than this node's.
    pub(crate) fn heard_terms(&self, from: NodeId, terms: leasehold_raft::Terms, answer: bool) {
        let now = self.clock.now();
        if answer {
            if let Err(why) = self.config.honours_leader_lease(terms.leader_lease) {
                self.warn_timings_once(from, &why);
            }
        }
        let terms = leasehold_protocol::PeerTerms {
            copies: terms.copies,
            max_lease: terms.max_lease,
            // A request may have waited since its member restarted with
            // other timings: only an answer says what it runs with now.
            leader_lease: answer.then_some(terms.leader_lease),
        };
        self.state().member.heard(from, terms, now);
    }

    /// Logs, once per member, that its leader lease is one this node's
    /// heartbeats cannot renew twice: the guard counts on it all the same
    /// (the member votes that soon), so grants stall.
    fn warn_timings_once(&self, from: NodeId, why: &str) {
        let first = self
            .warned_timings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(from);
        if first {
            tracing::error!(
                member = from,
                %why,
                "a member's timings leave the speaker's guard no room: grants and renewals may \
                 stall; give every member the same timings"
            );
        }
    }

    /// What this node tells the other members it runs with, as of now.
    pub(crate) fn refresh_terms(&self) {
        let now = self.clock.now();
        let mut state = self.state();
        let floor = state.member.copies_floor(now);
        self.identity.terms().set_copies(floor);
    }
}
