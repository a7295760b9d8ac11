//! The seed's package documentation, sentence by sentence: each test names
//! the sentence it shows.

use std::time::Duration;

use locktable::{
    AcquireError, Acquired, Answer, Fence, Held, LeaseRule, Lock, LockError, LockId, LockInTransit,
    MonoTime, NotRebuilt, RebuildFrom, Table,
};

use crate::common;

use common::*;

// "A lock is granted for a lease, and lapses when the lease ends whatever
// its holder became: a process that died holding one does not hold it
// forever."
#[test]
fn a_lock_lapses_when_its_lease_ends() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    assert_eq!(lock.expires, t(10));
    assert!(
        matches!(table.acquire(req("a", 2, 1), t(9)), Err(AcquireError::Held(h)) if h.id == lock.id)
    );
    // Nobody released it; at the lease end it is free.
    assert_eq!(table.expired(), 0);
    table.poll(t(10));
    assert_eq!(table.expired(), 1, "the poll that ended it counts it");
    table.poll(t(11));
    assert_eq!(table.expired(), 1, "once");
    assert!(table.is_empty());
    assert_eq!(table.get("a", t(10)).unwrap(), None);
    granted(table.acquire(req("a", 2, 1), t(10)));
}

#[test]
fn an_expired_lock_is_free_even_before_poll() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(req("a", 1, 1), t(0)));
    assert_eq!(table.get("a", t(10)).unwrap(), None);
    assert!(table.list("", 10, t(10)).unwrap().is_empty());
    granted(table.acquire(req("a", 2, 1), t(11)));
    assert_eq!(
        table.release("a", LockId::from_u128(1), t(11)),
        Err(LockError::NotHeld)
    );
}

// "DefaultLease is the lease of a request naming none." / "MaxLease is the
// longest lease granted."
#[test]
fn the_lease_rule_applies_to_grants_and_renewals() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let mut r = req("a", 1, 1);
    r.lease = None;
    assert_eq!(
        granted(table.acquire(r, t(0))).lease,
        LeaseRule::DEFAULT_LEASE
    );
    let mut r = req("b", 2, 1);
    r.lease = Some(Duration::from_secs(86_400));
    assert_eq!(granted(table.acquire(r, t(0))).lease, LeaseRule::MAX_LEASE);
    let renewed = table
        .renew(
            "a",
            LockId::from_u128(1),
            Some(Duration::from_secs(7200)),
            1,
            t(1),
        )
        .unwrap();
    assert_eq!(renewed.lease, LeaseRule::MAX_LEASE);
    assert_eq!(renewed.expires, t(601));
}

// "A lease is counted on the clock of the node keeping the lock ... The
// nodes pass a lease to one another as the time left, which each adds to
// its own clock, so their clocks need not agree on the time."
#[test]
fn a_lease_travels_as_time_left() {
    let speaker_now = t(100);
    let mut table = rebuilt_table(1, vec![], speaker_now);
    let lock = granted(table.acquire(req("a", 1, 2), speaker_now));
    // Node 2's clock reads something else entirely.
    let sent_at_node2 = MonoTime::from_nanos(5_000_000_000_000);
    let on_wire = lock.in_transit(speaker_now);
    assert_eq!(on_wire.ttl, 10 * SEC);
    let at_node2 = on_wire.arrive(sent_at_node2);
    assert_eq!(at_node2.expires, sent_at_node2 + 10 * SEC);
}

// "The holder is to be done before the lease ends, which it counts on its
// own clock the same way." Counting from the send, the holder's view ends
// first.
#[test]
fn the_holders_view_ends_before_the_speakers() {
    let sent = t(0);
    let mut table = rebuilt_table(1, vec![], t(0));
    // The request takes 2 s to reach the speaker.
    let lock = granted(table.acquire(req("a", 1, 2), t(2)));
    let mut held = Held::new();
    held.record(lock.in_transit(t(2)).arrive(sent));
    let mine = held.get(lock.id).unwrap();
    assert!(mine.expires < lock.expires);
    assert_eq!(mine.expires, t(10));
    assert!(held.renewed(lock.id, 10 * SEC, t(5)));
    assert_eq!(held.get(lock.id).unwrap().expires, t(15));
    assert_eq!(held.expire(t(15)).len(), 1);
    assert!(held.is_empty());
}

