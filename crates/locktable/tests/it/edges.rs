//! Behaviours at the table's edges that mutation testing found unguarded:
//! a lock reported twice, the first and last fences of a term, the largest
//! term, and fields longer than a slot keeps.

use crate::common;

use common::*;
use locktable::{Fence, Held, LeaseRule, Lock, LockId, RebuildError, RebuildFrom, Request, Table};

#[test]
fn a_lock_reported_twice_keeps_its_latest_lease_through_the_node_that_renewed_it_last() {
    // The holder's old node and the node a renewal moved it to both report
    // it; whichever comes first, the later lease is kept.
    let old = held_lock("a", 5, 2, t(0), t(20), Fence::new(1, 3).0);
    let moved = Lock {
        node: 3,
        ..held_lock("a", 5, 3, t(0), t(40), Fence::new(1, 3).0)
    };
    for reports in [
        vec![old.clone(), moved.clone()],
        vec![moved.clone(), old.clone()],
    ] {
        let table = rebuilt_table(2, reports, t(1));
        let lock = table.get("a", t(1)).unwrap().expect("kept");
        assert_eq!((lock.expires, lock.node), (t(40), 3));
        assert_eq!(lock.acquired, t(0));
    }
    // Not a lease that ended with the older report's.
    let table = rebuilt_table(2, vec![moved, old], t(1));
    assert!(table.get("a", t(30)).unwrap().is_some());
}

#[test]
fn a_terms_first_grant_carries_the_first_fence_of_the_term() {
    let mut table = rebuilt_table(7, vec![], t(0));
    let first = granted(table.acquire(req("a", 1, 1), t(0)));
    let second = granted(table.acquire(req("b", 2, 1), t(0)));
    assert_eq!(first.fence, Fence::new(7, 1));
    assert_eq!(second.fence, Fence::new(7, 2));
    assert_eq!(first.fence.epoch(), 7);
}

#[test]
fn the_largest_term_is_the_last_the_fences_bits_can_carry() {
    assert_eq!(Fence::MAX_EPOCH, (1 << 24) - 1);
    let mut table = Table::new(locktable::LeaseRule::default());
    table.drop_table(t(0));
    let err = table
        .rebuild(
            RebuildFrom {
                generation: table.generation(),
                epoch: 1 << 24,
                locks: vec![],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(0),
        )
        .unwrap_err();
    assert_eq!(err, RebuildError::EpochTooLarge(1 << 24));
}

#[test]
fn a_field_longer_than_a_slot_keeps_is_cut_at_a_character_boundary() {
    let mut table = rebuilt_table(1, vec![], t(0));
    // 70 000 bytes of two-byte characters: cut below 65 535 bytes, whole
    // characters only.
    let holder = "é".repeat(35_000);
    let request = Request {
        holder: holder.clone(),
        ..req("a", 1, 1)
    };
    granted(table.acquire(request, t(0)));
    let lock = table.get("a", t(0)).unwrap().expect("held");
    assert!(lock.holder.len() <= u16::MAX as usize);
    assert!(lock.holder.len() >= u16::MAX as usize - 1);
    assert!(holder.starts_with(&lock.holder));
    let short = Request {
        holder: "short".into(),
        ..req("b", 2, 1)
    };
    granted(table.acquire(short, t(0)));
    assert_eq!(table.get("b", t(0)).unwrap().unwrap().holder, "short");
}

#[test]
fn an_empty_held_says_so() {
    let mut held = Held::new();
    assert!(held.is_empty());
    held.record(held_lock("a", 1, 1, t(0), t(10), 1));
    assert!(!held.is_empty());
    assert_eq!(
        format!("{:?}", LockId::from_u128(1)),
        format!("LockId({})", LockId::from_u128(1))
    );
}

#[test]
fn a_listing_of_exactly_its_limit_is_whole_and_in_order() {
    let mut table = rebuilt_table(1, vec![], t(0));
    for (i, name) in ["c", "a", "b"].into_iter().enumerate() {
        granted(table.acquire(req(name, i as u128 + 1, 1), t(0)));
    }
    let names = |limit| -> Vec<String> {
        table
            .list("", limit, t(0))
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect()
    };
    assert_eq!(names(3), ["a", "b", "c"]);
    assert_eq!(names(2), ["a", "b"]);
    assert_eq!(
        (table.len(), table.is_empty(), table.waiting()),
        (3, false, 0)
    );
}

#[test]
fn granted_names_each_live_grant_once() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(req("a", 1, 1), t(0)));
    table.drop_table(t(1));
    // Rebuilt in the next term from the holder's report of the same grant.
    let table = {
        let mut t2 = table;
        let g = t2.generation();
        t2.rebuild(
            RebuildFrom {
                generation: g,
                epoch: 2,
                locks: vec![lock.clone()],
                hold_new_grants_until: None,
                seen_all: false,
            },
            t(1),
        )
        .unwrap();
        t2
    };
    let ids: Vec<LockId> = table.granted(t(1)).into_iter().map(|l| l.id).collect();
    assert_eq!(ids, [lock.id]);
    assert!(!table.is_forgotten(lock.id, t(1)));
}

#[test]
fn the_largest_term_rebuilds_and_the_longest_lease_is_a_day() {
    let table = rebuilt_table(Fence::MAX_EPOCH, vec![], t(0));
    assert!(table.is_rebuilt());
    assert_eq!(
        locktable::LeaseRule::LONGEST,
        std::time::Duration::from_secs(86_400)
    );
}

