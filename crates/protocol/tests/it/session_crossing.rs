//! A session's renewal and a grant in the session cross: the speaker
//! answers the renewal with the session's locks as its table had them,
//! without the grant it made after; the renewing node recorded the grant
//! before the renewal's answer came. The grant's record is kept: it is one
//! of the two records the grant's answer counted on.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{RebuildMode, SessionRenewal};
use locktable::{session_name, Lock, LockId, Request};

#[test]
fn a_grant_made_after_a_sessions_renewal_keeps_its_record_when_the_renewal_answers() {
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let session = grant_for(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(LockId::from_u128(900)), 900, 2)
        },
        1,
        at(0),
    );
    let in_session = |name: &str, id: u128| Request {
        session: Some(session.id),
        ..request(name, id, 2)
    };
    let a = grant_for(&mut s1, in_session("a", 1), 1, at(1));
    for lock in [&session, &a] {
        m2.granted_through_speaker(call(1), lock.in_transit(at(1)), Duration::ZERO, at(2))
            .unwrap();
    }

    // Node 2 forwards the session's renewal at 100 ms, its client's digest
    // naming a lock it no longer counts: the answer lists the locks.
    let sent = m2.session_sent(session.id);
    let renewal = SessionRenewal {
        id: session.id,
        lease: None,
        node: 2,
        digest: sent.digest,
        client_digest: Some(0xdead),
        session_copies: true,
        reclaimable: true,
    };
    let (renewed, _) = s1
        .renew_session(renewal, &leading(1, at(110)), at(110))
        .unwrap();
    let records: Vec<_> = renewed.records.expect("the digests differ");
    assert_eq!(records.iter().map(|l| l.id).collect::<Vec<_>>(), [a.id]);

    // Then `b` is granted in the session, and node 2 records it first.
    let b = grant_for(&mut s1, in_session("b", 2), 1, at(120));
    let b_answer = b.in_transit(at(120));
    m2.granted_through_speaker(call(115), b_answer, Duration::ZERO, at(125))
        .unwrap();

    // The renewal's answer arrives.
    let records = records
        .iter()
        .map(|l: &Lock| l.in_transit(at(110)))
        .collect();
    let (_, lost) = m2
        .renewed_session_through_speaker(
            call(100),
            renewed.session.in_transit(at(110)),
            Some(records),
            &sent,
            at(130),
        )
        .unwrap();
    assert!(lost.is_empty(), "{lost:?}");
    assert!(
        m2.held_record(b.id).is_some(),
        "the grant's record, counted on by its answer, is kept"
    );
    // A lock the node recorded at the send and the speaker lacks is lost.
    let sent = m2.session_sent(session.id);
    let (_, lost) = m2
        .renewed_session_through_speaker(
            call(200),
            renewed.session.in_transit(at(210)),
            Some(vec![a.in_transit(at(210))]),
            &sent,
            at(220),
        )
        .unwrap();
    assert_eq!(lost.iter().map(|l| l.id).collect::<Vec<_>>(), [b.id]);
}