// "Acquire grants the lock req names, waiting for as long as req says when
// another holds it, and answers ErrHeld when the wait ends with the lock
// still held."
#[test]
fn acquire_waits_and_answers_held_when_the_wait_ends() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 3 * SEC), t(1)) else {
        panic!("should wait")
    };
    assert_eq!(table.next_deadline(), Some(t(4)));
    table.poll(t(3));
    assert!(table.take_answers().is_empty());
    table.poll(t(4));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, w);
    assert!(matches!(&answers[0].result, Err(AcquireError::Held(h)) if h.id == first.id));
    assert_eq!(table.waiting(), 0);
}

#[test]
fn wait_zero_fails_at_once_with_the_current_lock() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    match table.acquire(req("a", 2, 1), t(0)) {
        Err(AcquireError::Held(current)) => assert_eq!(*current, first),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_release_hands_the_lock_to_the_waiters_first_come_first_served() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    let mut waiters = vec![];
    for id in 2..6 {
        match table.acquire(waiting(req("a", id, 1), 60 * SEC), t(id as u64)) {
            Ok(Acquired::Waiting(w)) => waiters.push((w, id)),
            other => panic!("{other:?}"),
        }
    }
    let mut current = first;
    for (now, (w, id)) in (6..).zip(waiters) {
        let released = table.release("a", current.id, t(now)).unwrap();
        assert_eq!(released.id, current.id);
        let answers = table.take_answers();
        assert_eq!(answers.len(), 1, "exactly the next waiter is answered");
        let Answer { waiter, result, .. } = answers.into_iter().next().unwrap();
        assert_eq!(waiter, w);
        let lock = result.unwrap();
        assert_eq!(lock.id, LockId::from_u128(id));
        assert_eq!(lock.acquired, t(now), "the lease starts at the hand-over");
        assert!(lock.fence > current.fence);
        current = lock;
    }
}

#[test]
fn an_expiry_hands_the_lock_to_the_first_waiter_at_the_lease_end() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(1)) else {
        panic!()
    };
    assert_eq!(table.next_deadline(), Some(t(10)));
    table.poll(t(10));
    let answers = table.take_answers();
    assert_eq!(answers[0].waiter, w);
    assert_eq!(answers[0].result.as_ref().unwrap().acquired, t(10));
}

#[test]
fn a_renewal_postpones_the_expiry() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    let renewed = table.renew("a", lock.id, None, 3, t(8)).unwrap();
    assert_eq!(renewed.expires, t(18));
    assert_eq!(
        renewed.node, 3,
        "a renewal through another node moves the record there"
    );
    assert_eq!(
        renewed.fence, lock.fence,
        "a renewal keeps the grant's fence"
    );
    table.poll(t(10));
    assert_eq!(table.get("a", t(10)).unwrap().unwrap().id, lock.id);
    assert_eq!(table.next_deadline(), Some(t(18)));
    table.poll(t(18));
    assert!(table.is_empty());
}

#[test]
fn release_and_renew_need_the_right_id() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    let wrong = LockId::from_u128(99);
    assert_eq!(table.release("a", wrong, t(1)), Err(LockError::NotHeld));
    assert_eq!(
        table.renew("a", wrong, None, 1, t(1)),
        Err(LockError::NotHeld)
    );
    assert_eq!(table.release("b", lock.id, t(1)), Err(LockError::NotHeld));
    table.release("a", lock.id, t(1)).unwrap();
    // A retried release of the same id does not touch a newer holder.
    let newer = granted(table.acquire(req("a", 2, 1), t(2)));
    assert_eq!(table.release("a", lock.id, t(3)), Err(LockError::NotHeld));
    assert_eq!(table.get("a", t(3)).unwrap().unwrap().id, newer.id);
}

#[test]
fn list_filters_by_prefix_sorts_and_limits() {
    let mut table = rebuilt_table(1, vec![], t(0));
    for (i, name) in ["jobs/3", "jobs/1", "other", "jobs/2"].iter().enumerate() {
        granted(table.acquire(req(name, i as u128, 1), t(0)));
    }
    let names = |v: Vec<Lock>| v.into_iter().map(|l| l.name).collect::<Vec<_>>();
    assert_eq!(
        names(table.list("jobs/", 10, t(1)).unwrap()),
        ["jobs/1", "jobs/2", "jobs/3"]
    );
    assert_eq!(
        names(table.list("jobs/", 2, t(1)).unwrap()),
        ["jobs/1", "jobs/2"]
    );
    assert_eq!(table.list("", 100, t(1)).unwrap().len(), 4);
    assert!(table.list("x", 100, t(1)).unwrap().is_empty());
}

