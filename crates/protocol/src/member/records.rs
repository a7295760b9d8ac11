//! A member's own records: its clients' locks granted or renewed through the
//! speaker (`Held`), the copies it keeps, and its report to a rebuilding
//! speaker.

use std::time::Duration;

use locktable::{HeldLock, Lock, LockId, LockInTransit, MonoTime};

use crate::guard::Guard;
use crate::refusal::Refusal;

use super::{Forwarded, Member, SessionLocks};

impl Member {
    /// Records in this member's `Held` a lock its client was granted (or
    /// renewed) through the speaker, unless a newer speaker read this
    /// member since `read_before` (the term that had read it when the call
    /// left): that rebuild did not see this record, so its client must not
    /// hear of the grant (a newer speaker may grant the name again).
    fn record_held(&mut self, lock: Lock, read_before: u64) -> Result<(), Refusal> {
        if self.stopping {
            return Err(Refusal::Stopping);
        }
        if self.read_by > read_before {
            return Err(Refusal::ReadMeanwhile { read: self.read_by });
        }
        self.copies.remove(lock.id);
        self.held.record(lock);
        Ok(())
    }

    /// A grant the speaker answered to a call this member forwarded: its
    /// lease counted from the call's send plus the time the speaker says
    /// it held the request (`served`, a wait; the speaker received it no
    /// earlier than it was sent), never from the answer's arrival at
    /// `_arrived`. Recorded in `Held` unless a newer speaker read this
    /// member meanwhile; a grant's fence names the term that made it, and a
    /// read by that term (the speaker's own rebuild) came before the grant.
    pub fn granted_through_speaker(
        &mut self,
        call: Forwarded,
        lock: LockInTransit,
        served: Duration,
        arrived: MonoTime,
    ) -> Result<Lock, Refusal> {
        // Released before its answer came (a session closed meanwhile, or
        // a take-back): its record would outlive the release.
        if self.table.is_forgotten(lock.id, arrived) {
            return Err(match lock.session {
                Some(_) => Refusal::NoSession,
                None => Refusal::NotHeld,
            });
        }
        let lock = lock.arrive(call.sent + served);
        let read_before = call.read_before.max(lock.fence.epoch());
        self.record_held(lock.clone(), read_before)?;
        Ok(lock)
    }

    /// A renewal the speaker answered to a call this member forwarded: its
    /// lease counted from the call's send, never from the answer's arrival
    /// at `_arrived` (the speaker renewed it no earlier than it was sent).
    /// Recorded in `Held` unless a newer speaker read this member meanwhile.
    ///
    /// A renewal answered after the lock's release through this member
    /// (the two crossed) is not recorded: the record would outlive the
    /// release and bring the lock back at the next rebuild.
    pub fn renewed_through_speaker(
        &mut self,
        call: Forwarded,
        lock: LockInTransit,
        arrived: MonoTime,
    ) -> Result<Lock, Refusal> {
        if self.table.is_forgotten(lock.id, arrived) {
            return Err(Refusal::NotHeld);
        }
        let lock = lock.arrive(call.sent);
        self.record_held(lock.clone(), call.read_before)?;
        Ok(lock)
    }

    /// The speaker released a lock this member forwarded the release of:
    /// its record goes, and a renewal of it answered later is not
    /// recorded ([`Member::renewed_through_speaker`]).
    pub fn released_through_speaker(&mut self, lock: &Lock, guard: &Guard, now: MonoTime) {
        // As long as any record of it may last: its lease and its delay.
        let left = Some(lock.lease + lock.delay);
        self.forget(&lock.name, lock.id, left, guard, now);
    }

    /// The speaker refused a renewal this member forwarded: a lock "not
    /// held" there is held nowhere, and this member's record of it goes,
    /// unless by this record its lease ran out while its lock-delay still
    /// closes the name (a lapsed grant is "not held", yet its record must
    /// reach the next rebuild until it ends).
    pub fn renewal_refused(&mut self, id: LockId, refusal: &Refusal, now: MonoTime) {
        if *refusal != Refusal::NotHeld {
            return;
        }
        // Lapsed by any of this member's records: a copy counts its lease
        // from its arrival, later than the speaker's count, and the later
        // record alone may not show the lapse the refusal answers.
        let lapsed = [self.held.get(id), self.copies.get(id)]
            .into_iter()
            .flatten()
            .any(|l| l.is_lapsed(now));
        let closing = lapsed && self.held_record(id).is_some_and(|l| l.is_live(now));
        if !closing {
            self.drop_held(id);
        }
    }

    /// This member's record of `id`: its client's, or a copy.
    pub fn held_record(&self, id: LockId) -> Option<Lock> {
        // A member may keep both (a `Held` from before the lock moved away,
        // a copy of a later renewal): the one whose lease ends last, with
        // the newer data of the two.
        match (self.held.get(id), self.copies.get(id)) {
            (Some(held), Some(copy)) => {
                let (mut record, other) = match copy.expires > held.expires {
                    true => (copy, held),
                    false => (held, copy),
                };
                if locktable::newer_data(
                    (other.data_rev, other.expires),
                    (record.data_rev, record.expires),
                ) {
                    record.data = other.data;
                    record.data_rev = other.data_rev;
                }
                Some(record)
            }
            (held, copy) => held.or(copy),
        }
    }

