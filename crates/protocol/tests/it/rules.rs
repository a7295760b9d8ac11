//! The protocol's rules about time and the guard, each on a fake clock, so
//! that reverting one fails a test: where leases are counted from, when a
//! speaker stops granting, for which term, how long strict mode holds new
//! grants back, and who hears of a release.

use std::time::Duration;

use leasehold_protocol::{
    Forwarded, Guard, Member, MemberConfig, MemberRead, Members, PeerTerms, RebuildInput,
    RebuildMode, Refusal, LEASE_MARGIN,
};
use locktable::MonoTime;
use locktable::{Fence, Lock, LockId};

use crate::common;

use common::*;

#[test]
fn a_speaker_grants_until_the_margin_before_its_leader_lease_ends() {
    let acked = at(0);
    let mut m = speaker(1, 3, acked, vec![], RebuildMode::Proceed);
    let guard = leading(3, acked);
    let last = acked + LEADER_LEASE - LEASE_MARGIN - Duration::from_nanos(1);
    granted(&mut m, "a", 1, 1, &guard, last);
    let refused = m.acquire(request("b", 2, 1), &guard, last + Duration::from_nanos(1));
    assert_eq!(refused.err(), Some(Refusal::Unconfirmed));
    assert!(!m.may_speak(&guard, acked + LEADER_LEASE - LEASE_MARGIN));
}

#[test]
fn a_speaker_grants_only_for_the_term_its_table_was_rebuilt_in() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let newer = leading(4, now);
    assert_eq!(
        m.acquire(request("a", 1, 1), &newer, now).err(),
        Some(Refusal::NotSpeaking),
        "Raft says term 4; the table speaks for 3"
    );
    assert_eq!(
        m.acquire(request("a", 1, 1), &Guard::FOLLOWER, now).err(),
        Some(Refusal::NotSpeaking)
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

/// A renewal and a release of one lock forwarded together, the release
/// answered first: the renewal's late answer must not bring the record
/// back (a next rebuild would hold the released name for a whole lease).
#[test]
fn a_renewal_answered_after_the_release_is_not_recorded() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(0),
        read_before: 0,
    };
    let id = LockId::from_u128(7);
    m.renewed_through_speaker(call, in_transit(7, 1, LEASE), at(1))
        .unwrap();
    let released = in_transit(7, 1, LEASE).arrive(at(10));
    m.released_through_speaker(&released, &Guard::default(), at(10));
    assert!(m.held_record(id).is_none());
    let late = Forwarded {
        sent: at(5),
        read_before: 0,
    };
    let renewed = m.renewed_through_speaker(late, in_transit(7, 1, LEASE), at(20));
    assert_eq!(renewed.err(), Some(Refusal::NotHeld));
    assert!(m.held_record(id).is_none(), "no ghost record");
    assert!(m.records(at(20)).is_empty());
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
    m.renewal_refused(id, &Refusal::NotRebuilt, at(2));
    assert!(
        m.held_record(id).is_some(),
        "the speaker may not be rebuilt yet"
    );
    m.renewal_refused(id, &Refusal::NotHeld, at(2));
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
    assert_eq!(refused.err(), Some(Refusal::HeldBack));
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
    assert_eq!(m.take_back(&old, &guard, now), Members::ALL);
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

fn terms(copies: Option<usize>, max_lease: Duration, leader_lease: Duration) -> PeerTerms {
    PeerTerms {
        copies,
        max_lease,
        leader_lease: Some(leader_lease),
    }
}

/// A member of `members` making `copies`, as a membership change leaves it
/// at `now`.
fn grown(mut m: Member, members: Vec<u64>, copies: usize, now: MonoTime) -> Member {
    m.set_members(members.clone(), members, copies, now);
    m
}

#[test]
fn a_rise_of_copies_keeps_the_fewer_count_for_a_lease_and_a_leader_lease() {
    // A single node speaking, with one copy.
    let mut m = speaker(1, 3, at(0), vec![], RebuildMode::Strict);
    m.set_members(vec![1], vec![1], 1, at(0));
    assert_eq!(m.copies_floor(at(0)), Some(1));
    let m = &mut grown(m, vec![1, 2, 3], 2, at(1_000));
    // Grants made with one copy just before the rise may run a longest
    // lease, and their speaker grants until its leader lease runs out.
    let until =
        1_000 + (MAX_LEASE + LEADER_LEASE + leasehold_protocol::FLOOR_MARGIN).as_millis() as u64;
    assert_eq!(m.copies_floor(at(until - 1)), Some(1));
    assert_eq!(m.fewest_copies(at(until - 1)), Some(1));
    assert_eq!(m.copies_floor(at(until)), Some(2), "every such grant ended");
    // A fall counts at once.
    m.set_members(vec![1, 2], vec![1, 2], 1, at(until));
    assert_eq!(m.copies_floor(at(until)), Some(1));
    // Once it stops speaking, its grants run a lease more.
    m.drop_table(None, at(until));
    assert_eq!(m.copies_floor(at(until + 1)), Some(1));
    assert_eq!(
        m.copies_floor(at(2 * until)),
        None,
        "nothing of its may run"
    );
}

