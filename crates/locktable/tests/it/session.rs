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

/// What a property run does, one step at a time.
#[derive(Debug, Clone)]
enum Op {
    /// Opens session `0` or `1` (if not held).
    Open(u8),
    /// Asks for name `n` in session `s` (or in none), waiting or not.
    Take(u8, Option<u8>, bool),
    /// Renews session `s`.
    Renew(u8),
    /// Closes session `s`.
    Close(u8),
    /// Releases the oldest lock held of name `n`.
    Release(u8),
    /// Moves the clock on this many 100 ms steps, and polls.
    Tick(u8),
    /// Rebuilds the table from what it granted (a speaker change that
    /// read every record).
    Rebuild,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..2).prop_map(Op::Open),
        (0u8..4, proptest::option::of(0u8..2), any::<bool>())
            .prop_map(|(n, s, w)| Op::Take(n, s, w)),
        (0u8..2).prop_map(Op::Renew),
        (0u8..2).prop_map(Op::Close),
        (0u8..4).prop_map(Op::Release),
        (1u8..40).prop_map(Op::Tick),
        Just(Op::Rebuild),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// A session's locks end with it: after every step, every lock held in
    /// a session whose lease runs has that session held, with the same
    /// lease end; a lapsed one only runs out its delay; names are held by
    /// one at a time.
    #[test]
    fn a_sessions_locks_end_with_it(ops in proptest::collection::vec(op(), 1..80)) {
        let mut now = t(0);
        let mut table = rebuilt_table(1, vec![], now);
        let mut epoch = 1;
        let mut next_id = 10u128;
        let mut sessions: [Option<LockId>; 2] = [None, None];
        for op in ops {
            match op {
                Op::Open(s) => {
                    let nonce = LockId::from_u128(next_id);
                    next_id += 1;
                    let request = Request {
                        lease: Some(3 * SEC),
                        ..req(&session_name(nonce), next_id, 1)
                    };
                    if let Ok(Acquired::Granted(lock)) = table.acquire(request, now) {
                        sessions[s as usize] = Some(lock.id);
                    }
                    next_id += 1;
                }
                Op::Take(n, s, wait) => {
                    let session = s.and_then(|s| sessions[s as usize]);
                    // Odd names of a session carry a lock-delay.
                    let delay = if session.is_some() && n % 2 == 1 { SEC } else { std::time::Duration::ZERO };
                    let request = Request {
                        session,
                        delay,
                        lease: if session.is_some() { None } else { Some(2 * SEC) },
                        wait: if wait { 5 * SEC } else { std::time::Duration::ZERO },
                        ..req(&format!("n{n}"), next_id, 1)
                    };
                    next_id += 1;
                    let _ = table.acquire(request, now);
                }
                Op::Renew(s) => {
                    if let Some(id) = sessions[s as usize] {
                        let _ = table.renew_session(id, None, 1, now);
                    }
                }
                Op::Close(s) => {
                    if let Some(id) = sessions[s as usize].take() {
                        let _ = table.release_session(id, now);
                    }
                }
                Op::Release(n) => {
                    if let Some(lock) = table.get(&format!("n{n}"), now).unwrap() {
                        let _ = table.release(&lock.name, lock.id, now);
                    }
                }
                Op::Tick(steps) => {
                    now = now + std::time::Duration::from_millis(100 * u64::from(steps));
                    table.poll(now);
                }
                Op::Rebuild => {
                    epoch += 1;
                    let granted = table.granted(now);
                    table = rebuilt_table(epoch, granted, now);
                }
            }
            table.take_answers();
            for n in 0..4 {
                let holders = table.holders(&format!("n{n}"), now).unwrap();
                proptest::prop_assert!(holders.len() <= 1, "n{n} held by {holders:?}");
                for lock in holders {
                    let Some(session) = lock.session else { continue };
                    if lock.is_lapsed(now) {
                        proptest::prop_assert!(!lock.delay.is_zero() && lock.expires == lock.lease_ends() + lock.delay, "{lock:?}");
                        continue;
                    }
                    let name = table.session_name_of(session);
                    proptest::prop_assert!(name.is_some(), "{lock:?} outlived its session");
                    let session = table.get(&name.unwrap(), now).unwrap().expect("held");
                    proptest::prop_assert_eq!(lock.lease_ends(), session.lease_ends(), "{:?}", lock);
                }
            }
        }
    }
}
