//! A session the table lacks (a rebuild missed the members keeping it) is
//! taken back from the renewing node's records, as a plain lock's renewal
//! takes back its record: the speaker asks for the node's records of the
//! session's locks, keeps each that fits, and answers those it could not
//! keep as lost.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Guard, Member, RebuildMode, Refusal, SessionRenewal};
use locktable::{session_name, Lock, LockId, Request};

use crate::common::grant_for as grant;

/// Speaker 1 grants node 2's client a session (10 s) with `a` and `b` in
/// it; node 2 records them.
fn held_through_node_2() -> (Member, Lock) {
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let session = grant(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(LockId::from_u128(900)), 900, 2)
        },
        1,
        at(0),
    );
    for lock in [session.clone()]
        .into_iter()
        .chain([("a", 1), ("b", 2)].map(|(name, id)| {
            let in_session = Request {
                session: Some(session.id),
                ..request(name, id, 2)
            };
            grant(&mut s1, in_session, 1, at(1))
        }))
    {
        m2.granted_through_speaker(call(1), lock.in_transit(at(1)), Duration::ZERO, at(2))
            .unwrap();
    }
    (m2, session)
}

fn renewal(m: &Member, sid: LockId, reclaimable: bool) -> SessionRenewal {
    SessionRenewal {
        id: sid,
        lease: None,
        node: m.id(),
        digest: m.session_digest(sid),
        client_digest: None,
        session_copies: true,
        reclaimable,
    }
}

/// Speaker 1 crashes at 2 s; speaker 3 rebuilds for term 2 without
/// reading node 2.
fn next_speaker_missing_node_2() -> Member {
    next_speaker_after(|_| {})
}

/// As [`next_speaker_missing_node_2`], member 3 having heard `before` as
/// a member.
fn next_speaker_after(before: impl FnOnce(&mut Member)) -> Member {
    let now = at(2_000);
    let mut s3 = member(3, RebuildMode::Proceed);
    before(&mut s3);
    s3.drop_table(Some(2), now);
    rebuild_reading(&mut s3, 2, vec![(3, Vec::new())], vec![1, 2], now);
    s3
}

/// The node's records as they arrive at the speaker (a call sent at `ms`).
fn records_of(m: &Member, sid: LockId, ms: u64) -> (Lock, Vec<Lock>) {
    let arrive = |l: &Lock| l.in_transit(at(ms)).arrive(at(ms + 1));
    let session = m.held_record(sid).expect("the node records the session");
    let locks = m.held_session_records(sid);
    (arrive(&session), locks.iter().map(arrive).collect())
}

#[test]
fn a_session_a_rebuild_missed_is_taken_back_from_its_nodes_records() {
    let (mut m2, session) = held_through_node_2();
    let mut s3 = next_speaker_missing_node_2();
    let now = at(3_000);
    let guard = leading(2, now);
    let asked = s3.renew_session(renewal(&m2, session.id, true), &guard, now);
    assert_eq!(asked.err(), Some(Refusal::RecordsWanted));

    let (record, locks) = records_of(&m2, session.id, 3_000);
    assert_eq!(locks.len(), 2);
    s3.reclaim_session(record, locks, &guard, now).unwrap();
    let (renewed, _) = s3
        .renew_session(renewal(&m2, session.id, false), &guard, now)
        .unwrap();
    assert_eq!(renewed.locks, 2);
    assert!(
        renewed.records.is_none(),
        "the node's records are the table's"
    );
    let sent = m2.session_sent(session.id);
    let (_, lost) = m2
        .renewed_session_through_speaker(
            call(3_000),
            renewed.session.in_transit(now),
            None,
            &sent,
            at(3_001),
        )
        .unwrap();
    assert!(lost.is_empty());
    for (name, lock) in [("a", 1), ("b", 2)] {
        let held = s3.get(name, &guard, now).unwrap().expect(name);
        assert_eq!(held.id, LockId::from_u128(lock));
        assert_eq!(held.session, Some(session.id));
    }
    let rival = s3.acquire(request("a", 77, 3), &guard, now);
    assert!(matches!(rival, Err(Refusal::Held(_))), "{rival:?}");
}

#[test]
fn a_lock_of_a_session_granted_again_meanwhile_is_answered_lost() {
    let (mut m2, session) = held_through_node_2();
    let mut s3 = next_speaker_missing_node_2();
    let now = at(3_000);
    let guard = leading(2, now);
    // A rival takes `b` before the session's next renewal.
    let rival = grant(&mut s3, request("b", 77, 3), 2, now);
    let (record, locks) = records_of(&m2, session.id, 3_000);
    s3.reclaim_session(record, locks, &guard, now).unwrap();
    let (renewed, _) = s3
        .renew_session(renewal(&m2, session.id, false), &guard, now)
        .unwrap();
    assert_eq!(renewed.locks, 1);
    let records = renewed.records.expect("the node's records differ");
    let records = records.iter().map(|l| l.in_transit(now)).collect();
    let sent = m2.session_sent(session.id);
    let (_, lost) = m2
        .renewed_session_through_speaker(
            call(3_000),
            renewed.session.in_transit(now),
            Some(records),
            &sent,
            at(3_001),
        )
        .unwrap();
    let lost: Vec<&str> = lost.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(lost, ["b"], "the client is told");
    assert_eq!(
        s3.get("b", &guard, now).unwrap().map(|l| l.id),
        Some(rival.id)
    );
}