#[test]
fn a_member_that_never_spoke_says_nothing_of_copies() {
    // A node forming or joining passes through smaller counts (itself
    // alone, a configuration not committed yet): no grant was made with
    // them, so none counts.
    let mut m = member(2, RebuildMode::Strict);
    m.set_members(vec![2], vec![2], 1, at(0));
    m.set_members(vec![1, 2, 3], vec![1, 2, 3], 2, at(10));
    assert_eq!(m.copies_floor(at(20)), None);
    assert_eq!(m.fewest_copies(at(20)), None);
}

#[test]
fn what_another_member_says_it_makes_counts_for_its_lease() {
    let mut m = member(2, RebuildMode::Strict);
    assert_eq!(m.fewest_copies(at(0)), None);
    m.heard(
        1,
        terms(Some(1), Duration::from_secs(120), LEADER_LEASE),
        at(0),
    );
    assert_eq!(m.copies_floor(at(0)), None, "not this member's own");
    assert_eq!(m.fewest_copies(at(0)), Some(1));
    let until = (Duration::from_secs(120) + LEADER_LEASE + leasehold_protocol::FLOOR_MARGIN)
        .as_millis() as u64;
    assert_eq!(
        m.fewest_copies(at(until - 1)),
        Some(1),
        "the longer lease counts"
    );
    assert_eq!(m.fewest_copies(at(until)), None);
    m.heard(1, terms(None, MAX_LEASE, LEADER_LEASE), at(until));
    assert_eq!(
        m.fewest_copies(at(until)),
        None,
        "a member that says nothing"
    );
}

#[test]
fn a_rebuild_after_growth_that_misses_the_grower_has_not_seen_every_grant() {
    // Node 1 granted alone (one copy), and said so on its heartbeats;
    // 2 and 3 joined; 1 is missing.
    let now = at(5_000);
    let mut m = member(2, RebuildMode::Strict);
    m.set_members(vec![1, 2], vec![1], 1, at(0));
    m.heard(1, terms(Some(1), MAX_LEASE, LEADER_LEASE), at(900));
    m.set_members(vec![1, 2, 3], vec![1, 2, 3], 2, at(1_000));
    m.drop_table(Some(2), now);
    let reads = [2, 3]
        .into_iter()
        .map(|r| MemberRead {
            member: r,
            max_lease: MAX_LEASE,
            copies: 2,
            uptime: None,
            locks: Vec::new(),
            departed: Vec::new(),
        })
        .collect();
    let input = RebuildInput {
        term: 2,
        generation: m.generation(),
        reads,
        missing: vec![1],
        took: Duration::ZERO,
    };
    m.rebuild(input, &leading(2, now), now).expect("rebuilt");
    let report = m.last_rebuild().unwrap();
    assert!(!report.all_seen, "{report:?}");
    assert_eq!(
        report.held_back_ms,
        (MAX_LEASE + LEADER_LEASE).as_millis() as u64
    );
}

#[test]
fn the_copies_floor_switched_off_counts_the_copies_of_now() {
    let mut m = Member::new(MemberConfig {
        sabotage: leasehold_protocol::Sabotage {
            copies_of_now: true,
            ..leasehold_protocol::Sabotage::NONE
        },
        ..member(2, RebuildMode::Strict).config().clone()
    });
    m.set_members(vec![1], vec![1], 1, at(0));
    m.set_members(vec![1, 2, 3], vec![1, 2, 3], 2, at(1));
    m.heard(1, terms(Some(1), MAX_LEASE, LEADER_LEASE), at(1));
    assert_eq!(m.fewest_copies(at(2)), None);
}

