use super::*;

const SEC: Duration = Duration::from_secs(1);

fn t(secs: u64) -> MonoTime {
    MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(secs)
}

fn lock(id: u128, name: &str, expires: MonoTime) -> Lock {
    Lock {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
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
            (0..16u8, 1..20u8, 0..60u8).prop_map(|(id, lease, at)| Op::Renewed { id, lease, at }),
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