// "ErrNotRebuilt is the error of a request to a table not rebuilt yet."
#[test]
fn a_table_not_rebuilt_refuses_everything() {
    let mut table = Table::new(LeaseRule::default());
    assert!(!table.is_rebuilt());
    assert_eq!(
        table.acquire(req("a", 1, 1), t(0)),
        Err(AcquireError::NotRebuilt(NotRebuilt))
    );
    assert_eq!(
        table.release("a", LockId::from_u128(1), t(0)),
        Err(LockError::NotRebuilt(NotRebuilt))
    );
    assert_eq!(
        table.renew("a", LockId::from_u128(1), None, 1, t(0)),
        Err(LockError::NotRebuilt(NotRebuilt))
    );
    assert_eq!(table.get("a", t(0)), Err(NotRebuilt));
    assert_eq!(table.list("", 1, t(0)), Err(NotRebuilt));
}

// "Drop forgets the table, which is no longer this node's to keep, or is
// about to be again. The requests waiting are answered ErrNotRebuilt."
#[test]
fn drop_forgets_the_table_and_answers_the_waiters_not_rebuilt() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    let generation = table.generation();
    table.drop_table(t(1));
    assert_eq!(table.generation(), generation + 1);
    assert!(!table.is_rebuilt());
    assert!(table.is_empty());
    assert_eq!(
        table.take_answers(),
        vec![Answer::one(w, Err(AcquireError::NotRebuilt(NotRebuilt)))]
    );
    assert_eq!(
        table.acquire(req("b", 3, 1), t(1)),
        Err(AcquireError::NotRebuilt(NotRebuilt))
    );
}

