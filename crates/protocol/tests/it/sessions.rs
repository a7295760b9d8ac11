//! Sessions at the member level: a renewal through the holder's node sends
//! no lock records when the node's records match the speaker's, the node
//! extends its own, and a next speaker reading that node alone keeps every
//! lock past its first lease.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Guard, RebuildMode, SessionRenewal};
use locktable::{session_name, Acquired, Lock, LockId, Request};

fn grant(m: &mut leasehold_protocol::Member, request: Request, now: locktable::MonoTime) -> Lock {
    grant_for(m, request, 1, now)
}

#[test]
fn a_session_renewed_through_its_node_keeps_every_lock_past_a_speaker_crash() {
    let lease = Duration::from_secs(10);
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant(
        &mut s1,
        Request {
            lease: Some(lease),
            ..request(&session_name(sid), 900, 2)
        },
        at(0),
    );
    let in_transit = |lock: &Lock, now| lock.in_transit(now);
    m2.granted_through_speaker(call(0), in_transit(&session, at(0)), Duration::ZERO, at(1))
        .unwrap();
    for (name, id) in [("a", 1), ("b", 2)] {
        let lock = grant(
            &mut s1,
            Request {
                session: Some(session.id),
                ..request(name, id, 2)
            },
            at(1),
        );
        assert_eq!(lock.expires, session.expires);
        m2.granted_through_speaker(call(1), in_transit(&lock, at(1)), Duration::ZERO, at(2))
            .unwrap();
    }

    // Renewed through node 2 every 4 s for 16 s: no records travel.
    for t in [4_000, 8_000, 12_000, 16_000] {
        let sent = m2.session_sent(session.id);
        let renewal = SessionRenewal {
            id: session.id,
            lease: None,
            node: 2,
            digest: sent.digest,
            client_digest: None,
            session_copies: false,
            reclaimable: false,
        };
        let (renewed, _) = s1
            .renew_session(renewal, &leading(1, at(t)), at(t))
            .unwrap();
        assert_eq!(renewed.locks, 2);
        assert!(
            renewed.records.is_none(),
            "the node's records are the table's"
        );
        assert!(!renewed.copied);
        let (_, lost) = m2
            .renewed_session_through_speaker(
                call(t),
                renewed.session.in_transit(at(t)),
                None,
                &sent,
                at(t + 1),
            )
            .unwrap();
        assert!(lost.is_empty());
    }

    // The speaker crashes at 20 s, past every lock's first lease; the next
    // speaker reads node 2 (and itself): both locks are held to 26 s.
    let now = at(20_000);
    let mut s3 = member(3, RebuildMode::Proceed);
    s3.drop_table(Some(2), now);
    let reads = vec![(2, m2.own_report(now)), (3, Vec::new())];
    rebuild_reading(&mut s3, 2, reads, vec![1], now);
    for name in ["a", "b"] {
        let lock = s3.get(name, &leading(2, now), now).unwrap().expect(name);
        assert_eq!(lock.session, Some(session.id));
        assert!(
            lock.expires >= at(26_000),
            "{name} ends at the session's end"
        );
    }
}

fn renew_via(
    s: &mut leasehold_protocol::Member,
    m: &mut leasehold_protocol::Member,
    sid: LockId,
    sent: u64,
    arrives: u64,
) -> Vec<Lock> {
    let node = m.id();
    let at_send = m.session_sent(sid);
    let renewal = SessionRenewal {
        id: sid,
        lease: None,
        node,
        digest: at_send.digest,
        client_digest: None,
        session_copies: false,
        reclaimable: false,
    };
    let (renewed, _) = s
        .renew_session(renewal, &leading(1, at(sent)), at(sent))
        .unwrap();
    // The follower's Held is polled while the answer is on its way.
    m.poll(&leading(1, at(arrives)), at(arrives));
    let records = renewed
        .records
        .map(|r| r.iter().map(|l| l.in_transit(at(sent))).collect());
    let (_, lost) = m
        .renewed_session_through_speaker(
            call(sent),
            renewed.session.in_transit(at(sent)),
            records,
            &at_send,
            at(arrives),
        )
        .unwrap_or_else(|refusal| {
            // Refused: the client retries at once, through the same node.
            renew_once_more(s, m, sid, arrives, refusal)
        });
    lost
}

