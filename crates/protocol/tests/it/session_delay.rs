//! Lock-delay on a lock of a session at the member level: the holder's
//! node and a copy holder keep each lock's record to its session's lease
//! end plus its delay, so a next speaker reading them keeps the lock while
//! its session lives, and keeps its name closed for the delay once the
//! session lapsed.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Member, RebuildMode, SessionLocks, SessionRenewal};
use locktable::{session_name, Acquired, Lock, LockId, MonoTime, Request};

const TERM: u64 = 1;
const DELAY: Duration = Duration::from_secs(5);

/// Speaker 1, and member 2 whose client holds a 10 s session opened at 0
/// and the lock `a` in it (a 5 s delay), granted at 1 s; the session
/// renewed through member 2 at 4 s (its lease now ends at 14 s).
fn renewed_session() -> (Member, Member, Lock, Lock) {
    let mut s1 = speaker(1, TERM, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant_for(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(sid), 900, 2)
        },
        TERM,
        at(0),
    );
    m2.granted_through_speaker(call(0), session.in_transit(at(0)), Duration::ZERO, at(1))
        .unwrap();
    let lock = grant_for(
        &mut s1,
        Request {
            session: Some(session.id),
            delay: DELAY,
            ..request("a", 1, 2)
        },
        TERM,
        at(1_000),
    );
    assert_eq!(lock.delay, DELAY);
    assert_eq!(lock.expires, session.expires + DELAY);
    m2.granted_through_speaker(
        call(1_000),
        lock.in_transit(at(1_000)),
        Duration::ZERO,
        at(1_001),
    )
    .unwrap();
    let sent = m2.session_sent(session.id);
    let renewal = SessionRenewal {
        id: session.id,
        lease: None,
        node: 2,
        digest: sent.digest,
        client_digest: None,
        session_copies: true,
        reclaimable: false,
    };
    let (renewed, _) = s1
        .renew_session(renewal, &leading(TERM, at(4_000)), at(4_000))
        .unwrap();
    assert!(
        renewed.records.is_none(),
        "the node's records are the table's"
    );
    m2.renewed_session_through_speaker(
        call(4_000),
        renewed.session.in_transit(at(4_000)),
        None,
        &sent,
        at(4_001),
    )
    .unwrap();
    (s1, m2, renewed.session, lock)
}

/// Member 3 rebuilds as the speaker of term 2 at `now`, reading member 2
/// (and itself; speaker 1 crashed).
fn next_speaker(m2: &Member, now: MonoTime) -> Member {
    let mut s3 = member(3, RebuildMode::Proceed);
    s3.drop_table(Some(2), now);
    let reads = vec![(2, m2.own_report(now)), (3, Vec::new())];
    rebuild_reading(&mut s3, 2, reads, vec![1], now);
    s3
}

#[test]
fn a_failover_while_the_session_lives_keeps_its_lock_and_its_delay() {
    let (_, m2, session, _) = renewed_session();
    let now = at(12_000);
    let s3 = next_speaker(&m2, now);
    let lock = s3.get("a", &leading(2, now), now).unwrap().expect("held");
    assert_eq!(lock.delay, DELAY);
    assert!(
        lock.lease_ends() >= at(14_000),
        "the lease ends with the session's ({:?}), not before: {lock:?}",
        session.lease_ends()
    );
    assert!(lock.expires >= at(19_000), "{lock:?}");
    assert!(!lock.is_lapsed(now));
}

