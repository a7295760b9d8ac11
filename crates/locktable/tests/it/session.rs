//! Sessions: one lease that many locks hang off. A session's locks are
//! granted with its lease, renewed when it is, and end when it ends,
//! released or lapsed.

use crate::common::*;

use locktable::{
    session_name, AcquireError, Acquired, Held, Lock, LockError, LockId, Request, Table,
};

const S: u128 = 1000;

fn session() -> Request {
    req(&session_name(LockId::from_u128(S)), S, 1)
}

fn of_session(name: &str, id: u128) -> Request {
    Request {
        session: Some(LockId::from_u128(S)),
        lease: None,
        ..req(name, id, 1)
    }
}

fn id(n: u128) -> LockId {
    LockId::from_u128(n)
}

fn table_with_session() -> (Table, Lock) {
    let mut table = rebuilt_table(1, vec![], t(0));
    let session = granted(table.acquire(session(), t(0)));
    (table, session)
}

#[test]
fn a_lock_of_a_session_takes_its_lease_and_is_renewed_with_it() {
    let (mut table, session) = table_with_session();
    let a = granted(table.acquire(of_session("a", 1), t(2)));
    assert_eq!(a.session, Some(id(S)));
    assert_eq!((a.expires, a.lease), (session.expires, session.lease));
    assert_eq!(
        table.renew("a", id(1), None, 1, t(3)),
        Err(LockError::InSession),
        "a lock of a session is renewed by renewing its session"
    );
    let renewed = table.renew_session(id(S), None, 1, t(8)).unwrap();
    assert_eq!(renewed.session.expires, t(18));
    assert_eq!(renewed.locks, 1);
    assert!(renewed.moved_from.is_empty());
    // The session's renewal carried the lock past its first end.
    table.poll(t(12));
    let held = table.get("a", t(12)).unwrap().expect("still held");
    assert_eq!(held.expires, t(18));
    refused(table.acquire(req("a", 2, 2), t(12)));
    // Unrenewed, session and locks lapse together.
    table.poll(t(18));
    assert_eq!(table.get("a", t(18)).unwrap(), None);
    assert_eq!(table.len(), 0);
    assert_eq!(
        table.acquire(of_session("b", 3), t(18)).unwrap_err(),
        AcquireError::NoSession
    );
}

#[test]
fn ending_a_session_releases_its_locks_and_serves_their_queues() {
    let (mut table, _) = table_with_session();
    granted(table.acquire(of_session("a", 1), t(1)));
    granted(table.acquire(of_session("b", 2), t(1)));
    granted(table.acquire(req("c", 3, 1), t(1)));
    let waiter = table
        .acquire(waiting(req("b", 4, 2), 30 * SEC), t(2))
        .unwrap();
    assert!(matches!(waiter, Acquired::Waiting(_)));
    let released = table.release_session(id(S), t(3)).unwrap();
    let mut ids: Vec<LockId> = released.iter().map(|l| l.id).collect();
    assert_eq!(ids.remove(0), id(S), "the session first");
    ids.sort();
    assert_eq!(ids, vec![id(1), id(2)]);
    assert_eq!(table.get("a", t(3)).unwrap(), None);
    assert!(
        table.get("c", t(3)).unwrap().is_some(),
        "not of the session"
    );
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].result.as_ref().unwrap().id, id(4));
    assert_eq!(table.release_session(id(S), t(4)), Err(LockError::NotHeld));
}

#[test]
fn a_waiting_lock_of_a_session_is_granted_with_the_session_lease_or_refused_once_it_ended() {
    let (mut table, _) = table_with_session();
    granted(table.acquire(req("a", 1, 2), t(0)));
    let waiter = table
        .acquire(waiting(of_session("a", 2), 60 * SEC), t(1))
        .unwrap();
    assert!(matches!(waiter, Acquired::Waiting(_)));
    table.renew_session(id(S), None, 1, t(5)).unwrap();
    table.release("a", id(1), t(6)).unwrap();
    let answers = table.take_answers();
    let lock = answers[0].result.as_ref().unwrap();
    assert_eq!((lock.session, lock.expires), (Some(id(S)), t(15)));

    // Another waiter whose session lapses before its turn is refused.
    granted(table.acquire(req("b", 3, 2), t(6)));
    table
        .acquire(waiting(of_session("b", 4), 60 * SEC), t(6))
        .unwrap();
    table.poll(t(15));
    table.release("b", id(3), t(15)).unwrap();
    let answers = table.take_answers();
    assert_eq!(answers[0].result, Err(AcquireError::NoSession));
    assert_eq!(table.get("b", t(15)).unwrap(), None);
}