#[test]
fn the_guard_counts_on_the_shortest_leader_lease_a_member_runs_with() {
    // Member 3 was restarted with timings half as long: it votes for
    // another half a lease after the heartbeat it took.
    let mut m = speaker(1, 7, at(0), vec![], RebuildMode::Strict);
    let short = LEADER_LEASE / 2;
    let acked = at(1_000);
    let guard = leading(7, acked);
    let ms = |d: Duration| d.as_millis() as u64;
    assert!(m.may_speak(&guard, at(1_000 + ms(short))));
    m.heard(3, terms(Some(2), MAX_LEASE, short), at(1_000));
    assert_eq!(m.guard_lease(), short);
    let end = 1_000 + ms(short - LEASE_MARGIN);
    assert!(m.may_speak(&guard, at(end - 1)));
    assert!(!m.may_speak(&guard, at(end)), "past the shorter lease");
    // A longer one counts for the strict hold, not the guard.
    m.heard(2, terms(Some(2), MAX_LEASE, 3 * LEADER_LEASE), at(1_000));
    assert_eq!(m.guard_lease(), short);
    assert_eq!(m.longest_leader_lease(), 3 * LEADER_LEASE);
    // A member gone from the cluster no longer bounds the guard.
    m.set_members(vec![1, 2], vec![1, 2], 2, at(2_000));
    assert_eq!(m.guard_lease(), LEADER_LEASE);
}

#[test]
fn a_strict_hold_covers_the_longest_leader_lease_a_member_runs_with() {
    let now = at(5_000);
    let mut m = member(2, RebuildMode::Strict);
    m.heard(3, terms(Some(2), MAX_LEASE, 4 * LEADER_LEASE), at(0));
    m.drop_table(Some(2), now);
    let input = RebuildInput {
        term: 2,
        generation: m.generation(),
        reads: vec![MemberRead {
            member: 2,
            max_lease: MAX_LEASE,
            copies: 2,
            uptime: None,
            locks: Vec::new(),
            departed: Vec::new(),
        }],
        missing: vec![1, 3],
        took: Duration::ZERO,
    };
    m.rebuild(input, &leading(2, now), now).expect("rebuilt");
    assert_eq!(
        m.last_rebuild().unwrap().held_back_ms,
        (MAX_LEASE + 4 * LEADER_LEASE).as_millis() as u64
    );
}

#[test]
fn timings_switched_off_count_only_the_members_own() {
    let mut m = Member::new(MemberConfig {
        sabotage: leasehold_protocol::Sabotage {
            own_timings: true,
            ..leasehold_protocol::Sabotage::NONE
        },
        ..member(1, RebuildMode::Strict).config().clone()
    });
    m.heard(3, terms(Some(2), MAX_LEASE, LEADER_LEASE / 2), at(0));
    assert_eq!(m.guard_lease(), LEADER_LEASE);
}

#[test]
fn a_stopping_member_takes_no_new_record() {
    // A copy or a forwarded grant recorded on a member that is leaving
    // leaves with it: refused, so the speaker copies to another and the
    // client asks elsewhere.
    let mut m = member(2, RebuildMode::Strict);
    let lock = Lock {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: "a".into(),
        id: LockId::from_u128(1),
        node: 1,
        holder: "h".into(),
        fence: Fence::new(3, 1),
        lease: LEASE,
        acquired: at(0),
        expires: at(10_000),
        data: None,
        data_rev: 0,
    };
    assert_eq!(m.take_copies(3, vec![lock.clone()], 3, at(0)), Ok(()));
    m.stop_speaking(at(1));
    assert_eq!(
        m.take_copies(3, vec![lock.clone()], 3, at(2)),
        Err(Refusal::Stopping)
    );
    let call = Forwarded {
        sent: at(2),
        read_before: 0,
    };
    assert_eq!(
        m.granted_through_speaker(call, lock.in_transit(at(2)), Duration::ZERO, at(3)),
        Err(Refusal::Stopping)
    );
}

#[test]
fn a_leader_lease_on_a_request_is_not_taken() {
    // A request may have waited since its member restarted with other
    // timings; an answer says what it runs with now.
    let mut m = member(1, RebuildMode::Strict);
    m.heard(
        3,
        PeerTerms {
            copies: None,
            max_lease: MAX_LEASE,
            leader_lease: None,
        },
        at(0),
    );
    assert_eq!(m.guard_lease(), LEADER_LEASE);
}

