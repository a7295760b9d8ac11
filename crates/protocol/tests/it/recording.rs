//! A grant or renewal put on record, start to end (`Member::start_on_record`),
//! as a driver carries it out: the copies it is told to send, and the one
//! decision that ends it.

use leasehold_protocol::{Member, RebuildMode, RecordOut, Recording, Refusal};
use locktable::{Acquired, Lock, MonoTime, NodeId};

use crate::common::*;

/// What `r` says to do now, taken out.
fn outs(r: &mut Recording) -> Vec<RecordOut> {
    std::iter::from_fn(|| r.poll()).collect()
}

/// Member 1 speaking for term 3 at 0 ms, with the lock `a` just granted to
/// a client of `holder`, and the recording of it started.
fn granted_to(holder: NodeId) -> (Member, Lock, Recording) {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let Ok((Acquired::Granted(lock), made)) = m.acquire(request("a", 1, holder), &guard, now)
    else {
        panic!("granted")
    };
    let r = m.start_on_record(&lock, holder, made, &guard, now);
    (m, lock, r)
}

#[test]
fn a_copy_refused_is_sent_to_the_next_member_and_the_first_ack_decides() {
    let (mut m, lock, mut r) = granted_to(1);
    let guard = leading(3, at(1));
    assert_eq!(outs(&mut r), [RecordOut::Copy(2)], "one copy more");
    assert_eq!(r.term(), 3);
    r.answered(&mut m, &lock, 2, false, &guard, at(1));
    assert_eq!(outs(&mut r), [RecordOut::Copy(3)]);
    r.answered(&mut m, &lock, 2, false, &guard, at(1));
    assert!(
        outs(&mut r).is_empty(),
        "an answer after its timeout counts once"
    );
    assert!(!r.is_decided());
    r.answered(&mut m, &lock, 3, true, &guard, at(2));
    assert_eq!(outs(&mut r), [RecordOut::Decided(Ok(()))]);
    assert!(r.is_decided());
    assert_eq!(r.acked(), &[3]);
    r.answered(&mut m, &lock, 2, true, &guard, at(3));
    assert!(outs(&mut r).is_empty(), "nothing once decided");
}

#[test]
fn a_grant_the_speaker_and_the_holder_keep_is_decided_at_once() {
    let (_, _, mut r) = granted_to(2);
    assert_eq!(outs(&mut r), [RecordOut::Decided(Ok(()))]);
}

#[test]
fn a_grant_whose_table_stopped_speaking_meanwhile_is_refused() {
    let (mut m, lock, mut r) = granted_to(1);
    outs(&mut r);
    m.drop_table(Some(4), at(1));
    r.answered(&mut m, &lock, 2, true, &leading(4, at(1)), at(1));
    assert_eq!(outs(&mut r), [RecordOut::Decided(Err(Refusal::MovedOn))]);
}

#[test]
fn with_no_answer_to_come_it_is_decided_on_what_was_acknowledged() {
    let (m, _, mut r) = granted_to(1);
    outs(&mut r);
    let now: MonoTime = at(3_000);
    r.decide(&m, &leading(3, now), now);
    assert_eq!(
        outs(&mut r),
        [RecordOut::Decided(Err(Refusal::TooFewCopies {
            reached: 0,
            needed: 1,
            copies: 2
        }))]
    );
    r.decide(&m, &leading(3, now), now);
    assert!(outs(&mut r).is_empty(), "decided once");
}

/// Member 1 of five speaking for term 3 with `--copies 3`, the lock `a`
/// granted to its own client: two copies are needed at once.
fn granted_with_three_copies() -> (Member, Lock, Recording) {
    use leasehold_protocol::{MemberConfig, MemberRead, RebuildInput};
    use locktable::LeaseRule;
    let now = at(0);
    let guard = leading(3, now);
    let mut m = Member::new(MemberConfig {
        id: 1,
        members: vec![1, 2, 3, 4, 5],
        copy_to: vec![1, 2, 3, 4, 5],
        copies: 3,
        lease: LeaseRule {
            default: LEASE,
            max: MAX_LEASE,
        },
        rebuild_mode: RebuildMode::Proceed,
        leader_lease: LEADER_LEASE,
        rebuild_timeout: REBUILD_TIMEOUT,
        sabotage: leasehold_protocol::Sabotage::NONE,
    });
    m.drop_table(Some(3), now);
    let reads = (1..=5)
        .map(|r| MemberRead {
            member: r,
            max_lease: MAX_LEASE,
            copies: 3,
            uptime: None,
            locks: Vec::new(),
            departed: Vec::new(),
        })
        .collect();
    let input = RebuildInput {
        term: 3,
        generation: m.generation(),
        reads,
        missing: vec![],
        took: std::time::Duration::ZERO,
    };
    m.rebuild(input, &guard, now).expect("rebuilt");
    let Ok((Acquired::Granted(lock), made)) = m.acquire(request("a", 1, 1), &guard, now) else {
        panic!("granted")
    };
    let r = m.start_on_record(&lock, 1, made, &guard, now);
    (m, lock, r)
}

