//! Copies of a session's locks renewed by the session's copy (protocol 7):
//! a member keeping exactly the locks the speaker noted renews them in
//! place, one keeping others renews none and is sent them all, and every
//! lock of a session is noted with the member its copies went to.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{
    Made, Member, RebuildMode, RecordOut, Recording, SessionLocks, SessionRenewal,
};
use locktable::{session_name, Acquired, Lock, LockId, MonoTime, NodeId, Request};

/// What `r` says to do now, taken out.
fn outs(r: &mut Recording) -> Vec<RecordOut> {
    std::iter::from_fn(|| r.poll()).collect()
}

const TERM: u64 = 1;

fn granted(s: &mut Member, request: Request, now: MonoTime) -> (Lock, Made) {
    match s.acquire(request, &leading(TERM, now), now) {
        Ok((Acquired::Granted(lock), made)) => (lock, made),
        other => panic!("not granted: {other:?}"),
    }
}

/// The speaker puts `lock` (for a client of `holder`) on record: the one
/// member it copies to, and the session's locks noted with the copy.
fn copied_to(
    s: &mut Member,
    lock: &Lock,
    holder: NodeId,
    made: Made,
    now: MonoTime,
) -> (NodeId, Option<SessionLocks>) {
    let mut r = s.start_on_record(lock, holder, made, &leading(TERM, now), now);
    match outs(&mut r).as_slice() {
        [RecordOut::Copy(to)] => (*to, r.session_locks()),
        other => panic!("one copy expected: {other:?}"),
    }
}

fn arrived(lock: &Lock, sent: MonoTime, arrives: MonoTime) -> Lock {
    lock.in_transit(sent).arrive(arrives)
}

/// Speaker 1 with its own client's session (10 s) and the locks `a` and
/// `b` in it, each copied to member 2, which took them.
fn own_session() -> (Member, Member, Lock, Vec<Lock>) {
    let mut s1 = speaker(1, TERM, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let (session, made) = granted(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(sid), 900, 1)
        },
        at(0),
    );
    let (to, noted) = copied_to(&mut s1, &session, 1, made, at(0));
    assert_eq!(to, 2);
    let none = SessionLocks {
        count: 0,
        digest: 0,
    };
    assert_eq!(noted, Some(none), "a session's grant carries its locks");
    let copy = arrived(&session, at(0), at(1));
    assert!(m2.take_session_copy(TERM, copy, none, TERM, at(1)).unwrap());
    let mut locks = Vec::new();
    for (name, id) in [("a", 1), ("b", 2)] {
        let (lock, made) = granted(
            &mut s1,
            Request {
                session: Some(session.id),
                ..request(name, id, 1)
            },
            at(1),
        );
        let (to, noted) = copied_to(&mut s1, &lock, 1, made, at(1));
        assert_eq!((to, noted), (2, None), "a lock's copy is a plain one");
        m2.take_copies(TERM, vec![arrived(&lock, at(1), at(2))], TERM, at(2))
            .unwrap();
        locks.push(lock);
    }
    (s1, m2, session, locks)
}

fn renew_own(s1: &mut Member, sid: LockId, now: MonoTime) -> (Lock, Made) {
    let renewal = SessionRenewal {
        id: sid,
        lease: None,
        node: 1,
        digest: s1.session_digest(sid),
        client_digest: None,
        session_copies: true,
        reclaimable: false,
    };
    let (renewed, made) = s1.renew_session(renewal, &leading(TERM, now), now).unwrap();
    assert_eq!(renewed.locks, 2);
    assert!(!renewed.copied, "no lock is copied one by one");
    assert!(
        renewed.records.is_none(),
        "the speaker's own records are the table's"
    );
    (renewed.session, made)
}

#[test]
fn a_session_copy_renews_a_members_copies_and_a_next_speaker_keeps_every_lock() {
    let (mut s1, mut m2, session, _) = own_session();
    // Renewed every 4 s for 16 s: one copy a renewal, of the session's grant.
    for t in [4_000, 8_000, 12_000, 16_000] {
        let (renewed, made) = renew_own(&mut s1, session.id, at(t));
        let (to, noted) = copied_to(&mut s1, &renewed, 1, made, at(t));
        assert_eq!(to, 2);
        let noted = noted.expect("the session's locks noted");
        assert_eq!(noted.count, 2);
        let copy = arrived(&renewed, at(t), at(t + 1));
        assert!(m2
            .take_session_copy(TERM, copy, noted, TERM, at(t + 1))
            .unwrap());
    }
    // The speaker crashes at 20 s, past the locks' first lease; the next
    // speaker reads member 2 (and itself): both locks are held to 26 s.
    let now = at(20_000);
    let mut s3 = member(3, RebuildMode::Proceed);
    s3.drop_table(Some(2), now);
    let reads = vec![(2, m2.own_report(now)), (3, Vec::new())];
    rebuild_reading(&mut s3, 2, reads, vec![1], now);
    for name in ["a", "b"] {
        let lock = s3.get(name, &leading(2, now), now).unwrap().expect(name);
        assert_eq!(lock.session, Some(session.id));
        assert!(lock.expires >= at(26_000), "{name} ends with its session");
    }
}