#[test]
fn a_rebuild_after_the_session_lapsed_keeps_the_name_closed_until_the_delay_ends() {
    let (_, m2, _, lock) = renewed_session();
    // The session lapsed at 14 s; the speaker crashes, the next rebuilds.
    let now = at(16_000);
    let mut s3 = next_speaker(&m2, now);
    let kept = s3.get("a", &leading(2, now), now).unwrap().expect("closed");
    assert_eq!(kept.id, lock.id);
    assert!(kept.is_lapsed(now));
    let rival = |id| Request {
        lease: Some(Duration::from_secs(10)),
        ..request("a", id, 3)
    };
    let refused = s3.acquire(rival(2), &leading(2, at(17_000)), at(17_000));
    assert!(
        matches!(refused, Err(leasehold_protocol::Refusal::Held(_))),
        "{refused:?}"
    );
    let after = at(19_100);
    s3.poll(&leading(2, after), after);
    match s3.acquire(rival(3), &leading(2, after), after) {
        Ok((Acquired::Granted(next), _)) => assert!(next.fence > lock.fence),
        other => panic!("not granted once the delay ended: {other:?}"),
    }
}

#[test]
fn a_session_copy_carries_each_lock_to_its_lease_end_plus_its_delay() {
    let (mut s1, _, session, lock) = renewed_session();
    let mut m3 = member(3, RebuildMode::Proceed);
    let arrived = |l: &Lock, sent, arrives| l.in_transit(sent).arrive(arrives);
    m3.take_copies(
        TERM,
        vec![
            arrived(&session, at(4_000), at(4_001)),
            arrived(&lock, at(1_000), at(4_001)),
        ],
        TERM,
        at(4_001),
    )
    .unwrap();
    let renewal = SessionRenewal {
        id: session.id,
        lease: None,
        node: 2,
        digest: Some(lock.id.as_u128()),
        client_digest: None,
        session_copies: true,
        reclaimable: false,
    };
    let (renewed, _) = s1
        .renew_session(renewal, &leading(TERM, at(8_000)), at(8_000))
        .unwrap();
    let noted = SessionLocks {
        count: 1,
        digest: lock.id.as_u128(),
    };
    let copy = arrived(&renewed.session, at(8_000), at(8_001));
    assert!(m3
        .take_session_copy(TERM, copy, noted, TERM, at(8_001))
        .unwrap());
    // The session lapses at 18 s; a next speaker reads member 3 alone.
    let now = at(20_000);
    let mut s4 = member(4, RebuildMode::Proceed);
    s4.drop_table(Some(2), now);
    let reads = vec![(3, m3.own_report(now)), (4, Vec::new())];
    rebuild_reading(&mut s4, 2, reads, vec![1, 2], now);
    let kept = s4.get("a", &leading(2, now), now).unwrap().expect("closed");
    assert!(kept.is_lapsed(now));
    assert!(kept.expires >= at(23_000), "{kept:?}");
}

/// Member 2 keeps its client's record of `a` and a copy of a later renewal
/// of it (`Member::held_record`: "a `Held` from before the lock moved away,
/// a copy of a later renewal"); the copy counts the lease from its arrival,
/// half a second after the speaker's count. The session lapses at 14 s at
/// the speaker; a late renewal of it through member 2 is refused "not
/// held" at 14.3 s. By the Held record the lock lapsed, by the copy not
/// yet: `renewal_refused` judges by the later (the copy), finds it not
/// lapsed, and drops both, while the lock's name stays closed until 19 s.
#[test]
fn a_refused_late_session_renewal_keeps_a_lapsed_locks_records_whatever_record_counts_later() {
    let (s1, mut m2, _, lock) = renewed_session();
    let renewed = s1
        .get("a", &leading(TERM, at(4_000)), at(4_000))
        .unwrap()
        .expect("held");
    assert_eq!(renewed.lease_ends(), at(14_000));
    let copy = renewed.in_transit(at(4_000)).arrive(at(4_500));
    m2.take_copies(TERM, vec![copy], TERM, at(4_500)).unwrap();
    let now = at(14_300);
    m2.renewal_refused(lock.id, &leasehold_protocol::Refusal::NotHeld, now);
    let report = m2.own_report(at(14_400));
    assert!(
        report.iter().any(|l| l.id == lock.id),
        "the lapsed lock's name is closed until 19 s, yet member 2 dropped its records: {report:?}"
    );
}