#[test]
fn a_released_session_is_not_taken_back() {
    let (m2, session) = held_through_node_2();
    // Its release reached member 3 (a forget) before it spoke.
    let mut s3 = next_speaker_after(|m3| {
        m3.forget(
            &session.name,
            session.id,
            Some(Duration::from_secs(10)),
            &Guard::default(),
            at(1_500),
        )
    });
    let now = at(3_000);
    let guard = leading(2, now);
    let (record, locks) = records_of(&m2, session.id, 3_000);
    let asked = s3.renew_session(renewal(&m2, session.id, true), &guard, now);
    assert_eq!(asked.err(), Some(Refusal::NotHeld));
    let taken = s3.reclaim_session(record, locks, &guard, now);
    assert_eq!(taken, Err(Refusal::NotHeld));
    assert!(s3.get("a", &guard, now).unwrap().is_none());
}

/// Speaker 1 grants its own client a session (10 s) with `a` and `b` in
/// it, each copied to member 2: member 2 keeps copies, no `Held`.
fn own_session_copied_to_2() -> (Member, Member, Lock) {
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let session = grant(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(LockId::from_u128(900)), 900, 1)
        },
        1,
        at(0),
    );
    let mut copies = vec![session.in_transit(at(0)).arrive(at(1))];
    for (name, id) in [("a", 1), ("b", 2)] {
        let in_session = Request {
            session: Some(session.id),
            ..request(name, id, 1)
        };
        let lock = grant(&mut s1, in_session, 1, at(1));
        copies.push(lock.in_transit(at(1)).arrive(at(2)));
    }
    m2.take_copies(1, copies, 1, at(2)).unwrap();
    (s1, m2, session)
}

#[test]
fn a_session_taken_back_through_a_copy_holder_keeps_the_locks_it_copies() {
    // Speaker 1 crashes; speaker 3 rebuilds reading neither 1 nor 2. The
    // client of node 1 renews through node 2, which keeps copies of its
    // session and of both locks.
    let (_s1, mut m2, session) = own_session_copied_to_2();
    let now = at(2_000);
    let mut s3 = member(3, RebuildMode::Proceed);
    s3.drop_table(Some(2), now);
    rebuild_reading(&mut s3, 2, vec![(3, Vec::new())], vec![1, 2], now);
    let now = at(3_000);
    let guard = leading(2, now);
    let asked = s3.renew_session(renewal(&m2, session.id, true), &guard, now);
    assert_eq!(asked.err(), Some(Refusal::RecordsWanted));
    let (record, locks) = records_of(&m2, session.id, 3_000);
    assert_eq!(locks.len(), 2, "the node's copies of the session's locks");
    s3.reclaim_session(record, locks, &guard, now).unwrap();
    let (renewed, _) = s3
        .renew_session(renewal(&m2, session.id, false), &guard, now)
        .unwrap();
    assert_eq!(renewed.locks, 2, "both locks taken back with the session");
    let records = renewed.records.expect("node 2 keeps no `Held` of them");
    let records = records.iter().map(|l| l.in_transit(now)).collect();
    let sent = m2.session_sent(session.id);
    let (_, lost) = m2
        .renewed_session_through_speaker(
            call(3_000),
            renewed.session.in_transit(now),
            Some(records),
            &sent,
            at(3_001),
        )
        .unwrap();
    assert!(lost.is_empty());
    assert_eq!(m2.held_session_locks(session.id).len(), 2);
    let rival = s3.acquire(request("a", 77, 3), &guard, now);
    assert!(matches!(rival, Err(Refusal::Held(_))), "{rival:?}");
}

#[test]
fn a_session_whose_record_at_the_node_ended_is_not_answered_lost_during_the_hold() {
    // Node 2's record of the session ends at 10 s; say its client moved
    // to node 1 meanwhile, which renewed it there to 15 s.
    let (m2, session) = held_through_node_2();
    // Speaker 3 rebuilds at 11 s in strict mode, reading neither 1 nor 2:
    // new grants are held back, the session may be on record at node 1.
    let now = at(11_000);
    let mut s3 = member(3, RebuildMode::Strict);
    s3.drop_table(Some(2), now);
    rebuild_reading(&mut s3, 2, vec![(3, Vec::new())], vec![1, 2], now);
    let now = at(11_500);
    let guard = leading(2, now);
    // Before protocol 7 (no record sent): "may be on record elsewhere".
    let plain = s3.renew_session(renewal(&m2, session.id, false), &guard, now);
    assert_eq!(plain.err(), Some(Refusal::MayBeOnRecordElsewhere));
    // With node 2's (ended) record: the same, not "not held".
    let asked = s3.renew_session(renewal(&m2, session.id, true), &guard, now);
    assert_eq!(asked.err(), Some(Refusal::RecordsWanted));
    let (record, locks) = records_of(&m2, session.id, 11_499);
    let taken = s3.reclaim_session(record, locks, &guard, now);
    assert_eq!(taken, Err(Refusal::MayBeOnRecordElsewhere));
}

#[test]
fn a_lock_of_a_session_is_not_taken_back_without_its_session() {
    // A client renews `a` alone through node 2 (a plain renewal, its
    // record sent): the table lacks `a` and its session.
    let (m2, session) = held_through_node_2();
    let mut s3 = next_speaker_missing_node_2();
    let now = at(3_000);
    let guard = leading(2, now);
    let id = LockId::from_u128(1);
    let record = m2.held_record(id).expect("node 2 records `a`");
    assert_eq!(record.session, Some(session.id));
    let record = record.in_transit(at(2_999)).arrive(now);
    let renewed = s3.renew(
        crate::common::renewal("a", id, 2, Some(record)),
        &guard,
        now,
    );
    assert!(renewed.is_err(), "{renewed:?}");
    assert!(
        s3.get("a", &guard, now).unwrap().is_none(),
        "a lock of a session the table lacks is not kept, held by no renewal"
    );
    let rival = s3.acquire(request("a", 77, 3), &guard, now);
    assert!(rival.is_ok(), "{rival:?}");
}
