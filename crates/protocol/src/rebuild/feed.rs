//! The locks a rebuild reads, settled as they arrive rather than once
//! every member has answered: a member's report of a million locks settles
//! while it is still being read, and no list of every lock read is kept.

use locktable::{Kind, Lock, MonoTime, Settling};

/// Where a rebuild attempt's reports settle as they arrive, each frame's
/// leases already on this member's clock (counted from its arrival). Taken
/// out by [`crate::AttemptOut::Collect`] before the first read, fed by the
/// driver wherever heavy work may run, and handed back to
/// [`crate::RebuildJob::settle`] once the reads are over.
///
/// Every report taken in counts, the ones of a read that later fails or is
/// dropped at the end of the reads included: each is a record its member
/// kept, as good as the same record in a whole report. A member counts as
/// read, or missing, by its reads' outcome alone.
#[derive(Debug)]
pub struct RebuildFeed {
    settling: Settling,
    /// Sabotage: every lock read as if held exclusively.
    kinds_unread: bool,
}

impl RebuildFeed {
    pub(crate) fn new(settling: Settling, kinds_unread: bool) -> Self {
        RebuildFeed {
            settling,
            kinds_unread,
        }
    }

    /// Takes in `locks` of a member's report that arrived by `now`, their
    /// leases on this member's clock.
    pub fn add(&mut self, mut locks: Vec<Lock>, now: MonoTime) {
        if self.kinds_unread {
            for lock in &mut locks {
                lock.kind = Kind::Exclusive;
            }
        }
        self.settling.add(locks, now);
    }

    /// Room for about `more` locks beyond those taken in (a member said how
    /// many its report holds), taken at once rather than by growing.
    pub fn reserve(&mut self, more: usize) {
        self.settling.reserve(more);
    }

    /// How many locks were taken in so far.
    pub fn reports(&self) -> usize {
        self.settling.reports()
    }

    pub(crate) fn into_settling(self) -> Settling {
        self.settling
    }
}
