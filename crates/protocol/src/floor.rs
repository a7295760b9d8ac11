//! The fewest copies a grant still running may have been made with.
//!
//! A rebuild has seen every grant when fewer members are missing than the
//! copies each grant was made with. The copies a member makes follow the
//! cluster (never more than a quorum of its voters) and `--copies`, both of
//! which change: a grant made with one copy by a single node is still
//! running after two members joined and the setting became two. So every
//! member keeps, besides the copies it makes now, each lower number a
//! running grant may have: its own from before the last rise (for a lease
//! after the rise), and what other members said they made (for a lease
//! after they said it). A rebuild counts on the fewest of every member it
//! reads.

use std::collections::BTreeMap;
use std::time::Duration;

use locktable::MonoTime;

/// How much longer than a lease a lower count is kept: covers the rates
/// of two members' clocks over one lease, as a release's id is.
pub const FLOOR_MARGIN: Duration = Duration::from_secs(1);

/// Lower counts of copies, each until when a grant made with it may run.
#[derive(Debug, Clone, Default)]
pub struct CopiesFloor {
    until: BTreeMap<usize, MonoTime>,
}

impl CopiesFloor {
    /// A grant made with `copies` may run until `until`.
    pub fn note(&mut self, copies: usize, until: MonoTime) {
        let at = self.until.entry(copies).or_insert(until);
        *at = (*at).max(until);
    }

    /// The fewest copies a grant may still have at `now`, if any was noted
    /// (those that ended are dropped).
    pub fn lowest(&mut self, now: MonoTime) -> Option<usize> {
        self.until.retain(|_, until| *until > now);
        self.until.keys().next().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    #[test]
    fn the_fewest_running_count_until_it_ends() {
        let mut floor = CopiesFloor::default();
        assert_eq!(floor.lowest(at(0)), None);
        floor.note(2, at(100));
        floor.note(1, at(50));
        assert_eq!(floor.lowest(at(10)), Some(1));
        floor.note(1, at(20));
        assert_eq!(floor.lowest(at(49)), Some(1), "the later end is kept");
        assert_eq!(floor.lowest(at(50)), Some(2), "ended at its instant");
        assert_eq!(floor.lowest(at(100)), None);
    }
}