#[test]
fn a_member_keeping_other_locks_of_a_session_renews_none_and_is_sent_them_all() {
    let (mut s1, _, session, locks) = own_session();
    // Member 3 keeps a copy of `a` alone.
    let mut m3 = member(3, RebuildMode::Proceed);
    m3.take_copies(TERM, vec![arrived(&locks[0], at(1), at(2))], TERM, at(2))
        .unwrap();
    let (renewed, _) = renew_own(&mut s1, session.id, at(8_000));
    let noted = SessionLocks {
        count: 2,
        digest: locktable::session::digest(locks.iter().map(|l| l.id)),
    };
    let copy = arrived(&renewed, at(8_000), at(8_001));
    assert!(!m3
        .take_session_copy(TERM, copy.clone(), noted, TERM, at(8_001))
        .unwrap());
    let report = m3.own_report(at(12_000));
    assert!(
        report.is_empty(),
        "nothing renewed, nothing kept: {report:?}"
    );

    // The speaker sends the session and all its locks instead, each noted.
    let sent = s1.session_copies(session.id, 3, at(8_002));
    let ids: Vec<LockId> = sent.iter().map(|l| l.id).collect();
    assert_eq!(ids, [session.id, locks[0].id, locks[1].id]);
    let sent = sent
        .iter()
        .map(|l| arrived(l, at(8_002), at(8_003)))
        .collect();
    m3.take_copies(TERM, sent, TERM, at(8_003)).unwrap();
    assert!(m3
        .take_session_copy(TERM, copy, noted, TERM, at(8_004))
        .unwrap());
    let (_, to) = s1
        .release("b", locks[1].id, &leading(TERM, at(9_000)), at(9_000))
        .unwrap();
    assert!(
        to.contains(3),
        "a lock sent as a session's copy is forgotten there"
    );
}

#[test]
fn every_lock_of_a_session_is_noted_with_the_member_its_grant_is_copied_to() {
    let (mut s1, _, session, locks) = own_session();
    let (renewed, made) = renew_own(&mut s1, session.id, at(8_000));
    // The copy goes to member 3 this time (member 2 failed one): member 3
    // may renew its copies of both locks with it.
    let mut r = s1.start_on_record(&renewed, 1, made, &leading(TERM, at(8_000)), at(8_000));
    assert_eq!(outs(&mut r), [RecordOut::Copy(2)]);
    r.answered(
        &mut s1,
        &renewed,
        2,
        false,
        &leading(TERM, at(8_001)),
        at(8_001),
    );
    assert_eq!(outs(&mut r), [RecordOut::Copy(3)]);
    assert_eq!(r.session_locks().map(|l| l.count), Some(2));
    // Past the locks' first lease (their copies to member 2 noted to about
    // 10 s), a release is passed on to member 3 too.
    let now = at(15_000);
    let (_, to) = s1
        .release("a", locks[0].id, &leading(TERM, now), now)
        .unwrap();
    assert!(to.contains(3), "the lock is noted with its session's copy");
}

#[test]
fn a_close_passes_every_lock_on_to_the_member_its_session_was_copied_to() {
    let (mut s1, _, session, locks) = own_session();
    let (renewed, made) = renew_own(&mut s1, session.id, at(8_000));
    let mut r = s1.start_on_record(&renewed, 1, made, &leading(TERM, at(8_000)), at(8_000));
    assert_eq!(outs(&mut r), [RecordOut::Copy(2)]);
    r.answered(
        &mut s1,
        &renewed,
        2,
        false,
        &leading(TERM, at(8_001)),
        at(8_001),
    );
    assert_eq!(outs(&mut r), [RecordOut::Copy(3)]);
    // Closed past the locks' first lease: the session's grant goes first,
    // and each lock after it still reaches member 3.
    let now = at(15_000);
    let released = s1
        .release_session(session.id, &leading(TERM, now), now)
        .unwrap();
    let ids: Vec<LockId> = released.iter().map(|(l, _)| l.id).collect();
    assert_eq!(ids, [session.id, locks[0].id, locks[1].id]);
    for (lock, to) in released {
        assert!(to.contains(3), "{} is forgotten at member 3", lock.name);
    }
}