    /// Drops this member's record of `id`.
    pub fn drop_held(&mut self, id: LockId) {
        self.held.remove(id);
        self.copies.remove(id);
    }

    /// A release heard of from the speaker, with the time the released
    /// lease had left when it was sent (counted from now, after the send,
    /// so no record of the lease outlives it; a sender too old to say: the
    /// longest lease): the lock is gone everywhere. A table that may not
    /// speak at `now` (deposed, or its guard ran out) grants nothing from
    /// it: its waiters are told to retry, as [`Member::poll`] tells them,
    /// before a set leaving the name's queue could let another name's
    /// queue be served.
    pub fn forget(
        &mut self,
        name: &str,
        id: LockId,
        left: Option<Duration>,
        guard: &Guard,
        now: MonoTime,
    ) {
        let left = left.unwrap_or(self.config.lease.max);
        self.held.remove(id);
        self.copies.remove(id);
        self.grant_nothing_unless_speaking(guard, now);
        self.table.forget(name, id, left, now);
    }

    /// Turns the table's waiters away if this member may not speak at
    /// `now`: what a table change is about to hand on, it hands to nobody.
    pub(crate) fn grant_nothing_unless_speaking(&mut self, guard: &Guard, now: MonoTime) {
        if self.table.waiting() > 0 && !self.may_speak(guard, now) {
            self.table.turn_away_waiters();
        }
    }

    /// Locks a rebuild found another grant held longer: their clients lost
    /// them. Answers the ones this member's clients held.
    pub fn lost(&mut self, ids: impl IntoIterator<Item = LockId>) -> Vec<Lock> {
        ids.into_iter()
            .filter_map(|id| {
                self.copies.remove(id);
                self.held.remove(id)
            })
            .collect()
    }

    /// Keeps copies sent by the speaker of `term` (leases counted from
    /// their arrival), unless this member has seen a newer term (`seen`,
    /// Raft's) or been read by one: a copy is either in the report a newer
    /// speaker reads, or refused. A copy that arrives after its release was
    /// heard of stays released. A member that is stopping takes none (the
    /// speaker copies to another).
    pub fn take_copies(
        &mut self,
        term: u64,
        locks: Vec<Lock>,
        seen: u64,
        now: MonoTime,
    ) -> Result<(), Refusal> {
        self.copies_taken(term, seen)?;
        for lock in locks {
            if !self.table.is_forgotten(lock.id, now) {
                self.copies.record(lock);
            }
        }
        Ok(())
    }

    /// Keeps the copy of a session's grant sent by the speaker of `term`,
    /// and renews this member's copies of every lock of the session to this
    /// copy's end (never to a later end this member's record of the session
    /// has from an earlier copy: the speaker noted this one), if it keeps
    /// exactly the locks the speaker noted
    /// (`locks`: their count and digest): answers whether it did. If it
    /// keeps others, nothing is kept (`false`): the speaker sends the
    /// session's grant and every lock of it as copies instead. Refused as
    /// [`Member::take_copies`] is; a session whose release was heard of
    /// stays released (`true`: nothing more to send).
    pub fn take_session_copy(
        &mut self,
        term: u64,
        session: Lock,
        locks: SessionLocks,
        seen: u64,
        now: MonoTime,
    ) -> Result<bool, Refusal> {
        self.copies_taken(term, seen)?;
        if self.table.is_forgotten(session.id, now) {
            return Ok(true);
        }
        let kept = SessionLocks {
            count: self.copies.session_count(session.id),
            digest: self.copies.session_digest(session.id),
        };
        if kept != locks {
            return Ok(false);
        }
        self.copies.record_session_view(session);
        Ok(true)
    }

    /// Refuses copies from the speaker of `term` if this member is stopping
    /// or has seen a newer term (`seen`, Raft's) or been read by one.
    fn copies_taken(&self, term: u64, seen: u64) -> Result<(), Refusal> {
        if self.stopping {
            return Err(Refusal::Stopping);
        }
        let seen = seen.max(self.read_by);
        if term < seen {
            return Err(Refusal::StaleCopies { term, seen });
        }
        Ok(())
    }

    /// This member's report, as a rebuilding speaker reads it: its clients'
    /// locks and copies live at `now`, and what it granted.
    pub fn report(&self, now: MonoTime) -> (impl Iterator<Item = HeldLock<'_>>, Vec<Lock>) {
        let held = self.held.iter_live(now).chain(self.copies.iter_live(now));
        (held, self.table.granted(now))
    }

    /// How many locks [`Member::report`] answers at most (ended leases
    /// included), counted without going through them.
    pub fn report_len(&self) -> usize {
        self.held.len() + self.copies.len() + self.table.granted_len()
    }

    /// [`Member::report`] as locks, for a speaker reading itself.
    pub fn own_report(&self, now: MonoTime) -> Vec<Lock> {
        let mut locks = self.held.live(now);
        locks.extend(self.copies.live(now));
        locks.extend(self.table.granted(now));
        locks
    }
}