fn renew_once_more(
    s: &mut leasehold_protocol::Member,
    m: &mut leasehold_protocol::Member,
    sid: LockId,
    sent: u64,
    refusal: leasehold_protocol::Refusal,
) -> (Lock, Vec<Lock>) {
    assert_eq!(refusal, leasehold_protocol::Refusal::NotRebuilt);
    let at_send = m.session_sent(sid);
    let renewal = SessionRenewal {
        id: sid,
        lease: None,
        node: m.id(),
        digest: at_send.digest,
        client_digest: None,
        session_copies: false,
        reclaimable: false,
    };
    let (renewed, _) = s
        .renew_session(renewal, &leading(1, at(sent)), at(sent))
        .unwrap();
    let records = renewed
        .records
        .map(|r| r.iter().map(|l| l.in_transit(at(sent))).collect());
    m.renewed_session_through_speaker(
        call(sent),
        renewed.session.in_transit(at(sent)),
        records,
        &at_send,
        at(sent + 1),
    )
    .unwrap()
}

/// A client alternates nodes: node 3's records of the session and its
/// lock are stale (the lock moved to node 2) and end while a renewal
/// through node 3 is on its way. Its digest (sent before they ended)
/// matched the speaker's, so no records came back, and node 3 extended
/// nothing: the renewal is answered, yet the lock's only other record is
/// node 2's older one. The speaker crashes between the two ends: the lock
/// is gone while its client holds it.
#[test]
fn a_renewal_whose_records_end_on_the_way_keeps_the_lock_on_record() {
    let lease = Duration::from_secs(10);
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let mut m3 = member(3, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant(
        &mut s1,
        Request {
            lease: Some(lease),
            ..request(&session_name(sid), 900, 3)
        },
        at(0),
    );
    m3.granted_through_speaker(call(0), session.in_transit(at(0)), Duration::ZERO, at(1))
        .unwrap();
    let lock = grant(
        &mut s1,
        Request {
            session: Some(session.id),
            ..request("a", 1, 3)
        },
        at(0),
    );
    m3.granted_through_speaker(call(0), lock.in_transit(at(0)), Duration::ZERO, at(1))
        .unwrap();
    // Renewed through node 2 (the lock's record moves there), then
    // through node 3 again just before its old records end at 10 s.
    assert!(renew_via(&mut s1, &mut m2, sid, 4_000, 4_001).is_empty());
    assert!(renew_via(&mut s1, &mut m2, sid, 8_000, 8_001).is_empty());
    let lost = renew_via(&mut s1, &mut m3, sid, 9_990, 10_010);
    assert!(lost.is_empty(), "the client was told it holds the lock");
    // The client holds the lock to 19.99 s. The speaker crashes at 18.5 s,
    // past node 2's record (18 s).
    let now = at(18_500);
    let mut s3 = m3;
    s3.drop_table(Some(2), now);
    let reads = vec![(2, m2.own_report(now)), (3, s3.own_report(now))];
    rebuild_reading(&mut s3, 2, reads, vec![1], now);
    assert!(
        s3.get("a", &leading(2, now), now).unwrap().is_some(),
        "the lock its client holds to 19.99 s is on record"
    );
}

/// A named acquisition in a session whose first try is still being put on
/// record when its retry comes: the retry finds its own grant and is
/// answered with it (a lock of a session is not renewed on its own). The
/// first try then fails (its copy was refused, or its caller went away)
/// and its grant is taken back: the lock the retry's client now holds is
/// freed, and granted to another.
#[test]
fn a_retry_answered_with_its_own_session_lock_keeps_it_from_a_take_back() {
    use leasehold_protocol::{Acquisition, Named};
    let now = at(0);
    let guard = leading(1, now);
    let mut s1 = speaker(1, 1, now, vec![], RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant(&mut s1, request(&session_name(sid), 900, 1), now);
    let named = Named {
        holder: "h",
        request: "r1",
        wall_ms: 1_700_000_000_000,
    };
    let in_session = |id| Request {
        session: Some(session.id),
        ..request("a", id, 1)
    };
    let first = match s1.acquire_named(in_session(7), Some(named), &guard, now) {
        Ok(Acquisition::Table(Acquired::Granted(lock), _)) => lock,
        other => panic!("not granted: {other:?}"),
    };
    let later = at(100);
    let retry = s1.acquire_named(in_session(8), Some(named), &leading(1, later), later);
    let Ok(Acquisition::Own(own)) = retry else {
        panic!("not its own grant: {retry:?}");
    };
    assert_eq!(own.id, first.id, "the retry's client holds the lock");
    // The first try's copy fails: its grant is taken back.
    s1.take_back(&first, &leading(1, at(200)), at(200));
    let held = s1.get("a", &leading(1, at(200)), at(200)).unwrap();
    assert_eq!(
        held.map(|l| l.id),
        Some(first.id),
        "a lock answered to its client is not taken back"
    );
}

/// The other way: a grant in a session its client never heard of (its copy
/// failed) is taken back even though the session was renewed meanwhile
/// (which gives every lock of it a later end, as a renewal would).
#[test]
fn a_session_renewal_does_not_keep_a_grant_nobody_heard_of() {
    let now = at(0);
    let mut s1 = speaker(1, 1, now, vec![], RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant(&mut s1, request(&session_name(sid), 900, 1), now);
    let lock = grant(
        &mut s1,
        Request {
            session: Some(session.id),
            ..request("a", 7, 1)
        },
        at(10),
    );
    let renewal = SessionRenewal {
        id: session.id,
        lease: None,
        node: 1,
        digest: None,
        client_digest: None,
        session_copies: false,
        reclaimable: false,
    };
    s1.renew_session(renewal, &leading(1, at(100)), at(100))
        .unwrap();
    s1.take_back(&lock, &leading(1, at(200)), at(200));
    let held = s1.get("a", &leading(1, at(200)), at(200)).unwrap();
    assert_eq!(held, None, "nobody holds it: taken back");
}

/// A session closed while a lock of it is being acquired through node 2:
/// the speaker grants the lock, the close releases it (node 2, its node, is
/// told to forget it), and the grant's answer reaches node 2 after the
/// release. Node 2 must not record it nor answer it to its client: its
/// record would outlive the release and bring the lock back at the next
/// rebuild, and its client would hold a lock already released.
#[test]
fn a_grant_answered_after_its_session_closed_is_not_recorded() {
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let session = grant(&mut s1, request(&session_name(sid), 900, 2), at(0));
    m2.granted_through_speaker(call(0), session.in_transit(at(0)), Duration::ZERO, at(1))
        .unwrap();
    let lock = grant(
        &mut s1,
        Request {
            session: Some(session.id),
            ..request("a", 1, 2)
        },
        at(10),
    );
    let released = s1
        .release_session(session.id, &leading(1, at(20)), at(20))
        .unwrap();
    assert_eq!(released.len(), 2);
    for (l, _) in &released {
        m2.forget(
            &l.name,
            l.id,
            Some(l.ttl(at(20))),
            &Guard::default(),
            at(30),
        );
    }
    let answered =
        m2.granted_through_speaker(call(10), lock.in_transit(at(10)), Duration::ZERO, at(40));
    assert!(
        answered.is_err(),
        "answered a lock released before: {answered:?}"
    );
    assert!(m2.held_record(lock.id).is_none());
}

/// The sabotage `session-locks-unfollowed` (the chaos suite's
/// `ignore_session_renewal`): the speaker renews a session's grant alone,
/// so its lock keeps its first end and lapses while the session runs, and
/// the next renewal counts it gone. Without it, the lock follows.
#[test]
fn a_sessions_lock_follows_its_renewal_unless_sabotaged() {
    for unfollowed in [false, true] {
        let lease = Duration::from_secs(10);
        let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
        s1.set_sabotage(leasehold_protocol::Sabotage {
            session_locks_unfollowed: unfollowed,
            ..leasehold_protocol::Sabotage::NONE
        });
        let sid = LockId::from_u128(900);
        let session = grant(
            &mut s1,
            Request {
                lease: Some(lease),
                ..request(&session_name(sid), 900, 2)
            },
            at(0),
        );
        let lock = grant(
            &mut s1,
            Request {
                session: Some(session.id),
                ..request("a", 1, 2)
            },
            at(1),
        );
        let renew = |s1: &mut leasehold_protocol::Member, t| {
            let renewal = SessionRenewal {
                id: session.id,
                lease: None,
                node: 2,
                digest: Some(locktable::session::digest([lock.id])),
                client_digest: None,
                session_copies: false,
                reclaimable: false,
            };
            let (renewed, _) = s1
                .renew_session(renewal, &leading(1, at(t)), at(t))
                .unwrap();
            renewed
        };
        let renewed = renew(&mut s1, 8_000);
        assert_eq!(renewed.session.expires, at(18_000));
        assert_eq!(renewed.locks, 1);
        // The expiry task runs at 12 s.
        s1.poll(&leading(1, at(12_000)), at(12_000));
        let held = s1.get("a", &leading(1, at(12_000)), at(12_000)).unwrap();
        assert_eq!(
            held.map(|l| l.expires),
            (!unfollowed).then_some(at(18_000)),
            "unfollowed: {unfollowed}"
        );
        let renewed = renew(&mut s1, 12_000);
        assert_eq!(renewed.locks, usize::from(!unfollowed));
    }
}

/// The sabotage `session-end-leaves-locks`: a session's close releases its
/// grant alone, and a renewal gives its locks a lease past the session's
/// end, so a lock outlasts its session's close and its lapse. Without it,
/// both free the lock.
#[test]
fn a_sessions_end_frees_its_locks_unless_sabotaged() {
    for sabotaged in [false, true] {
        let lease = Duration::from_secs(10);
        let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
        s1.set_sabotage(leasehold_protocol::Sabotage {
            session_end_leaves_locks: sabotaged,
            ..leasehold_protocol::Sabotage::NONE
        });
        // Session 900 holds "a" and is closed; 901 holds "b" and lapses.
        let mut sessions = Vec::new();
        for (sid, name, id) in [(900, "a", 1), (901, "b", 2)] {
            let session = grant(
                &mut s1,
                Request {
                    lease: Some(lease),
                    ..request(&session_name(LockId::from_u128(sid)), sid, 2)
                },
                at(0),
            );
            let lock = grant(
                &mut s1,
                Request {
                    session: Some(session.id),
                    ..request(name, id, 2)
                },
                at(1),
            );
            let renewal = SessionRenewal {
                id: session.id,
                lease: None,
                node: 2,
                digest: Some(locktable::session::digest([lock.id])),
                client_digest: None,
                session_copies: false,
                reclaimable: false,
            };
            let (renewed, _) = s1
                .renew_session(renewal, &leading(1, at(4_000)), at(4_000))
                .unwrap();
            assert_eq!(renewed.session.expires, at(14_000), "the session's own end");
            sessions.push(session.id);
        }
        let released = s1
            .release_session(sessions[0], &leading(1, at(5_000)), at(5_000))
            .unwrap();
        assert_eq!(released.len(), if sabotaged { 1 } else { 2 });
        let held = |s1: &leasehold_protocol::Member, name, t| {
            s1.get(name, &leading(1, at(t)), at(t)).unwrap().is_some()
        };
        assert_eq!(held(&s1, "a", 5_000), sabotaged, "closed: {sabotaged}");
        // The expiry task runs after the lapse of 901.
        s1.poll(&leading(1, at(15_000)), at(15_000));
        assert_eq!(held(&s1, "b", 15_000), sabotaged, "lapsed: {sabotaged}");
    }
}
