//! Taking back a lock a rebuild missed, from its holder's node's record.

use crate::error::{LockError, NotRebuilt};
use crate::lock::{Fence, Lock};
use crate::time::{LeaseRule, MonoTime};

use super::Table;

impl Table {
    /// Takes back into the table a lock its holder's node still has but
    /// this table lacks (the node was missing at the rebuild). The lock is
    /// kept with its id, fence and lease if the id was not released, the
    /// lease still runs and it fits beside the name's holders (the name is
    /// free, or held shared or as permits of its kind with one to spare,
    /// and nobody waits for it as another family) and, a lock of a
    /// session, its session is held here (its end then at most the
    /// session's); otherwise the reclaimed lock is lost. The queue is not served first: the lock was held
    /// before anyone in it asked. A grant the table has already (from an
    /// older record) takes the record's lease if it ends later, as a
    /// rebuild that read both records would have kept it: its lease may
    /// have run out here while the record's still runs.
    pub fn reclaim(&mut self, lock: Lock, now: MonoTime) -> Result<Lock, LockError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.expire_name(&lock.name, now);
        if self.forgotten.contains(lock.id, now) || !lock.is_live(now) {
            return Err(LockError::NotHeld);
        }
        if let Some(at) = self.slots.find(&lock.id) {
            if self.slots.get(at).expect("found").name() != lock.name {
                return Err(LockError::NotHeld);
            }
            // The table has this grant already, from an older record of it
            // (a rebuild that missed the members on record of a later
            // renewal): the record's later lease counts, as a rebuild that
            // read both would have settled it. The grant keeps its place
            // among the name's holders, so nothing else changes. Only a
            // record of the same grant (same fence): an id granted again
            // after its first grant ended unreleased is another grant.
            let same_grant = self.slots.get(at).expect("found").fence == lock.fence;
            if let Some(lock) = self.reclaimed_lease(lock, now).ok().filter(|_| same_grant) {
                self.slots.get_mut(at).expect("found").merge(&lock);
            }
            return Ok(self.slots.get(at).expect("found").to_lock());
        }
        let name = lock.name.clone();
        let dropped = self.drop_superseded(&lock, now);
        let kept = self.keep_reclaimed(lock, now);
        // Holders went: the queue is served as after any release (the name
        // may be free, or fit a waiter beside the lock kept).
        if dropped {
            self.hand_over(&name, None, now);
        }
        kept
    }

    /// Puts a record to be taken back in the table if it fits beside the
    /// name's holders and waiters.
    fn keep_reclaimed(&mut self, lock: Lock, now: MonoTime) -> Result<Lock, LockError> {
        let fits = self.fits(&lock.name, lock.kind) || self.fits_past_count(&lock);
        if !fits || !self.queue_admits(&lock.name, lock.kind) {
            return Err(LockError::NotHeld);
        }
        let lock = self.reclaimed_lease(lock, now)?;
        self.insert(&lock);
        Ok(lock)
    }

    /// Takes out the holders of `lock`'s name that its grant supersedes:
    /// of its own term, granted before it (a lower fence), and not to be
    /// held beside it. One speaker grants a name again only once every
    /// grant it cannot be held beside has ended, so each such holder is a
    /// stale record (a copy, or a `Held` its release had not reached) that
    /// the rebuild read without the later grant; a rebuild reading both
    /// keeps the later ([`crate::settle`]'s rule for one term). Each one
    /// taken out is kept from later take-backs, as a released id is.
    /// Answers whether any was.
    fn drop_superseded(&mut self, lock: &Lock, now: MonoTime) -> bool {
        if !self.of_an_earlier_term(lock) {
            return false;
        }
        let stale: Vec<u32> = self
            .slots
            .of_name(&lock.name)
            .filter(|&at| {
                let held = self.slots.get(at).expect("of the name");
                held.id != lock.id
                    && held.fence.epoch() == lock.fence.epoch()
                    && held.fence < lock.fence
                    && !lock.kind.compatible(held.kind())
            })
            .collect();
        let dropped = !stale.is_empty();
        for at in stale {
            let gone = self.remove(at);
            let until = gone.expires.max(now) + Self::FORGET_MARGIN;
            self.forgotten.insert(gone.id, until, now);
        }
        dropped
    }

    /// Whether `lock` may join its name's holders past the name's count:
    /// every holder may be held beside it and is of its own term, or of an
    /// earlier one if its term saw every grant before it ([`Fence::seen_all`]:
    /// it counted them). One table never held more than the permits, so
    /// such a record past the count holds a record left behind (a release
    /// a copy missed), which nothing tells from the live ones; as a rebuild
    /// keeps them all ([`crate::settle`]), the name grants nothing until
    /// enough leases end.
    fn fits_past_count(&self, lock: &Lock) -> bool {
        let term = lock.fence.epoch();
        self.of_an_earlier_term(lock)
            && self.slots.of_name(&lock.name).all(|at| {
                let held = self.slots.get(at).expect("of the name");
                let counted_by_its_term = held.fence.epoch() == term
                    || (lock.fence.seen_all() && held.fence.epoch() < term);
                lock.kind.compatible(held.kind()) && counted_by_its_term
            })
    }

    /// Whether `lock` was granted in a term before this table's: a record
    /// of this table's own term that the table lacks has ended here (the
    /// table knows its own grants), and makes no room for itself.
    fn of_an_earlier_term(&self, lock: &Lock) -> bool {
        lock.fence.epoch() < Fence(self.fences.next).epoch()
    }

    /// A record to be taken back, its lease cut as the table keeps it: a
    /// lock of a session is kept only beside its session (taken back
    /// first), and ends with it: no renewal of its own would keep it, nor
    /// would a session that is not here end it. No lease runs longer than
    /// the longest from `now`.
    fn reclaimed_lease(&self, mut lock: Lock, now: MonoTime) -> Result<Lock, LockError> {
        if let Some(session) = lock.session {
            let session = self
                .live_session(session, now)
                .map_err(|_| LockError::NotHeld)?;
            lock.expires = lock.expires.min(session.lease_ends() + lock.delay);
        }
        lock.expires = lock.expires.min(now + LeaseRule::LONGEST);
        Ok(lock)
    }
}