#[test]
fn every_copy_noted_is_one_to_send() {
    let (_, _, mut r) = granted_with_three_copies();
    assert_eq!(outs(&mut r), [RecordOut::Copy(2), RecordOut::Copy(3)]);
}

#[test]
fn an_answer_after_an_early_decision_decides_nothing() {
    let (mut m, lock, mut r) = granted_with_three_copies();
    outs(&mut r);
    let guard = leading(3, at(1));
    r.decide(&m, &guard, at(1));
    assert!(matches!(outs(&mut r)[..], [RecordOut::Decided(Err(_))]));
    r.answered(&mut m, &lock, 2, true, &guard, at(2));
    r.answered(&mut m, &lock, 3, true, &guard, at(2));
    assert!(outs(&mut r).is_empty(), "decided once");
}

#[test]
fn an_ack_after_the_leader_lease_lapsed_is_refused() {
    let (mut m, lock, mut r) = granted_to(1);
    outs(&mut r);
    // No quorum heard since 0 ms; the ack comes 1.5 s later.
    let stale = leading(3, at(0));
    r.answered(&mut m, &lock, 2, true, &stale, at(1_500));
    let got = outs(&mut r);
    assert!(matches!(got[..], [RecordOut::Decided(Err(_))]), "{got:?}");
}

#[test]
fn a_copy_unanswered_past_the_hedge_is_sent_to_the_next_member_too_and_either_ack_decides() {
    let (mut m, lock, mut r) = granted_to(1);
    assert_eq!(outs(&mut r), [RecordOut::Copy(2)]);
    let guard = leading(3, at(200));
    r.hedge(&mut m, &lock, 2, &guard, at(200));
    assert_eq!(outs(&mut r), [RecordOut::Copy(3)], "member 3 as well");
    r.hedge(&mut m, &lock, 2, &guard, at(400));
    assert!(outs(&mut r).is_empty(), "a copy is hedged once");
    r.hedge(&mut m, &lock, 3, &guard, at(400));
    assert!(outs(&mut r).is_empty(), "no member is left to try");
    r.answered(&mut m, &lock, 3, true, &guard, at(410));
    assert_eq!(outs(&mut r), [RecordOut::Decided(Ok(()))]);
    assert_eq!(r.acked(), &[3]);

    // Both members were noted before their copies left: a release is
    // passed on to each, the silent one included.
    let (_, members) = m.release("a", lock.id, &guard, at(420)).expect("released");
    assert!(members.contains(2) && members.contains(3), "{members:?}");

    // The silent member is tried last from then on.
    let Ok((Acquired::Granted(b), made)) = m.acquire(request("b", 2, 1), &guard, at(430)) else {
        panic!("granted")
    };
    let mut next = m.start_on_record(&b, 1, made, &guard, at(430));
    assert_eq!(outs(&mut next), [RecordOut::Copy(3)]);
}

#[test]
fn the_silent_member_answering_after_the_hedge_decides_as_well() {
    let (mut m, lock, mut r) = granted_to(1);
    outs(&mut r);
    let guard = leading(3, at(200));
    r.hedge(&mut m, &lock, 2, &guard, at(200));
    assert_eq!(outs(&mut r), [RecordOut::Copy(3)]);
    r.answered(&mut m, &lock, 2, true, &guard, at(250));
    assert_eq!(outs(&mut r), [RecordOut::Decided(Ok(()))]);
    assert_eq!(r.acked(), &[2]);
    r.answered(&mut m, &lock, 3, true, &guard, at(260));
    assert!(outs(&mut r).is_empty(), "decided once");
}

#[test]
fn a_hedge_after_the_copy_was_answered_sends_nothing() {
    let (mut m, lock, mut r) = granted_with_three_copies();
    assert_eq!(outs(&mut r), [RecordOut::Copy(2), RecordOut::Copy(3)]);
    let guard = leading(3, at(200));
    r.answered(&mut m, &lock, 2, true, &guard, at(100));
    r.hedge(&mut m, &lock, 2, &guard, at(200));
    assert!(outs(&mut r).is_empty(), "2 answered already");
    r.hedge(&mut m, &lock, 3, &guard, at(200));
    assert_eq!(outs(&mut r), [RecordOut::Copy(4)]);
    r.answered(&mut m, &lock, 4, true, &guard, at(250));
    assert_eq!(outs(&mut r), [RecordOut::Decided(Ok(()))]);
}