#[test]
fn a_set_of_a_session_hangs_off_it_whole() {
    let (mut table, session) = table_with_session();
    let set = table
        .acquire_set(vec![of_session("a", 1), of_session("b", 2)], t(1))
        .unwrap();
    let locktable::AcquiredSet::Granted(locks) = set else {
        panic!("granted at once: {set:?}");
    };
    assert!(locks
        .iter()
        .all(|l| l.session == Some(id(S)) && l.expires == session.expires));
    assert_eq!(table.release_session(id(S), t(2)).unwrap().len(), 3);
}

#[test]
fn a_renewal_through_another_node_moves_the_session_locks_to_it() {
    let (mut table, _) = table_with_session();
    granted(table.acquire(of_session("a", 1), t(1)));
    granted(table.acquire(
        Request {
            node: 2,
            ..of_session("b", 2)
        },
        t(1),
    ));
    let renewed = table.renew_session(id(S), None, 2, t(2)).unwrap();
    assert_eq!(renewed.moved_from, vec![(id(1), 1, t(10))]);
    assert_eq!(renewed.digest, 1 ^ 2);
    assert!(table.session_locks(id(S)).iter().all(|l| l.node == 2));
}

#[test]
fn a_rebuild_gives_each_lock_at_least_its_session_end() {
    let (mut table, session) = table_with_session();
    let a = granted(table.acquire(of_session("a", 1), t(1)));
    let renewed = table.renew_session(id(S), None, 1, t(8)).unwrap();
    // A record of the lock that missed the renewal, and the session's that
    // saw it: the lock is held to the session's end.
    let rebuilt = rebuilt_table(2, vec![renewed.session.clone(), a.clone()], t(9));
    let lock = rebuilt.get("a", t(9)).unwrap().unwrap();
    assert_eq!(lock.expires, t(18));
    assert!(session.expires < lock.expires);
    let mut rebuilt = rebuilt;
    assert_eq!(
        rebuilt.release_session(id(S), t(10)).unwrap().len(),
        2,
        "the rebuilt table knows the session's locks"
    );
}

#[test]
fn sessions_are_not_listed_under_a_client_prefix() {
    let (mut table, _) = table_with_session();
    granted(table.acquire(of_session("a", 1), t(1)));
    let names: Vec<String> = table
        .list("", 10, t(1))
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, vec!["a".to_string()]);
}

#[test]
fn a_held_record_follows_its_session() {
    let (mut table, _) = table_with_session();
    let session = table.get(&session_name(id(S)), t(0)).unwrap().unwrap();
    let a = granted(table.acquire(of_session("a", 1), t(1)));
    let mut held = Held::new();
    held.record(session);
    held.record(a);
    held.record(
        table
            .get("x", t(1))
            .unwrap()
            .unwrap_or_else(|| granted(table.acquire(req("x", 5, 1), t(1)))),
    );
    assert_eq!(held.session_digest(id(S)), 1);
    assert!(held.renewed_session(id(S), 10 * SEC, t(7)));
    assert_eq!(held.get(id(1)).unwrap().expires, t(17));
    assert_eq!(
        held.get(id(5)).unwrap().expires,
        t(11),
        "not of the session"
    );
    held.remove(id(1));
    assert_eq!(held.session_digest(id(S)), 0);
    assert!(held.expire(t(17)).iter().any(|l| l.id == id(S)));
}

fn refused(result: Result<Acquired, AcquireError>) {
    assert!(
        matches!(result, Err(AcquireError::Held(_))),
        "expected held, got {result:?}"
    );
}