// "Granted returns the locks this node granted and whose lease has not
// ended: the ones of its table, and the ones it held when it was last
// dropped."
#[test]
fn granted_is_the_table_and_what_it_held_when_dropped() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let a = granted(table.acquire(req("a", 1, 1), t(0)));
    let mut short = req("b", 2, 1);
    short.lease = Some(2 * SEC);
    granted(table.acquire(short, t(0)));
    let ids = |v: Vec<Lock>| {
        let mut v: Vec<_> = v.into_iter().map(|l| l.id.as_u128()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(table.granted(t(1))), [1, 2]);
    table.drop_table(t(1));
    assert_eq!(ids(table.granted(t(1))), [1, 2], "kept after the drop");
    assert_eq!(ids(table.granted(t(3))), [1], "until the leases end");
    // A second drop before any rebuild keeps them still.
    table.drop_table(t(3));
    assert_eq!(ids(table.granted(t(3))), [1]);
    assert!(table.granted(t(10)).is_empty());
    // Rebuilt as this speaker again, each lock is listed once.
    let g = table.generation();
    table
        .rebuild(
            RebuildFrom {
                generation: g,
                epoch: 2,
                locks: vec![a.clone()],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(4),
        )
        .unwrap();
    assert_eq!(ids(table.granted(t(4))), [1]);
}

// "Forget says a lock was released: it is dropped from the locks this node
// granted before its table was dropped, from its table, where a rebuild may
// have brought it back from a node that had not heard of the release yet,
// and its id is kept from the rebuilds to come."
#[test]
fn forget_drops_a_released_lock_everywhere_and_for_good() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let a = granted(table.acquire(req("a", 1, 1), t(0)));
    let b = granted(table.acquire(req("b", 2, 1), t(0)));
    table.drop_table(t(1));
    // Released through the next speaker: this node hears of it.
    table.forget("a", a.id, a.expires.saturating_duration_since(t(1)), t(1));
    assert_eq!(table.granted(t(1)).len(), 1);
    // A node that had not heard of the release reports it at a rebuild.
    let g = table.generation();
    table
        .rebuild(
            RebuildFrom {
                generation: g,
                epoch: 2,
                locks: vec![a.clone(), b.clone()],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(2),
        )
        .unwrap();
    assert_eq!(
        table.get("a", t(2)).unwrap(),
        None,
        "a released id never comes back"
    );
    assert!(table.get("b", t(2)).unwrap().is_some());
    // Forget also takes it out of the table when a rebuild brought it back.
    let mut table2 = rebuilt_table(3, vec![b.clone()], t(2));
    table2.forget("b", b.id, b.expires.saturating_duration_since(t(2)), t(2));
    assert_eq!(table2.get("b", t(2)).unwrap(), None);
    let g = table2.generation();
    table2.drop_table(t(2));
    table2
        .rebuild(
            RebuildFrom {
                generation: g + 1,
                epoch: 4,
                locks: vec![b],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(3),
        )
        .unwrap();
    assert!(table2.is_empty());
}

#[test]
fn a_release_forgets_the_id_for_later_rebuilds() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let a = granted(table.acquire(req("a", 1, 1), t(0)));
    table.release("a", a.id, t(1)).unwrap();
    table.drop_table(t(1));
    let g = table.generation();
    table
        .rebuild(
            RebuildFrom {
                generation: g,
                epoch: 2,
                locks: vec![a],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(2),
        )
        .unwrap();
    assert!(table.is_empty());
}

/// Drops `table` and rebuilds it at `now` from `reports`; says whether
/// `name` is held afterwards.
fn rebuilds_with(table: &mut Table, reports: Vec<Lock>, now: MonoTime) -> bool {
    table.drop_table(now);
    table
        .rebuild(
            RebuildFrom {
                generation: table.generation(),
                epoch: 9,
                locks: reports,
                hold_new_grants_until: None,
                seen_all: false,
            },
            now,
        )
        .unwrap();
    table.get("a", now).unwrap().is_some()
}

// Beyond the seed: a release heard of from elsewhere carries the time its
// lease had left, and the id is kept that long plus a second for clock
// rates (every record of the lease ends by then), not for the longest
// lease.
#[test]
fn a_forgotten_id_is_kept_as_long_as_the_lease_it_cancels() {
    let mut table = Table::new(LeaseRule::default());
    // Released elsewhere at t(2) with 8 s left: kept until t(11).
    table.forget("a", LockId::from_u128(1), 8 * SEC, t(2));
    assert_eq!(table.forgotten_ids(), 1);
    // A report that (against the rules) outlives the lease shows when the
    // id stops being kept.
    let report = held_lock("a", 1, 2, t(0), t(2000), Fence::new(1, 1).0);
    let just_before = t(11) - Duration::from_millis(1);
    assert!(!rebuilds_with(
        &mut table,
        vec![report.clone()],
        just_before
    ));
    assert!(rebuilds_with(&mut table, vec![report.clone()], t(11)));
    table.poll(t(11));
    assert_eq!(table.forgotten_ids(), 0, "pruned once its time is up");

    // A lease said to be longer than any node may grant is kept for the
    // longest one may (not this table's own maximum: another speaker may
    // have granted a longer lease than this one would).
    let report = held_lock("a", 1, 2, t(0), t(200_000), Fence::new(1, 1).0);
    let mut table = Table::new(LeaseRule::default());
    table.forget("a", LockId::from_u128(1), 48 * 3600 * SEC, t(0));
    let end = t(0) + LeaseRule::LONGEST + SEC;
    assert!(!rebuilds_with(
        &mut table,
        vec![report.clone()],
        end - Duration::from_millis(1)
    ));
    assert!(rebuilds_with(&mut table, vec![report], end));
}

// Beyond the seed: the node a lock is held through, and its lease end, as a
// renewal through another node is about to move it.
#[test]
fn held_through_names_the_node_a_renewal_would_move_the_lock_from() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 2), t(0)));
    assert_eq!(table.held_through("a", lock.id), Some((2, t(10))));
    table.renew("a", lock.id, None, 3, t(4)).unwrap();
    assert_eq!(table.held_through("a", lock.id), Some((3, t(14))));
    assert_eq!(table.held_through("a", LockId::from_u128(9)), None);
    assert_eq!(table.held_through("b", lock.id), None);
}

