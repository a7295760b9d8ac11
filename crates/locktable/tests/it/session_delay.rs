//! Lock-delay on a lock of a session: a session that lapses keeps each of
//! its locks' names closed for that lock's delay; closing it frees them at
//! once; the delay and the session's lease are cut to stay within the
//! longest lease together.

use crate::common::*;

use std::time::Duration;

use locktable::{
    session_name, AcquireError, Acquired, Held, LeaseRule, LockError, LockId, Request, Table,
};

const S: u128 = 1000;

fn id(n: u128) -> LockId {
    LockId::from_u128(n)
}

fn open(table: &mut Table, lease: Duration) -> locktable::Lock {
    let request = Request {
        lease: Some(lease),
        ..req(&session_name(id(S)), S, 1)
    };
    granted(table.acquire(request, t(0)))
}

fn of_session(name: &str, n: u128, delay: Duration) -> Request {
    Request {
        session: Some(id(S)),
        lease: None,
        delay,
        ..req(name, n, 1)
    }
}

fn refused_as_held(result: Result<Acquired, AcquireError>) {
    assert!(
        matches!(result, Err(AcquireError::Held(_))),
        "expected held, got {result:?}"
    );
}

#[test]
fn a_lapsed_session_keeps_each_lock_closed_for_its_own_delay() {
    let mut table = rebuilt_table(1, vec![], t(0));
    open(&mut table, 10 * SEC);
    let a = granted(table.acquire(of_session("a", 1, 3 * SEC), t(1)));
    let b = granted(table.acquire(of_session("b", 2, Duration::ZERO), t(1)));
    assert_eq!(
        (a.delay, a.lease_ends(), a.expires),
        (3 * SEC, t(10), t(13))
    );
    assert_eq!((b.lease_ends(), b.expires), (t(10), t(10)));
    let renewed = table.renew_session(id(S), None, 1, t(5)).unwrap();
    assert_eq!(renewed.session.expires, t(15));
    let a_now = table.get("a", t(5)).unwrap().unwrap();
    assert_eq!(
        (a_now.lease_ends(), a_now.expires),
        (t(15), t(18)),
        "the renewal moves the lease; the delay follows it"
    );

    // The session lapses unrenewed: b is free, a stays closed 3 s more.
    table.poll(t(16));
    assert_eq!(table.get("b", t(16)).unwrap(), None);
    refused_as_held(table.acquire(req("a", 3, 2), t(16)));
    assert_eq!(
        table.release("a", id(1), t(16)),
        Err(LockError::NotHeld),
        "a lapsed lock cannot be released to cut its delay"
    );
    assert_eq!(
        table.renew_session(id(S), None, 1, t(16)).unwrap_err(),
        LockError::NotHeld
    );
    assert_eq!(
        table.acquire(of_session("c", 4, SEC), t(16)).unwrap_err(),
        AcquireError::NoSession
    );
    let waiter = table
        .acquire(waiting(req("a", 5, 2), 30 * SEC), t(16))
        .unwrap();
    assert!(matches!(waiter, Acquired::Waiting(_)));
    table.poll(t(18));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1, "the waiter is served when the delay ends");
    let next = answers[0].result.as_ref().expect("granted").clone();
    assert!(next.fence > a.fence);
}

#[test]
fn closing_a_session_frees_its_delayed_locks_at_once() {
    let mut table = rebuilt_table(1, vec![], t(0));
    open(&mut table, 10 * SEC);
    granted(table.acquire(of_session("a", 1, 5 * SEC), t(1)));
    let released = table.release_session(id(S), t(2)).unwrap();
    assert_eq!(released.len(), 2);
    granted(table.acquire(req("a", 2, 2), t(2)));
}

#[test]
fn a_locks_delay_is_cut_to_leave_room_for_its_sessions_lease() {
    let rule = LeaseRule {
        default: 30 * SEC,
        max: 60 * SEC,
    };
    let mut table = rebuilt_under(rule);
    open(&mut table, 50 * SEC);
    let a = granted(table.acquire(of_session("a", 1, 30 * SEC), t(0)));
    assert_eq!(a.delay, 10 * SEC, "the delay kept: 60 s less the lease");
    assert_eq!(a.expires, t(60));
    let full = granted(table.acquire(of_session("b", 2, 5 * SEC), t(0)));
    assert_eq!(full.delay, 5 * SEC, "a delay that fits is kept whole");
    assert!(matches!(
        table.acquire(of_session("c", 3, 60 * SEC), t(0)),
        Err(AcquireError::BadDelay { .. })
    ));
}

