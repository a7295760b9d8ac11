//! A node's record of the locks its own clients hold.

use std::time::Duration;

use crate::lock::{Fence, Kind, Lock, LockId, NodeId};
use crate::session::SessionIndex;
use crate::slots::{ById, Slot, Slots};
use crate::time::MonoTime;

/// The locks the clients of a node hold, which is what a node taking the
/// speaking over rebuilds its table from.
///
/// Each lease is counted on this node's clock from the moment the node sent
/// the request that won or renewed it, so this record ends no later than the
/// speaker's.
///
/// A record costs what a lock in the table costs: one 80-byte slot whose
/// name, holder and data share one allocation, found by id through a hash
/// table of slot numbers.
#[derive(Debug, Default, Clone)]
pub struct Held {
    locks: Slots<ById>,
    /// No record's lease ends before this (it may be earlier than the
    /// earliest end, never later): `expire` looks at the records only once
    /// it has passed.
    first_end: Option<MonoTime>,
    /// The locks of each session recorded.
    sessions: SessionIndex,
}

/// A lock recorded in a [`Held`], borrowed where it is kept.
#[derive(Debug, Clone, Copy)]
pub struct HeldLock<'a> {
    slot: &'a Slot,
}

impl<'a> HeldLock<'a> {
    /// What the grant holds of its name.
    pub fn kind(&self) -> Kind {
        self.slot.kind()
    }

    /// The name locked.
    pub fn name(&self) -> &'a str {
        self.slot.name()
    }

    /// The grant's id.
    pub fn id(&self) -> LockId {
        self.slot.id
    }

    /// The node whose client holds it.
    pub fn node(&self) -> NodeId {
        self.slot.node
    }

    /// Who holds it.
    pub fn holder(&self) -> &'a str {
        self.slot.holder()
    }

    /// The grant's fencing token.
    pub fn fence(&self) -> Fence {
        self.slot.fence
    }

    /// The lease last granted or renewed.
    pub fn lease(&self) -> Duration {
        self.slot.lease()
    }

    /// The grant's lock-delay ([`Lock::delay`]).
    pub fn delay(&self) -> Duration {
        self.slot.delay()
    }

    /// Time left on the record at `now` ([`Lock::ttl`]).
    pub fn ttl(&self, now: MonoTime) -> Duration {
        self.slot.expires.saturating_duration_since(now)
    }

    /// How long the lock has been held at `now`.
    pub fn held_for(&self, now: MonoTime) -> Duration {
        now.saturating_duration_since(self.slot.acquired)
    }

    /// Data kept with the lock.
    pub fn data(&self) -> Option<&'a str> {
        self.slot.data()
    }

    /// The data's revision ([`Lock::data_rev`]).
    pub fn data_rev(&self) -> u32 {
        self.slot.data_rev()
    }

    /// The session it hangs off ([`Lock::session`]).
    pub fn session(&self) -> Option<LockId> {
        self.slot.session()
    }

    /// The lock, copied out.
    pub fn to_lock(&self) -> Lock {
        self.slot.to_lock()
    }
}

impl Held {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that a lease ends at `end`.
    fn ends_at(&mut self, end: MonoTime) {
        self.first_end = Some(self.first_end.map_or(end, |first| first.min(end)));
    }

    /// Records a lock a client of this node was granted, or a later view
    /// of one already recorded. A record never ends sooner than it did:
    /// views can arrive out of order (a late answer, a delayed copy), and
    /// a record that ends early could let a rebuild free a name its holder
    /// still holds.
    pub fn record(&mut self, lock: Lock) {
        self.ends_at(lock.expires);
        match self.locks.find(&lock.id) {
            Some(at) => self.locks.get_mut(at).expect("found").merge(&lock),
            None => {
                if let Some(session) = lock.session {
                    self.sessions.add(session, lock.id);
                }
                self.locks.insert(Slot::new(&lock));
            }
        }
    }

    /// Restarts the record of the session `id`'s lease, `lease` long from
    /// `sent`, and gives every lock recorded as hanging off it the same
    /// end. Says whether the session was recorded.
    pub fn renewed_session(&mut self, id: LockId, lease: Duration, sent: MonoTime) -> bool {
        if !self.renewed(id, lease, sent) {
            return false;
        }
        self.follow_session(id);
        true
    }

    /// Records `session`, a session's grant (renewed), as [`Held::record`]
    /// does, and gives every lock recorded as hanging off it the session's
    /// recorded end.
    pub fn record_session(&mut self, session: Lock) {
        let id = session.id;
        self.record(session);
        self.follow_session(id);
    }

    /// Records `session`, a view of a session's grant (a copy of it), as
    /// [`Held::record`] does, and gives every lock recorded as hanging off
    /// it at least the end of this view, never that of the session's
    /// record: an earlier view (an earlier term's copy, before a shorter
    /// renewal) may leave the record later than anything this view's sender
    /// noted, and a lock renewed past its sender's notes would miss its
    /// release and come back at a rebuild.
    pub fn record_session_view(&mut self, session: Lock) {
        let id = session.id;
        let view = session.clone();
        self.record(session);
        for lock in self.sessions.of(id) {
            if let Some(slot) = self.locks.find(&lock).and_then(|at| self.locks.get_mut(at)) {
                slot.follow_if_later(&view);
            }
        }
    }

    /// Gives every lock recorded as hanging off the session `id` the end of
    /// the session's record.
    fn follow_session(&mut self, id: LockId) {
        let Some(session) = self.get(id) else {
            return;
        };
        for lock in self.sessions.of(id) {
            if let Some(slot) = self.locks.find(&lock).and_then(|at| self.locks.get_mut(at)) {
                slot.follow(&session);
            }
        }
    }