#[test]
fn a_lost_lock_reported_twice_is_lost_with_its_latest_lease_and_node() {
    // The winner was held longest; the loser was renewed through node 3
    // after node 2 had it, and both report it.
    let winner = held_lock("a", 1, 1, t(0), t(30), Fence::new(1, 1).0);
    let old = held_lock("a", 5, 2, t(5), t(20), Fence::new(2, 1).0);
    let moved = held_lock("a", 5, 3, t(5), t(40), Fence::new(2, 1).0);
    for reports in [
        vec![winner.clone(), old.clone(), moved.clone()],
        vec![winner.clone(), moved.clone(), old.clone()],
    ] {
        let mut table = Table::new(locktable::LeaseRule::default());
        table.drop_table(t(6));
        let g = table.generation();
        let rebuilt = table
            .rebuild(
                RebuildFrom {
                    generation: g,
                    epoch: 3,
                    locks: reports,
                    hold_new_grants_until: None,
                    seen_all: false,
                },
                t(6),
            )
            .unwrap();
        let lost: Vec<(LockId, u64, locktable::MonoTime)> = rebuilt
            .lost
            .iter()
            .map(|l| (l.id, l.node, l.expires))
            .collect();
        assert_eq!(lost, [(LockId::from_u128(5), 3, t(40))]);
    }
}

#[test]
fn a_waiting_request_is_counted_until_answered() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let held = granted(table.acquire(req("a", 1, 1), t(0)));
    let waiting = Request {
        wait: std::time::Duration::from_secs(5),
        ..req("a", 2, 1)
    };
    assert!(table.acquire(waiting, t(0)).is_ok());
    assert_eq!(table.waiting(), 1);
    table.release("a", held.id, t(1)).unwrap();
    assert_eq!(table.waiting(), 0);
}

#[test]
fn a_listing_shows_each_locks_queue_in_the_order_it_is_served() {
    use locktable::{Acquired, Queued, QUEUE_SHOWN};
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(req("a", 1, 1), t(0)));
    granted(table.acquire(req("b", 2, 1), t(0)));
    let second = waiting(req("a", 3, 2), 30 * SEC);
    let third = Request {
        lease: None,
        ..waiting(req("a", 4, 3), 5 * SEC)
    };
    assert!(matches!(
        table.acquire(second, t(1)),
        Ok(Acquired::Waiting(_))
    ));
    assert!(matches!(
        table.acquire(third, t(2)),
        Ok(Acquired::Waiting(_))
    ));
    let listing = table.listing("", 10, t(3)).unwrap();
    assert_eq!(listing.waiters, [2, 0]);
    let default = LeaseRule::default().lease(None);
    assert_eq!(
        listing.queues,
        [
            vec![
                Queued {
                    with: Vec::new(),
                    kind: Default::default(),
                    holder: "client-3".into(),
                    node: 2,
                    since: t(1),
                    until: t(31),
                    lease: 10 * SEC,
                },
                Queued {
                    with: Vec::new(),
                    kind: Default::default(),
                    holder: "client-4".into(),
                    node: 3,
                    since: t(2),
                    until: t(7),
                    lease: default,
                },
            ],
            vec![],
        ]
    );
    // The first served is shown first; once it has the lock, the next.
    let first = table.list("a", 1, t(3)).unwrap().remove(0);
    table.release("a", first.id, t(4)).unwrap();
    let listing = table.listing("a", 10, t(4)).unwrap();
    assert_eq!(listing.locks[0].holder, "client-3");
    assert_eq!(listing.queues[0].len(), 1);
    assert_eq!(listing.queues[0][0].holder, "client-4");

    // A long queue is counted whole and shown in part.
    for i in 0..QUEUE_SHOWN as u128 + 5 {
        let r = waiting(req("b", 100 + i, 1), 30 * SEC);
        assert!(matches!(table.acquire(r, t(5)), Ok(Acquired::Waiting(_))));
    }
    let listing = table.listing("b", 10, t(5)).unwrap();
    assert_eq!(listing.waiters, [QUEUE_SHOWN + 5]);
    assert_eq!(listing.queues[0].len(), QUEUE_SHOWN);
    assert_eq!(listing.queues[0][0].holder, "client-100");
}

#[test]
fn leases_that_run_out_are_told_once_with_how_long_they_were_held() {
    use locktable::Lapsed;
    let mut table = rebuilt_table(1, vec![], t(0));
    let a = granted(table.acquire(req("a", 1, 1), t(0)));
    let b = granted(table.acquire(req("b", 2, 1), t(2)));
    granted(table.acquire(req("c", 3, 1), t(0)));
    table.release("c", LockId::from_u128(3), t(1)).unwrap();
    // `a` ends in a poll, `b` when a call on its name finds it ended.
    table.poll(a.expires);
    assert!(table.acquire(req("b", 4, 1), b.expires).is_ok());
    let lapsed = table.take_lapsed();
    assert_eq!(
        lapsed,
        [
            Lapsed {
                name: "a".into(),
                held: 10 * SEC
            },
            Lapsed {
                name: "b".into(),
                held: 10 * SEC
            },
        ],
        "a release is not a lapse"
    );
    assert!(table.take_lapsed().is_empty(), "told once");
    // A dropped table tells none of its own.
    table.poll(t(30));
    table.drop_table(t(30));
    assert!(table.take_lapsed().is_empty());
}