#[test]
fn a_sessions_renewal_is_cut_to_leave_room_for_its_longest_delay() {
    let rule = LeaseRule {
        default: 30 * SEC,
        max: 60 * SEC,
    };
    let mut table = rebuilt_under(rule);
    open(&mut table, 20 * SEC);
    granted(table.acquire(of_session("a", 1, 30 * SEC), t(0)));
    granted(table.acquire(of_session("b", 2, 10 * SEC), t(0)));
    let renewed = table.renew_session(id(S), Some(50 * SEC), 1, t(1)).unwrap();
    assert_eq!(
        renewed.session.lease,
        30 * SEC,
        "60 s less the longest delay"
    );
    let a = table.get("a", t(1)).unwrap().unwrap();
    assert_eq!(a.expires, t(61));
    table.release("a", id(1), t(2)).unwrap();
    let renewed = table.renew_session(id(S), Some(50 * SEC), 1, t(2)).unwrap();
    assert_eq!(
        renewed.session.lease,
        50 * SEC,
        "the longest delay left is 10 s"
    );
}

#[test]
fn a_rebuild_gives_a_lock_its_sessions_lease_end_plus_its_delay() {
    let mut table = rebuilt_table(1, vec![], t(0));
    open(&mut table, 10 * SEC);
    granted(table.acquire(of_session("a", 1, 5 * SEC), t(1)));
    let renewed = table.renew_session(id(S), None, 1, t(4)).unwrap();
    // The session's record saw the renewal; a record of the lock missed it.
    let stale = table.get("a", t(4)).unwrap().unwrap();
    let stale = locktable::Lock {
        expires: t(15),
        ..stale
    };
    let rebuilt = rebuilt_table(2, vec![renewed.session, stale], t(5));
    let kept = rebuilt.get("a", t(5)).unwrap().expect("held");
    assert_eq!((kept.lease_ends(), kept.expires), (t(14), t(19)));
}

#[test]
fn a_rebuild_after_the_session_lapsed_keeps_the_name_closed_for_the_delay() {
    let mut table = rebuilt_table(1, vec![], t(0));
    open(&mut table, 10 * SEC);
    granted(table.acquire(of_session("a", 1, 5 * SEC), t(1)));
    table.renew_session(id(S), None, 1, t(4)).unwrap();
    // The speaker's records, read by the next one after the session lapsed
    // (its own record ended at 14 s): the lock's record closes the name.
    let records = table.granted(t(16));
    assert_eq!(records.len(), 1);
    let mut rebuilt = rebuilt_table(2, records, t(16));
    let kept = rebuilt.get("a", t(16)).unwrap().expect("closed");
    assert!(kept.is_lapsed(t(16)));
    assert_eq!(kept.expires, t(19));
    refused_as_held(rebuilt.acquire(req("a", 2, 2), t(17)));
    rebuilt.poll(t(19));
    granted(rebuilt.acquire(req("a", 3, 2), t(19)));
}

#[test]
fn a_lock_taken_back_ends_at_its_sessions_lease_end_plus_its_delay() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let session = open(&mut table, 10 * SEC);
    let mut lock = granted(table.acquire(of_session("a", 1, 4 * SEC), t(1)));
    lock.expires = t(40);
    let mut rebuilt = rebuilt_table(2, vec![session], t(2));
    let kept = rebuilt.reclaim(lock, t(2)).unwrap();
    assert_eq!(kept.expires, t(14));
}

#[test]
fn a_held_record_of_a_session_lock_keeps_its_delay_after_the_session() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let session = open(&mut table, 10 * SEC);
    let a = granted(table.acquire(of_session("a", 1, 2 * SEC), t(1)));
    let mut held = Held::new();
    held.record(session.clone());
    held.record(a);
    assert!(held.renewed_session(id(S), 10 * SEC, t(7)));
    assert_eq!(held.get(id(1)).unwrap().expires, t(19));
    // A copy of the session's grant renewed further: the lock follows.
    let mut view = session;
    view.expires = t(20);
    held.record_session_view(view.clone());
    assert_eq!(held.get(id(1)).unwrap().expires, t(22));
    // An older view leaves it.
    view.expires = t(12);
    held.record_session_view(view);
    assert_eq!(held.get(id(1)).unwrap().expires, t(22));
}
