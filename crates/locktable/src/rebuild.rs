//! A rebuild settled apart from the table it goes into: the heavy part
//! (every reported lock hashed into place, the lease ends ordered) needs
//! no borrow of the table, so a node can run it on another thread while
//! the table's lock is free, then put the result in place in a moment
//! ([`Table::install`]).
//!
//! [`Table::install`]: crate::Table::install

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use hashbrown::HashMap;

use crate::error::{RebuildError, StaleGeneration};
use crate::holders::Holders;
use crate::lock::{Fence, Lock, LockId};
use crate::settle::Settler;
use crate::time::{LeaseRule, MonoTime};

/// The inputs of a rebuild.
#[derive(Debug, Clone)]
pub struct RebuildFrom {
    /// The generation the nodes were read for
    /// ([`Table::generation`](crate::Table::generation) when the reading
    /// began).
    pub generation: u64,
    /// The speaker's Raft term: the high bits of the fences it grants.
    pub epoch: u64,
    /// What the nodes said: their clients' locks and their own grants, on
    /// this node's clock.
    pub locks: Vec<Lock>,
    /// In strict mode after a rebuild that missed members, no new grant is
    /// made before this instant; renewals and reclaims go on.
    pub hold_new_grants_until: Option<MonoTime>,
    /// Whether the reads saw every grant answered to a client before this
    /// term (fewer members missing than there are copies): this term's
    /// grants then carry [`Fence::SEEN_ALL`], and win over any lock of an
    /// earlier term a later rebuild finds beside them.
    pub seen_all: bool,
}

/// What settling a rebuild needs of the table, taken by
/// [`Table::begin_rebuild`](crate::Table::begin_rebuild): its generation
/// and a copy of the released ids. Releases heard after it was taken are
/// kept by the table and applied at install.
#[derive(Debug, Clone)]
pub struct RebuildBasis {
    pub(crate) generation: u64,
    pub(crate) forgotten: HashMap<LockId, MonoTime>,
}

/// A rebuild's locks settled into a table of their own, to be put in place
/// by [`Table::install`](crate::Table::install).
#[derive(Debug)]
pub struct Settled {
    pub(crate) from_generation: u64,
    pub(crate) epoch: u64,
    pub(crate) highest: Fence,
    pub(crate) slots: Holders,
    pub(crate) expiries: BinaryHeap<Reverse<(MonoTime, Fence, u32)>>,
    pub(crate) lost: Vec<Lock>,
    pub(crate) hold_new_grants_until: Option<MonoTime>,
    pub(crate) seen_all: bool,
}

/// A rebuild's reports settled as they arrive ([`Settling::add`]), before
/// every member has answered, then closed into a [`Settled`]
/// ([`Settling::finish`]): the reports of a large table settle while the
/// rest of them are still read, and no list of every report is ever kept.
#[derive(Debug)]
pub struct Settling {
    basis: RebuildBasis,
    settler: Settler,
    /// The highest fence of every report taken in, live or not.
    highest: Fence,
    /// How many reports were taken in.
    reports: usize,
}

impl RebuildBasis {
    /// Settling with this basis, reports to come.
    pub fn settling(self) -> Settling {
        Settling {
            basis: self,
            settler: Settler::default(),
            highest: Fence::default(),
            reports: 0,
        }
    }

    /// Settles `from`'s locks at `now`: [`RebuildBasis::settling`] and
    /// [`Settling::finish`] at once.
    pub fn settle(self, from: RebuildFrom, now: MonoTime) -> Result<Settled, RebuildError> {
        let mut settling = self.settling();
        // A lock is mostly reported once or twice: room for every report
        // is at most twice the table, and no growing while it settles. The
        // list is at hand, so its length is no member's guess: no cap.
        settling.settler.reserve(from.locks.len());
        settling.finish(from, now)
    }
}

impl Settling {
    /// Takes in reports whose leases were put on this node's clock when
    /// they arrived, by `now`: each live one not released is settled into
    /// place, the one held the longest kept of two grants of one name.
    pub fn add(&mut self, locks: Vec<Lock>, now: MonoTime) {
        self.reports += locks.len();
        if let Some(highest) = locks.iter().map(|l| l.fence).max() {
            self.highest = self.highest.max(highest);
        }
        let forgotten = &self.basis.forgotten;
        self.settler
            .add(locks, now, now + LeaseRule::LONGEST, |id| {
                forgotten.get(&id).is_some_and(|until| *until > now)
            });
    }

    /// Room for about `more` reports beyond those taken in (a member said
    /// how many its report holds), taken at once rather than by growing
    /// while they settle; at most [`Settling::MOST_RESERVED`] at a time.
    pub fn reserve(&mut self, more: usize) {
        self.settler.reserve(more.min(Self::MOST_RESERVED));
    }

