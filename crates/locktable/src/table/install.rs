//! A rebuild put in place: the reports settled apart from the table
//! ([`RebuildBasis`], [`Settled`]) installed, the releases heard meanwhile
//! applied, and the fences of the term set.

use std::cmp::Reverse;

use super::{FenceCounter, Rebuilt, Table};
use crate::error::{RebuildError, StaleGeneration};
use crate::lock::{Fence, Lock};
use crate::rebuild::{RebuildBasis, RebuildFrom, Settled};
use crate::slots::Slot;
use crate::time::MonoTime;

impl Table {
    /// Replaces the locks of the table with the ones the nodes say their
    /// clients hold and the ones they granted, and marks it rebuilt. Changes
    /// nothing when the table was dropped since `from.generation`.
    ///
    /// Two nodes saying they hold the same lock is a lock two speakers
    /// granted apart, which only the end of one of the leases settles: the
    /// one held the longest is kept, and the other is still held by its
    /// client, which is returned.
    pub fn rebuild(&mut self, from: RebuildFrom, now: MonoTime) -> Result<Rebuilt, RebuildError> {
        let settled = self.begin_rebuild().settle(from, now)?;
        self.install(settled, now)
    }

    /// What a rebuild settled apart from the table needs of it
    /// ([`RebuildBasis::settle`]); the releases heard from now on are kept
    /// for [`Table::install`] to apply.
    pub fn begin_rebuild(&mut self) -> RebuildBasis {
        self.forgets_since_basis = Some(Vec::new());
        RebuildBasis {
            generation: self.generation,
            forgotten: self.forgotten.until().clone(),
        }
    }

    /// Puts a rebuild settled apart in place, as [`Table::rebuild`] would
    /// have rebuilt the table from its reports: unless the table was dropped
    /// since the basis was taken, or the term's fences already say a
    /// rebuild saw every grant and this one did not. A lock released since
    /// the basis was taken is left out.
    pub fn install(&mut self, settled: Settled, now: MonoTime) -> Result<Rebuilt, RebuildError> {
        let Settled {
            from_generation,
            epoch,
            highest,
            slots,
            expiries,
            lost,
            hold_new_grants_until,
            seen_all,
        } = settled;
        if from_generation != self.generation {
            return Err(StaleGeneration {
                asked: from_generation,
                current: self.generation,
            }
            .into());
        }
        // A term's later fences carry the bit once one did: a rebuild that
        // missed grants cannot go on counting in it, unless it holds new
        // grants back until every grant it missed has ended (strict mode).
        let issued = Fence(highest.0.max(self.fences.next));
        let held_back = hold_new_grants_until.is_some_and(|until| now < until);
        if !seen_all && !held_back && issued.epoch() == epoch && issued.seen_all() {
            return Err(RebuildError::SeenAllSpent(epoch));
        }
        self.slots = slots;
        self.expiries = expiries;
        let mut lost = lost;
        let mut freed: Vec<Box<str>> = Vec::new();
        for (name, id) in self.forgets_since_basis.take().unwrap_or_default() {
            if let Ok(at) = self.find_held(&name, id) {
                self.slots.remove(at);
                freed.push(name);
            }
        }
        // A grant that lost to one released since the basis lost to
        // nobody: settled again without it, as a rebuild whose basis knew
        // of the release would have.
        if !freed.is_empty() {
            self.settle_freed(freed, &mut lost, now);
        }
        self.index_sessions();
        if self.expiries.len() > 2 * self.slots.len() + 1024 {
            self.reindex_expiries();
        }
        // A loser's other records (copies, a `Held` not dropped yet) must
        // not bring it back once the name is free again.
        for lock in &lost {
            self.forgotten
                .insert(lock.id, lock.expires + Self::FORGET_MARGIN, now);
        }
        let slots = &self.slots;
        self.retained.retain(|id, _| slots.find(id).is_none());
        // Above every fence this table issued too: a table dropped and
        // rebuilt again in the same term (a rebuild retried after a drop)
        // must not hand out a released lock's fence a second time.
        let first = if seen_all { Fence::SEEN_ALL | 1 } else { 1 };
        let base = Fence::new(epoch, first)
            .0
            .max(highest.0.saturating_add(1))
            .max(self.fences.next);
        // Never into the next term's fences: a term that used all of its
        // own answers `FencesExhausted` and hands over.
        self.fences = FenceCounter {
            next: base,
            end: Fence::new(epoch + 1, 0).0,
        };
        self.hold_new_grants_until = hold_new_grants_until;
        self.rebuilt = true;
        Ok(Rebuilt {
            locks: self.slots.len(),
            lost,
        })
    }

    /// Settles again the names `freed` (a holder of each released since
    /// the rebuild's basis was taken) with the grants of them in `lost`
    /// still live and not released: the ones kept leave `lost`.
    fn settle_freed(&mut self, mut freed: Vec<Box<str>>, lost: &mut Vec<Lock>, now: MonoTime) {
        freed.sort_unstable();
        freed.dedup();
        for name in freed {
            let (mut again, rest): (Vec<Lock>, Vec<Lock>) =
                std::mem::take(lost).into_iter().partition(|l| {
                    *l.name == *name && l.is_live(now) && !self.forgotten.contains(l.id, now)
                });
            *lost = rest;
            if again.is_empty() {
                continue;
            }
            let held: Vec<u32> = self.slots.of_name(&name).collect();
            let mut kept_before: Vec<Lock> = held
                .into_iter()
                .map(|at| self.slots.remove(at).expect("held").to_lock())
                .collect();
            kept_before.append(&mut again);
            let (kept, lost_again) = crate::settle::settle_again(kept_before, now);
            for lock in kept {
                let at = self.slots.insert(Slot::new(&lock));
                self.expiries.push(Reverse((lock.expires, lock.fence, at)));
            }
            lost.extend(lost_again);
        }
        lost.sort_unstable_by_key(|l| l.id);
    }
}
