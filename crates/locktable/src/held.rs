//! A node's record of the locks its own clients hold.

use std::time::Duration;

use crate::lock::{Fence, Lock, LockId, NodeId};
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
}

/// A lock recorded in a [`Held`], borrowed where it is kept.
#[derive(Debug, Clone, Copy)]
pub struct HeldLock<'a> {
    slot: &'a Slot,
}

impl<'a> HeldLock<'a> {
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

    /// Time left on the lease at `now`.
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
                self.locks.insert(Slot::new(&lock));
            }
        }
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
        self.locks.remove(at).map(|slot| slot.to_lock())
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
        let gone = ended
            .into_iter()
            .filter_map(|at| self.locks.remove(at))
            .map(|slot| slot.to_lock())
            .collect();
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
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn t(secs: u64) -> MonoTime {
        MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(secs)
    }

    fn lock(id: u128, name: &str, expires: MonoTime) -> Lock {
        Lock {
            name: name.into(),
            id: LockId::from_u128(id),
            node: 3,
            holder: format!("holder-{id}"),
            fence: Fence::new(2, id as u64),
            lease: 10 * SEC,
            acquired: t(0),
            expires,
            data: (id % 2 == 0).then(|| format!("data-{id}")),
            data_rev: 0,
        }
    }

    #[test]
    fn records_are_found_by_id_and_give_back_the_lock_recorded() {
        let mut held = Held::new();
        let (a, b, twin) = (
            lock(1, "a", t(10)),
            lock(2, "b", t(20)),
            lock(3, "a", t(30)),
        );
        for l in [&a, &b, &twin] {
            held.record(l.clone());
        }
        assert_eq!(held.len(), 3);
        assert_eq!(held.get(a.id), Some(a.clone()));
        assert!(held.contains(b.id) && !held.contains(LockId::from_u128(9)));
        let mut named: Vec<Lock> = held.named("a").collect();
        named.sort_by_key(|l| l.id);
        assert_eq!(named, vec![a.clone(), twin.clone()], "two grants of a name");

        // A newer view of a recorded lock replaces it.
        let mut newer = a.clone();
        newer.expires = t(40);
        newer.node = 1;
        held.record(newer.clone());
        assert_eq!((held.len(), held.get(a.id)), (3, Some(newer.clone())));
        // An older view arriving late (a delayed copy or answer) never
        // shortens the record.
        held.record(a.clone());
        assert_eq!(held.get(a.id), Some(newer));

        assert_eq!(held.remove(b.id), Some(b.clone()));
        assert_eq!(held.remove(b.id), None);
        assert!(!held.renewed(b.id, SEC, t(1)));
        // The freed slot is reused, and every record still found.
        let c = lock(4, "c", t(50));
        held.record(c.clone());
        assert_eq!(held.len(), 3);
        for l in [&twin, &c] {
            assert_eq!(held.get(l.id).as_ref(), Some(l));
        }
    }

    #[test]
    fn live_records_are_read_in_place_as_they_are_kept() {
        let mut held = Held::new();
        let (a, b) = (lock(1, "a", t(10)), lock(2, "b", t(20)));
        held.record(a.clone());
        held.record(b.clone());
        let at = t(15);
        let live: Vec<HeldLock<'_>> = held.iter_live(at).collect();
        assert_eq!(live.len(), 1);
        let l = live[0];
        assert_eq!(
            (l.name(), l.id(), l.node(), l.holder(), l.fence(), l.data()),
            ("b", b.id, 3, "holder-2", b.fence, Some("data-2"))
        );
        assert_eq!(
            (l.lease(), l.ttl(at), l.held_for(at)),
            (10 * SEC, 5 * SEC, 15 * SEC)
        );
        assert_eq!(l.to_lock(), b);
        assert_eq!(held.live(at), vec![b]);
    }

    #[test]
    fn expiry_drops_ended_records_even_after_a_renewal_shortened_one() {
        let mut held = Held::new();
        let (a, b) = (lock(1, "a", t(10)), lock(2, "b", t(20)));
        held.record(a.clone());
        held.record(b.clone());
        assert!(held.expire(t(9)).is_empty());
        assert_eq!(held.expire(t(10)), vec![a.clone()]);
        assert_eq!(held.len(), 1);

        // b renewed for 1 s at 11 s: it now ends before its first end.
        assert!(held.renewed(b.id, SEC, t(11)));
        assert_eq!(held.get(b.id).unwrap().expires, t(12));
        let gone = held.expire(t(12));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].id, b.id);
        assert!(held.is_empty());
        assert!(held.expire(t(100)).is_empty());

        // A record ending earlier than every other is noticed too.
        held.record(lock(3, "c", t(200)));
        held.record(lock(4, "d", t(150)));
        assert!(held.expire(t(149)).is_empty());
        assert_eq!(held.expire(t(150)).len(), 1);
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn many_records_stay_found_as_the_index_grows_and_shrinks() {
        let mut held = Held::new();
        for i in 0..20_000u128 {
            held.record(lock(i, &format!("n{}", i % 7_000), t(10 + (i % 50) as u64)));
        }
        for i in (0..20_000u128).step_by(3) {
            assert!(held.remove(LockId::from_u128(i)).is_some());
        }
        for i in 0..20_000u128 {
            assert_eq!(held.contains(LockId::from_u128(i)), i % 3 != 0, "{i}");
        }
        assert_eq!(held.expire(t(35)).len(), held_ending_by(35));
        assert!(held.iter_live(t(35)).all(|l| l.ttl(t(35)) > Duration::ZERO));
    }

    /// How many of the records left by the test above end by `secs`.
    fn held_ending_by(secs: u64) -> usize {
        (0..20_000u128)
            .filter(|i| i % 3 != 0 && 10 + (i % 50) as u64 <= secs)
            .count()
    }

    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::HashMap;

        #[derive(Debug, Clone)]
        enum Op {
            Record { id: u8, ends: u8 },
            Renewed { id: u8, lease: u8, at: u8 },
            Remove { id: u8 },
            Expire { at: u8 },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0..16u8, 0..60u8).prop_map(|(id, ends)| Op::Record { id, ends }),
                (0..16u8, 1..20u8, 0..60u8).prop_map(|(id, lease, at)| Op::Renewed {
                    id,
                    lease,
                    at
                }),
                (0..16u8).prop_map(|id| Op::Remove { id }),
                (0..60u8).prop_map(|at| Op::Expire { at }),
            ]
        }

        proptest! {
            /// `Held` answers as the map of id to lock it replaced.
            #[test]
            fn held_answers_as_a_map_of_ids_to_locks(ops in proptest::collection::vec(op(), 1..200)) {
                let mut held = Held::new();
                let mut model: HashMap<LockId, Lock> = HashMap::new();
                for op in ops {
                    match op {
                        Op::Record { id, ends } => {
                            // One id is one grant: always of one name.
                            let l = lock(u128::from(id), &format!("n{}", id % 4), t(u64::from(ends)));
                            // A later view replaces the record; an earlier
                            // one never shortens it.
                            match model.get_mut(&l.id) {
                                Some(old) if old.expires >= l.expires => {
                                    old.acquired = old.acquired.min(l.acquired);
                                }
                                Some(old) => {
                                    let acquired = old.acquired.min(l.acquired);
                                    *old = l.clone();
                                    old.acquired = acquired;
                                }
                                None => {
                                    model.insert(l.id, l.clone());
                                }
                            }
                            held.record(l);
                        }
                        Op::Renewed { id, lease, at } => {
                            let id = LockId::from_u128(u128::from(id));
                            let lease = Duration::from_secs(u64::from(lease));
                            let sent = t(u64::from(at));
                            let was = model.get_mut(&id).map(|l| {
                                l.lease = lease;
                                l.expires = sent + lease;
                            });
                            prop_assert_eq!(held.renewed(id, lease, sent), was.is_some());
                        }
                        Op::Remove { id } => {
                            let id = LockId::from_u128(u128::from(id));
                            prop_assert_eq!(held.remove(id), model.remove(&id));
                        }
                        Op::Expire { at } => {
                            let now = t(u64::from(at));
                            let mut gone = held.expire(now);
                            let mut want: Vec<Lock> = model.values().filter(|l| !l.is_live(now)).cloned().collect();
                            model.retain(|_, l| l.is_live(now));
                            gone.sort_by_key(|l| l.id);
                            want.sort_by_key(|l| l.id);
                            prop_assert_eq!(gone, want);
                        }
                    }
                    prop_assert_eq!(held.len(), model.len());
                    for (id, l) in &model {
                        prop_assert_eq!(held.get(*id), Some(l.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod data_tests {
    use super::*;

    fn t(secs: u64) -> MonoTime {
        MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(secs)
    }

    fn record(data: &str, rev: u32, expires: MonoTime) -> Lock {
        Lock {
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