    /// The digest of the ids of the locks recorded as hanging off the
    /// session `id` ([`crate::session::digest`]).
    pub fn session_digest(&self, id: LockId) -> u128 {
        self.sessions.summary(id).1
    }

    /// How many locks are recorded as hanging off the session `id`.
    pub fn session_count(&self, id: LockId) -> usize {
        self.sessions.summary(id).0
    }

    /// The ids of the locks recorded as hanging off the session `id`, in
    /// id order (the same in every process: a simulation's seed replays).
    pub fn session_locks(&self, id: LockId) -> Vec<LockId> {
        let mut ids: Vec<LockId> = self.sessions.of(id).collect();
        ids.sort_unstable();
        ids
    }

    /// Restarts the record of `id`'s lease: `lease` long, counted from
    /// `sent`, the instant the renewal was sent. Says whether it was held.
    pub fn renewed(&mut self, id: LockId, lease: Duration, sent: MonoTime) -> bool {
        let Some(at) = self.locks.find(&id) else {
            return false;
        };
        let slot = self.locks.get_mut(at).expect("found");
        slot.restart(lease, sent);
        let end = slot.expires;
        self.ends_at(end);
        true
    }

    /// Drops the record of `id` (released, or lost to a conflict).
    pub fn remove(&mut self, id: LockId) -> Option<Lock> {
        let at = self.locks.find(&id)?;
        let lock = self.locks.remove(at)?.to_lock();
        if let Some(session) = lock.session {
            self.sessions.remove(session, id);
        }
        Some(lock)
    }

    /// The record of `id`, copied out.
    pub fn get(&self, id: LockId) -> Option<Lock> {
        self.locks
            .find(&id)
            .and_then(|at| self.locks.get(at))
            .map(Slot::to_lock)
    }

    /// Whether `id` is recorded.
    pub fn contains(&self, id: LockId) -> bool {
        self.locks.find(&id).is_some()
    }

    /// The records of locks named `name` (more than one only while a
    /// conflict between speakers is unsettled).
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Lock> + 'a {
        self.locks
            .iter()
            .filter(move |s| s.name() == name)
            .map(Slot::to_lock)
    }

    /// The locks whose lease still runs at `now`, borrowed: this node's
    /// report to a rebuild, read where it is kept.
    pub fn iter_live(&self, now: MonoTime) -> impl Iterator<Item = HeldLock<'_>> + '_ {
        self.locks
            .iter()
            .filter(move |s| s.is_live(now))
            .map(|slot| HeldLock { slot })
    }

    /// The locks whose lease still runs at `now`: this node's report to a
    /// rebuild.
    pub fn live(&self, now: MonoTime) -> Vec<Lock> {
        self.iter_live(now).map(|l| l.to_lock()).collect()
    }

    /// Drops the records whose lease ended by `now`, and returns them. Looks
    /// at the records only once the earliest lease end noted has passed.
    pub fn expire(&mut self, now: MonoTime) -> Vec<Lock> {
        if self.first_end.is_none_or(|first| now < first) {
            return Vec::new();
        }
        let ended: Vec<u32> = self
            .locks
            .numbered()
            .filter(|(_, s)| !s.is_live(now))
            .map(|(at, _)| at)
            .collect();
        let gone: Vec<Lock> = ended
            .into_iter()
            .filter_map(|at| self.locks.remove(at))
            .map(|slot| slot.to_lock())
            .collect();
        for lock in &gone {
            if let Some(session) = lock.session {
                self.sessions.remove(session, lock.id);
            }
        }
        self.first_end = self.locks.iter().map(|s| s.expires).min();
        gone
    }

    /// How many locks are recorded.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether no lock is recorded.
    pub fn is_empty(&self) -> bool {
        self.locks.len() == 0
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod data_tests {
    use super::*;

    fn t(secs: u64) -> MonoTime {
        MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(secs)
    }

    fn record(data: &str, rev: u32, expires: MonoTime) -> Lock {
        Lock {
            session: Default::default(),
            delay: Default::default(),
            kind: Default::default(),
            name: "leader".into(),
            id: LockId::from_u128(7),
            node: 2,
            holder: "h".into(),
            fence: crate::Fence::new(1, 1),
            lease: Duration::from_secs(10),
            acquired: t(0),
            expires,
            data: Some(data.into()),
            data_rev: rev,
        }
    }

    /// Records of one grant, in either order: the higher revision's data,
    /// and of equal revisions the later renewal's (a speaker of protocol 1
    /// changes data at revision 0), with the latest lease end.
    #[test]
    fn the_newer_data_is_kept_whichever_record_comes_first() {
        let cases = [
            (record("old", 0, t(20)), record("new", 1, t(5)), "new"),
            (record("old", 0, t(5)), record("new", 0, t(20)), "new"),
            (record("old", 2, t(5)), record("new", 2, t(20)), "new"),
        ];
        for (a, b, want) in cases {
            for (first, second) in [(&a, &b), (&b, &a)] {
                let mut held = Held::new();
                held.record(first.clone());
                held.record(second.clone());
                let kept = held.get(LockId::from_u128(7)).unwrap();
                assert_eq!(
                    kept.data.as_deref(),
                    Some(want),
                    "{first:?} then {second:?}"
                );
                assert_eq!(kept.expires, t(20));
                assert_eq!(kept.data_rev, a.data_rev.max(b.data_rev));
            }
        }
    }
}
