//! Sessions at the member level: a renewal through the holder's node sends
//! no lock records when the node's records match the speaker's, the node
//! extends its own, and a next speaker reading that node alone keeps every
//! lock past its first lease.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Forwarded, MemberRead, RebuildInput, RebuildMode, SessionRenewal};
use locktable::{session_name, Acquired, Lock, LockId, Request};

fn grant(m: &mut leasehold_protocol::Member, request: Request, now: locktable::MonoTime) -> Lock {
    match m.acquire(request, &leading(1, now), now) {
        Ok((Acquired::Granted(lock), _)) => lock,
        other => panic!("not granted: {other:?}"),
    }
}

fn call(ms: u64) -> Forwarded {
    Forwarded {
        sent: at(ms),
        read_before: 0,
    }
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
        let renewal = SessionRenewal {
            id: session.id,
            lease: None,
            node: 2,
            digest: m2.session_digest(session.id),
            client_digest: None,
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
    let input = RebuildInput {
        term: 2,
        generation: s3.generation(),
        reads: [2, 3]
            .into_iter()
            .map(|member| MemberRead {
                member,
                max_lease: MAX_LEASE,
                copies: 2,
                uptime: None,
                locks: if member == 2 {
                    m2.own_report(now)
                } else {
                    Vec::new()
                },
                departed: Vec::new(),
            })
            .collect(),
        missing: vec![1],
        took: Duration::ZERO,
    };
    s3.rebuild(input, &leading(2, now), now).expect("rebuilt");
    for name in ["a", "b"] {
        let lock = s3.get(name, &leading(2, now), now).unwrap().expect(name);
        assert_eq!(lock.session, Some(session.id));
        assert!(
            lock.expires >= at(26_000),
            "{name} ends at the session's end"
        );
    }
}