// Beyond the seed: ids kept for different times are each dropped on time,
// whatever the order they came in (one kept for the longest lease does not
// hold up the others behind it), and forgetting an id again keeps it for
// the longer of the two times.
#[test]
fn forgotten_ids_are_dropped_on_time_whatever_their_order() {
    let mut table = Table::new(LeaseRule::default());
    table.forget("x", LockId::from_u128(1), LeaseRule::MAX_LEASE, t(0));
    for id in 2..1000 {
        table.forget("x", LockId::from_u128(id), 5 * SEC, t(0));
    }
    // Forgotten again, for longer.
    table.forget("x", LockId::from_u128(2), 20 * SEC, t(1));
    assert_eq!(table.forgotten_ids(), 999);
    table.poll(t(7));
    assert_eq!(table.forgotten_ids(), 2, "the 5 s ids are gone at t(6)");
    let report = |id| held_lock("a", id, 2, t(0), t(900), Fence::new(1, 1).0);
    assert!(!rebuilds_with(&mut table, vec![report(2)], t(21)));
    table.poll(t(22));
    assert_eq!(table.forgotten_ids(), 1);
    assert!(rebuilds_with(&mut table, vec![report(2)], t(22)));
    assert!(!rebuilds_with(&mut table, vec![report(1)], t(600)));
    // Inserts prune as they go, even with no poll.
    table.forget("y", LockId::from_u128(5000), SEC, t(602));
    assert_eq!(table.forgotten_ids(), 1, "the longest lease's id went too");
}

#[test]
fn a_cancelled_waiter_is_never_answered() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w1)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    let Ok(Acquired::Waiting(w2)) = table.acquire(waiting(req("a", 3, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    assert!(table.cancel("a", w1, t(0)));
    assert!(!table.cancel("a", w1, t(0)));
    table.release("a", first.id, t(1)).unwrap();
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, w2);
}

#[test]
fn lock_in_transit_round_trips() {
    let lock = held_lock("a", 1, 2, t(3), t(13), 4);
    let moved: LockInTransit = lock.in_transit(t(5));
    assert_eq!(moved.clone().arrive(t(5)), lock);
}

// Found by the model test: a renewal for a shorter lease must still end the
// lease, and hand the lock on, at the new end.
#[test]
fn a_renewal_for_a_shorter_lease_ends_it_sooner() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    table.renew("a", lock.id, Some(2 * SEC), 1, t(1)).unwrap();
    assert_eq!(table.next_deadline(), Some(t(3)));
    table.poll(t(3));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, w);
    assert_eq!(answers[0].result.as_ref().unwrap().acquired, t(3));
}

// The guard (docs/design.md): a speaker that cannot show a recent quorum grants nothing, and its
// waiting requests are answered not rebuilt; its table stays.
#[test]
fn turning_away_waiters_keeps_the_table() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    table.turn_away_waiters();
    assert_eq!(
        table.take_answers(),
        vec![Answer::one(w, Err(AcquireError::NotRebuilt(NotRebuilt)))]
    );
    assert_eq!(table.waiting(), 0);
    assert!(table.is_rebuilt());
    assert_eq!(table.get("a", t(1)).unwrap().unwrap().id, lock.id);
    table.release("a", lock.id, t(1)).unwrap();
    assert!(table.take_answers().is_empty(), "nobody waits any more");
}

// Found by the simulation: a deposed speaker that had not heard yet of the
// new term handed a name to its waiter when the new speaker's Forget of the
// lock arrived. A release heard of from elsewhere means another node speaks:
// Forget frees the name without granting it, and turns its waiters away.
#[test]
fn forget_never_grants_to_a_waiter() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    let Ok(Acquired::Waiting(w)) = table.acquire(waiting(req("a", 2, 1), 60 * SEC), t(0)) else {
        panic!()
    };
    table.forget("a", lock.id, 9 * SEC, t(1));
    assert_eq!(
        table.take_answers(),
        vec![Answer::one(w, Err(AcquireError::NotRebuilt(NotRebuilt)))]
    );
    assert_eq!(table.get("a", t(1)).unwrap(), None);
    assert_eq!(table.waiting(), 0);
}

/// A table dropped and rebuilt again in the same term (a speaker whose
/// rebuild is retried after its table was dropped) goes on counting fences:
/// a released lock's fence, reported by nobody, is never handed out again.
#[test]
fn a_second_rebuild_in_one_term_never_reissues_a_fence() {
    let mut table = rebuilt_table(5, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    table.release("a", first.id, t(1)).unwrap();
    table.drop_table(t(1));
    table
        .rebuild(
            RebuildFrom {
                generation: table.generation(),
                epoch: 5,
                locks: vec![],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(1),
        )
        .unwrap();
    let second = granted(table.acquire(req("a", 2, 1), t(1)));
    assert!(
        second.fence > first.fence,
        "{:?} after {:?}",
        second.fence,
        first.fence
    );
}
