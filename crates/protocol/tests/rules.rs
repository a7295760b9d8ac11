//! The protocol's rules about time and the guard, each on a fake clock, so
//! that reverting one fails a test: where leases are counted from, when a
//! speaker stops granting, for which term, how long strict mode holds new
//! grants back, and who hears of a release.

use std::time::Duration;

use leasehold_protocol::{Forwarded, Guard, Members, RebuildMode, Refusal, LEASE_MARGIN};
use locktable::{Fence, Lock, LockId};

mod common;

use common::*;

#[test]
fn a_speaker_grants_until_the_margin_before_its_leader_lease_ends() {
    let acked = at(0);
    let mut m = speaker(1, 3, acked, vec![], RebuildMode::Proceed);
    let guard = leading(3, acked);
    let last = acked + LEADER_LEASE - LEASE_MARGIN - Duration::from_nanos(1);
    granted(&mut m, "a", 1, 1, &guard, last);
    let refused = m.acquire(request("b", 2, 1), &guard, last + Duration::from_nanos(1));
    assert_eq!(refused.err(), Some(Refusal::NotRebuilt));
    assert!(!m.may_speak(&guard, acked + LEADER_LEASE - LEASE_MARGIN));
}

#[test]
fn a_speaker_grants_only_for_the_term_its_table_was_rebuilt_in() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let newer = leading(4, now);
    assert_eq!(
        m.acquire(request("a", 1, 1), &newer, now).err(),
        Some(Refusal::NotRebuilt),
        "Raft says term 4; the table speaks for 3"
    );
    assert_eq!(
        m.acquire(request("a", 1, 1), &Guard::FOLLOWER, now).err(),
        Some(Refusal::NotRebuilt)
    );
    granted(&mut m, "a", 1, 1, &leading(3, now), now);
}

#[test]
fn a_grant_through_the_speaker_is_counted_from_the_send_plus_the_time_served() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(1_000),
        read_before: 0,
    };
    let served = Duration::from_millis(200);
    // The answer arrives 700 ms after the send.
    let lock = m
        .granted_through_speaker(call, in_transit(7, 1, LEASE), served, at(1_700))
        .unwrap();
    assert_eq!(lock.expires, at(1_200) + LEASE);
    assert_eq!(m.held_record(lock.id).unwrap().expires, at(1_200) + LEASE);
}

#[test]
fn a_renewal_through_the_speaker_is_counted_from_the_send_not_the_answer() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(1_000),
        read_before: 0,
    };
    let lock = m
        .renewed_through_speaker(call, in_transit(7, 1, LEASE), at(1_500))
        .unwrap();
    assert_eq!(lock.expires, at(1_000) + LEASE);
    assert_eq!(m.held_record(lock.id).unwrap().expires, at(1_000) + LEASE);
}

#[test]
fn an_answer_a_newer_speakers_read_overtook_is_refused_and_not_recorded() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(0),
        read_before: 3,
    };
    assert!(m.deposed_by(4, at(10)));
    let renewed = m.renewed_through_speaker(call, in_transit(7, 3, LEASE), at(20));
    assert_eq!(renewed.err(), Some(Refusal::ReadMeanwhile { read: 4 }));
    assert!(m.held_record(LockId::from_u128(7)).is_none());
    // A grant made by term 4 itself came after term 4's read of this node.
    let granted = m.granted_through_speaker(call, in_transit(8, 4, LEASE), Duration::ZERO, at(20));
    assert!(granted.is_ok());
}

#[test]
fn a_not_held_renewal_drops_the_record_and_other_refusals_keep_it() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(0),
        read_before: 0,
    };
    let id = LockId::from_u128(7);
    m.renewed_through_speaker(call, in_transit(7, 1, LEASE), at(1))
        .unwrap();
    m.renewal_refused(id, &Refusal::NotRebuilt);
    assert!(
        m.held_record(id).is_some(),
        "the speaker may not be rebuilt yet"
    );
    m.renewal_refused(id, &Refusal::NotHeld);
    assert!(m.held_record(id).is_none());
}

#[test]
fn strict_mode_holds_new_grants_back_for_the_longest_lease_and_a_leader_lease() {
    // Two members missing with two copies: a grant may be unseen.
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![2, 3], RebuildMode::Strict);
    let report = m.last_rebuild().unwrap().clone();
    assert!(!report.all_seen);
    let hold = MAX_LEASE + LEADER_LEASE;
    assert_eq!(report.held_back_ms, hold.as_millis() as u64);
    let before = now + hold - Duration::from_millis(1);
    let refused = m.acquire(request("a", 1, 1), &leading(3, before), before);
    assert_eq!(refused.err(), Some(Refusal::NotRebuilt));
    let after = now + hold;
    granted(&mut m, "a", 1, 1, &leading(3, after), after);
}

#[test]
fn a_rebuild_that_missed_fewer_members_than_copies_holds_nothing_back() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![3], RebuildMode::Strict);
    let report = m.last_rebuild().unwrap();
    assert!(report.all_seen);
    assert_eq!(report.held_back_ms, 0);
    granted(&mut m, "a", 1, 1, &leading(3, now), now);
}

#[test]
fn a_renewal_of_a_lock_the_held_back_table_lacks_is_not_answered_not_held() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![2, 3], RebuildMode::Strict);
    let renewing = renewal("a", LockId::from_u128(9), 2, None);
    let refused = m.renew(renewing, &leading(3, now), now);
    assert_eq!(refused.err(), Some(Refusal::MayBeOnRecordElsewhere));
}

#[test]
fn a_release_reaches_the_holders_node_the_members_it_moved_from_and_the_copy_holders() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    // Held through node 3, then renewed through node 2.
    let lock = granted(&mut m, "a", 1, 3, &guard, now);
    let renewing = renewal("a", lock.id, 2, None);
    m.renew(renewing, &guard, now).unwrap();
    let (_, to) = m.release("a", lock.id, &guard, now).unwrap();
    assert_eq!(to, m.member(2).with(m.member(3)));
    // A client of the speaker, its copy sent to member 2.
    let own = granted(&mut m, "b", 2, 1, &guard, now);
    m.copy_sent(2, &own, now);
    let (_, to) = m.release("b", own.id, &guard, now).unwrap();
    assert_eq!(to, m.member(1).with(m.member(2)));
    assert_eq!(m.others_in(to).collect::<Vec<_>>(), [2], "never itself");
    // A lock granted in an earlier term may be on record anywhere.
    let old = Lock {
        fence: Fence::new(2, 1),
        ..granted(&mut m, "c", 3, 2, &guard, now)
    };
    assert_eq!(m.take_back(&old, now), Members::ALL);
    assert_eq!(m.others_in(Members::ALL).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn copies_from_an_older_term_than_one_seen_are_refused() {
    let mut m = member(3, RebuildMode::Proceed);
    let copy = in_transit(5, 4, LEASE).arrive(at(0));
    assert_eq!(
        m.take_copies(4, vec![copy.clone()], 5, at(0)).err(),
        Some(Refusal::StaleCopies { term: 4, seen: 5 })
    );
    m.deposed_by(6, at(0));
    assert_eq!(
        m.take_copies(5, vec![copy.clone()], 5, at(0)).err(),
        Some(Refusal::StaleCopies { term: 5, seen: 6 }),
        "a read by term 6 counts as seeing it"
    );
    m.take_copies(6, vec![copy], 6, at(0)).unwrap();
    assert!(m.held_record(LockId::from_u128(5)).is_some());
}
