//! What a member runs with and hears the others run with: the members,
//! the copies a grant needs or may still have, and the leader leases its
//! guard counts on.

use std::time::Duration;

use locktable::{LeaseRule, MonoTime, NodeId};

use crate::floor::FLOOR_MARGIN;

use super::{Member, PeerTerms};

/// The fewer of two counts, either of which may be unknown.
fn fewer(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Member {
    /// The members are now `members` (a membership change, `now`), copies
    /// go to `copy_to` (the voters of the committed configuration), and
    /// every grant is kept by `copies` of them: copies and releases go to
    /// them from now on. A rise of `copies` while this member may grant
    /// leaves the grants it made with fewer running for up to a lease: the
    /// fewer count is kept that long ([`Member::copies_floor`]).
    pub fn set_members(
        &mut self,
        members: Vec<NodeId>,
        copy_to: Vec<NodeId>,
        copies: usize,
        now: MonoTime,
    ) {
        let before = self.config.copies;
        if copies > before && self.table.is_rebuilt() {
            self.note_own_copies(before, now);
        }
        // A member gone no longer bounds the guard or the hold.
        self.leader_leases.retain(|id, _| members.contains(id));
        self.config.members = members;
        self.config.copy_to = copy_to;
        self.config.copies = copies;
        self.config = self.config.clone().sorted();
    }

    /// Grants made at `now` with `copies` may run a longest lease, and
    /// their speaker may grant until its guard runs out.
    pub(super) fn note_own_copies(&mut self, copies: usize, now: MonoTime) {
        if self.config.sabotage.copies_of_now {
            return;
        }
        let until = now + self.config.lease.max + self.longest_leader_lease() + FLOOR_MARGIN;
        self.own_floor.note(copies, until);
    }

    /// The fewest copies a grant this member made may still have at `now`:
    /// what it makes now while its table may grant, or fewer while a grant
    /// made before the count rose may run; `None` when no grant of its may
    /// run (it has not spoken for a lease). What this member tells the
    /// others it makes: a member that does not speak says nothing, so the
    /// passing counts of a node that is joining or forming do not count.
    pub fn copies_floor(&mut self, now: MonoTime) -> Option<usize> {
        let own = self.own_floor.lowest(now);
        let speaking = self.table.is_rebuilt().then_some(self.config.copies);
        fewer(own, speaking)
    }

    /// What this member tells the others it runs with at `now` (they
    /// [`Member::heard`] it): the fewest copies a grant of its may have,
    /// its longest lease and its leader lease.
    pub fn own_terms(&mut self, now: MonoTime) -> PeerTerms {
        PeerTerms {
            copies: self.copies_floor(now),
            max_lease: self.config.lease.max,
            leader_lease: Some(self.config.leader_lease),
        }
    }

    /// Member `from` said at `now` what it runs with: its grants may have
    /// as few as `terms.copies` copies, counted for its longest lease and a
    /// leader lease (it may grant until its guard runs out); and it refuses
    /// votes for `terms.leader_lease` after a heartbeat.
    pub fn heard(&mut self, from: NodeId, terms: PeerTerms, now: MonoTime) {
        // No member may run leases longer than a day: a stamp that says so
        // is cut, so it cannot pin a count for longer.
        let longest = LeaseRule::LONGEST;
        let terms = PeerTerms {
            max_lease: terms.max_lease.min(longest),
            leader_lease: terms.leader_lease.map(|l| l.min(longest)),
            ..terms
        };
        let member = from != self.config.id && self.config.members.binary_search(&from).is_ok();
        if let Some(lease) = terms.leader_lease.filter(|_| member) {
            self.leader_leases.insert(from, lease);
        }
        let Some(copies) = terms.copies else {
            return;
        };
        if self.config.sabotage.copies_of_now {
            return;
        }
        let lease = terms.max_lease.max(self.config.lease.max);
        let until = now + lease + self.longest_leader_lease() + FLOOR_MARGIN;
        self.heard_floor.note(copies, until);
    }

    /// The leader lease the grant guard counts on: the shortest of this
    /// member's and every member's it heard from. A member that took a
    /// heartbeat refuses to vote for its own lease after it, so the
    /// speaker may grant only until the shortest of them has run.
    pub fn guard_lease(&self) -> Duration {
        let own = self.config.leader_lease;
        if self.config.sabotage.own_timings {
            return own;
        }
        self.leader_leases
            .values()
            .copied()
            .fold(own, Duration::min)
    }

    /// The longest leader lease of this member and every member it heard
    /// from: an old speaker may have granted that long after a quorum
    /// last acknowledged it (the strict hold covers it).
    pub fn longest_leader_lease(&self) -> Duration {
        let own = self.config.leader_lease;
        if self.config.sabotage.own_timings {
            return own;
        }
        self.leader_leases
            .values()
            .copied()
            .fold(own, Duration::max)
    }

    /// The fewest copies a grant still running may have, as far as this
    /// member knows at `now`: its own [`copies_floor`](Member::copies_floor)
    /// and what other members said of theirs (`None`: nothing known). What
    /// its report tells a rebuilding speaker; its own rebuild counts on it
    /// and on the copies it makes now.
    pub fn fewest_copies(&mut self, now: MonoTime) -> Option<usize> {
        let own = self.copies_floor(now);
        fewer(own, self.heard_floor.lowest(now))
    }

    /// What a rebuild by this member counts on at `now`: the fewest copies
    /// a running grant may have, and never more than it makes now.
    pub fn counted_copies(&mut self, now: MonoTime) -> usize {
        let ours = self.config.copies;
        self.fewest_copies(now).map_or(ours, |f| f.min(ours))
    }
}