#[test]
fn a_handed_over_record_is_kept_if_live_refused_if_unknown_and_dropped_if_gone() {
    let now = at(0);
    let guard = leading(4, now);
    let mut m = speaker(1, 4, now, vec![], RebuildMode::Strict);
    let through_2 = granted(&mut m, "h/a", 1, 2, &guard, now);
    let through_3 = granted(&mut m, "h/b", 2, 3, &guard, now);
    let ends = at(60_000);
    // Live: copied again; the lock's own node is not counted on.
    let lock = m
        .handed_over("h/a", through_2.id, ends, &guard, now)
        .unwrap()
        .unwrap();
    assert_eq!(lock.id, through_2.id);
    let lock = m
        .handed_over("h/b", through_3.id, ends, &guard, now)
        .unwrap()
        .unwrap();
    assert_eq!(lock.node, 3);
    // Released, or ended: nothing to keep.
    m.release("h/b", through_3.id, &guard, now).unwrap();
    assert_eq!(
        m.handed_over("h/b", through_3.id, ends, &guard, now),
        Ok(None)
    );
    let unknown = LockId::from_u128(77);
    assert_eq!(m.handed_over("h/c", unknown, now, &guard, now), Ok(None));
    // Running, and unknown to this table: the leaving may cost it.
    assert_eq!(
        m.handed_over("h/c", unknown, ends, &guard, now),
        Err(Refusal::MayBeOnRecordElsewhere)
    );
}

/// A member keeps a lock in `Held` (a proclaim with a short lease, data
/// revision 1) and a late copy of an earlier, longer renewal (revision
/// 0): its record, which a renewal through it reclaims, has the longer
/// lease and the newer data.
#[test]
fn a_members_record_has_the_later_lease_and_the_newer_data() {
    let mut m = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(0),
        read_before: 0,
    };
    let mut proclaimed = in_transit(7, 1, Duration::from_secs(2));
    proclaimed.data = Some("new".into());
    proclaimed.data_rev = 1;
    m.renewed_through_speaker(call, proclaimed, at(1)).unwrap();
    let mut earlier = in_transit(7, 1, Duration::from_secs(20)).arrive(at(0));
    earlier.data = Some("old".into());
    m.take_copies(1, vec![earlier.clone()], 1, at(2)).unwrap();
    let record = m.held_record(LockId::from_u128(7)).unwrap();
    assert_eq!(record.expires, earlier.expires);
    assert_eq!((record.data.as_deref(), record.data_rev), (Some("new"), 1));
}

#[test]
fn the_reads_run_on_the_rebuild_timeout_of_the_members_configuration() {
    for (mode, reread) in [
        (RebuildMode::Proceed, REBUILD_TIMEOUT),
        (RebuildMode::Strict, REBUILD_TIMEOUT / 4),
    ] {
        let mut m = member(1, mode);
        let mut reads = m.start_reads(&[1, 2, 3], at(0));
        assert_eq!(reads.deadline(), at(0) + REBUILD_TIMEOUT, "{mode:?}");
        // Two of three unread with two copies: a failed read is read again
        // while the next read ends within the reread window.
        let last = reread.as_millis() as u64 - 51;
        assert!(reads.failed(2, "refused".into(), at(last)), "{mode:?}");
        assert!(
            !reads.failed(2, "refused".into(), at(last + 1)),
            "{mode:?}: past the window"
        );
    }
    let m = member(1, RebuildMode::Proceed);
    assert_eq!(
        m.departed_until(at(5)),
        at(5) + MAX_LEASE + REBUILD_TIMEOUT,
        "a member that left is read for a lease and a rebuild's reads"
    );
}

#[test]
fn a_member_tells_the_others_the_lease_and_copies_of_its_configuration() {
    let mut m = member(1, RebuildMode::Proceed);
    let own = m.own_terms(at(0));
    assert_eq!(own.max_lease, MAX_LEASE);
    assert_eq!(own.leader_lease, Some(LEADER_LEASE));
    assert_eq!(own.copies, None, "no table, no grant of its may run");
    let mut s = speaker(1, 3, at(0), vec![], RebuildMode::Proceed);
    assert_eq!(
        s.own_terms(at(0)).copies,
        Some(2),
        "speaking with two copies"
    );
}

#[test]
fn a_rebuild_waits_for_its_confirmation_the_rebuild_timeout_and_at_least_a_second() {
    let m = member(1, RebuildMode::Proceed);
    assert_eq!(REBUILD_TIMEOUT, Duration::from_millis(500));
    assert_eq!(m.config().confirm_within(), Duration::from_secs(1));
    let mut config = m.config().clone();
    config.rebuild_timeout = Duration::from_secs(3);
    assert_eq!(config.confirm_within(), Duration::from_secs(3));
}