    /// The most reports one [`Settling::reserve`] makes room for: a figure
    /// a member got wrong costs no more than this.
    pub const MOST_RESERVED: usize = 1 << 22;

    /// How many reports were taken in so far.
    pub fn reports(&self) -> usize {
        self.reports
    }

    /// Drops every report taken in so far.
    pub fn clear(&mut self) {
        self.settler = Settler::default();
        self.highest = Fence::default();
        self.reports = 0;
    }

    /// Takes in `from`'s locks at `now`, then closes the rebuild: the
    /// checks of a rebuild that need no table (its generation against the
    /// basis, its term against the fences reported), then the names held
    /// shared or as permits settled, and the lease ends ordered.
    pub fn finish(mut self, from: RebuildFrom, now: MonoTime) -> Result<Settled, RebuildError> {
        if from.generation != self.basis.generation {
            return Err(StaleGeneration {
                asked: from.generation,
                current: self.basis.generation,
            }
            .into());
        }
        if from.epoch > Fence::MAX_EPOCH {
            return Err(RebuildError::EpochTooLarge(from.epoch));
        }
        self.add(from.locks, now);
        let highest = self.highest;
        if highest.epoch() > from.epoch {
            return Err(RebuildError::NewerTerm {
                term: from.epoch,
                reported: highest.epoch(),
            });
        }
        let (mut slots, lost) = self.settler.finish(now);
        // Room made for a count a member got wrong is not kept for the
        // rest of the term.
        slots.shrink_if_far_beyond();
        let expiries = BinaryHeap::from(
            slots
                .numbered()
                .map(|(at, s)| Reverse((s.expires, s.fence, at)))
                .collect::<Vec<_>>(),
        );
        Ok(Settled {
            from_generation: from.generation,
            epoch: from.epoch,
            highest,
            slots,
            expiries,
            lost,
            hold_new_grants_until: from.hold_new_grants_until,
            seen_all: from.seen_all,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lock::Kind;
    use crate::Table;

    fn lock(name: &str, id: u128) -> Lock {
        let at = MonoTime::from_nanos(1_000_000_000_000);
        Lock {
            session: Default::default(),
            delay: Default::default(),
            name: name.into(),
            id: LockId::from_u128(id),
            node: 2,
            holder: String::new(),
            fence: Fence::new(1, 1),
            kind: Kind::Exclusive,
            lease: Duration::from_secs(30),
            acquired: at,
            expires: at + Duration::from_secs(30),
            data: None,
            data_rev: 0,
        }
    }

    /// Room made for a figure a member got wrong (far more locks than its
    /// report holds) is given back once the reports are settled: the
    /// table put in place keeps room for the locks it holds, not for
    /// `MOST_RESERVED` of them for the rest of the term (about 400 MB of
    /// hash tables, resident once a hundred thousand locks are spread over
    /// them, and every listing going through all of their buckets).
    #[test]
    fn room_for_a_wrong_figure_is_given_back_once_settled() {
        let now = MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(1);
        let mut table = Table::new(LeaseRule::default());
        table.drop_table(now);
        let mut settling = table.begin_rebuild().settling();
        settling.reserve(usize::MAX);
        settling.add(
            (0..1000).map(|i| lock(&format!("n{i}"), i + 1)).collect(),
            now,
        );
        let from = RebuildFrom {
            generation: table.generation(),
            epoch: 2,
            locks: vec![],
            hold_new_grants_until: None,
            seen_all: false,
        };
        let settled = settling.finish(from, now).unwrap();
        assert_eq!(settled.slots.len(), 1000);
        let bytes = settled.slots.allocation();
        assert!(bytes < 1 << 20, "{} MB kept for 1000 locks", bytes >> 20);
    }

    /// Room made for a figure about right is kept: the table does not pay
    /// for a rehash it was sized to avoid.
    #[test]
    fn room_for_a_right_figure_is_kept() {
        let now = MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(1);
        let mut table = Table::new(LeaseRule::default());
        table.drop_table(now);
        let mut settling = table.begin_rebuild().settling();
        // Each lock reported twice over (a client's record, a copy), and
        // some leases ended.
        settling.reserve(3 * 1000);
        settling.add(
            (0..1000).map(|i| lock(&format!("n{i}"), i + 1)).collect(),
            now,
        );
        let before = settling.settler.allocation();
        let from = RebuildFrom {
            generation: table.generation(),
            epoch: 2,
            locks: vec![],
            hold_new_grants_until: None,
            seen_all: false,
        };
        let settled = settling.finish(from, now).unwrap();
        assert_eq!(settled.slots.allocation(), before);
    }
}
