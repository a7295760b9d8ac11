//! The grant guard: a speaker grants only for the term its table was
//! rebuilt in, and only while no other leader can exist.
//!
//! openraft stamps a quorum's acknowledgement with the *send* time of the
//! heartbeat acknowledged; a member that acknowledged it refuses to vote
//! for `election_timeout_max` after it took it (design.md, "What openraft
//! promises"). So until `acked + leader_lease` no other leader exists; the
//! guard stops [`LEASE_MARGIN`] before that. An acknowledgement from
//! before a suspend says nothing about now: the monotonic clock Raft
//! stamps it on stood still meanwhile.

use std::time::Duration;

use locktable::MonoTime;

/// How much of the leader lease the speaker leaves unused: it stops
/// granting this long before a new leader could exist.
pub const LEASE_MARGIN: Duration = Duration::from_millis(75);

/// This member's leadership, as Raft reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    /// The term it leads.
    pub term: u64,
    /// When a quorum last acknowledged it, on the lease clock; `None`
    /// before any quorum has.
    pub quorum_acked_at: Option<MonoTime>,
}

/// The facts the guard reads, taken from Raft and the clock watch at the
/// moment of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Guard {
    /// This member's leadership, if it leads.
    pub leader: Option<Leader>,
    /// When the machine last resumed from a suspend, if it did since the
    /// process started.
    pub resumed_at: Option<MonoTime>,
}

impl Guard {
    /// Not a leader.
    pub const FOLLOWER: Guard = Guard {
        leader: None,
        resumed_at: None,
    };

    /// The term this member leads, if it does.
    pub fn leader_term(&self) -> Option<u64> {
        self.leader.map(|l| l.term)
    }

    /// Until when this member, as leader of `term`, may grant: a quorum's
    /// last acknowledgement plus `leader_lease`, less [`LEASE_MARGIN`];
    /// `None` when it does not lead `term`, no quorum acknowledged it, or
    /// the acknowledgement is from before the last resume.
    pub fn deadline(&self, term: u64, leader_lease: Duration) -> Option<MonoTime> {
        let leader = self.leader.filter(|l| l.term == term)?;
        let acked = leader.quorum_acked_at?;
        if self.resumed_at.is_some_and(|resumed| acked <= resumed) {
            return None;
        }
        Some(acked + leader_lease - LEASE_MARGIN)
    }

    /// Whether the leader of `term` may grant at `now`.
    pub fn allows(&self, term: u64, leader_lease: Duration, now: MonoTime) -> bool {
        self.deadline(term, leader_lease)
            .is_some_and(|deadline| now < deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1_000);

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    fn leading(term: u64, acked_ms: u64) -> Guard {
        Guard {
            leader: Some(Leader {
                term,
                quorum_acked_at: Some(at(acked_ms)),
            }),
            resumed_at: None,
        }
    }

    #[test]
    fn a_leader_grants_until_the_margin_before_its_lease_ends() {
        let guard = leading(3, 100);
        assert!(guard.allows(3, LEASE, at(100)));
        assert!(guard.allows(3, LEASE, at(1_024)));
        // 100 + 1000 - 75 = 1025: not at it, nor after.
        assert!(!guard.allows(3, LEASE, at(1_025)));
        assert!(!guard.allows(3, LEASE, at(1_099)));
    }

    #[test]
    fn only_for_the_term_it_leads() {
        let guard = leading(3, 100);
        assert!(!guard.allows(2, LEASE, at(200)));
        assert!(!guard.allows(4, LEASE, at(200)));
        assert!(!Guard::FOLLOWER.allows(3, LEASE, at(200)));
    }

    #[test]
    fn not_before_a_quorum_acknowledged_nor_on_an_acknowledgement_from_before_a_resume() {
        let never = Guard {
            leader: Some(Leader {
                term: 3,
                quorum_acked_at: None,
            }),
            resumed_at: None,
        };
        assert!(!never.allows(3, LEASE, at(0)));
        let mut resumed = leading(3, 100);
        resumed.resumed_at = Some(at(100));
        assert!(!resumed.allows(3, LEASE, at(150)), "acked at the resume");
        resumed.resumed_at = Some(at(99));
        assert!(resumed.allows(3, LEASE, at(150)), "acked after it");
    }
}
