//! A member's operations, one behaviour each: what the speaker keeps of its
//! own clients, when a grant may still be answered, what a drop, a stop and
//! a newer speaker's read do, and what a renewal reclaims.

use crate::common;

use std::time::Duration;

use common::*;
use leasehold_protocol::{CopyStep, Copying, Guard, Members, RebuildMode, Refusal};
use locktable::{AcquireError, Acquired, Lock, LockId, MonoTime, Request};

#[test]
fn the_speaker_keeps_its_own_clients_locks_in_held_and_not_others() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let own = granted(&mut m, "a", 1, 1, &guard, now);
    let other = granted(&mut m, "b", 2, 2, &guard, now);
    assert_eq!(m.held_record(own.id).map(|l| l.id), Some(own.id));
    assert!(m.held_record(other.id).is_none());
    // Renewed for a client of another node: that node keeps it now.
    let renewing = renewal("a", own.id, 2, None);
    m.renew(renewing, &guard, now).unwrap();
    assert!(m.held_record(own.id).is_none());
    let back = renewal("a", own.id, 1, None);
    m.renew(back, &guard, now).unwrap();
    assert!(m.held_record(own.id).is_some());
}

#[test]
fn a_waiter_granted_later_is_answered_and_a_client_of_the_speaker_recorded() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let first = granted(&mut m, "a", 1, 2, &guard, now);
    let Ok((Acquired::Waiting(waiter), _)) = m.acquire(wait_for("a", 2, 1), &guard, now) else {
        panic!("waits")
    };
    m.release("a", first.id, &guard, now).unwrap();
    let answers = m.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, waiter);
    let lock = answers[0].result.clone().unwrap();
    assert_eq!(lock.id, LockId::from_u128(2));
    assert!(m.held_record(lock.id).is_some(), "a client of the speaker");
}

#[test]
fn a_set_granted_later_is_answered_whole_and_a_client_of_the_speaker_records_every_lock() {
    use leasehold_protocol::SetAcquisition;
    use locktable::AcquiredSet;
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let first = granted(&mut m, "b", 1, 2, &guard, now);
    let set = vec![
        wait_for("a", 2, 1),
        wait_for("b", 3, 1),
        wait_for("c", 4, 1),
    ];
    let Ok(SetAcquisition::Table(AcquiredSet::Waiting(waiter), _)) =
        m.acquire_set(set, None, &guard, now)
    else {
        panic!("waits")
    };
    m.release("b", first.id, &guard, now).unwrap();
    let answers = m.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, waiter);
    let locks: Vec<Lock> = answers[0]
        .result
        .iter()
        .chain(&answers[0].also)
        .cloned()
        .collect();
    let ids: Vec<u128> = locks.iter().map(|l| l.id.as_u128()).collect();
    assert_eq!(ids, [2, 3, 4]);
    for lock in &locks {
        assert!(m.held_record(lock.id).is_some(), "{} recorded", lock.name);
    }
}

/// A grant whose first caller went away is taken back, unless a retry of
/// the same request was answered with it and renewed it meanwhile: then a
/// client holds it, and taking it back would let the name be granted to
/// another under it (found by the second reader of sets).
#[test]
fn a_grant_renewed_by_a_retry_is_not_taken_back_when_its_first_caller_goes() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let gone = granted(&mut m, "a", 1, 2, &guard, now);
    assert_ne!(m.take_back(&gone, &guard, now), Members::NONE);
    assert!(m.get("a", &guard, now).unwrap().is_none(), "taken back");

    let first = granted(&mut m, "b", 2, 2, &guard, now);
    let later = at(1);
    m.renew(renewal("b", first.id, 2, None), &guard, later)
        .unwrap();
    assert_eq!(m.take_back(&first, &guard, later), Members::NONE);
    let held = m.get("b", &guard, later).unwrap().expect("still held");
    assert_eq!(held.id, first.id);
}

#[test]
fn a_cancelled_waiter_is_never_granted() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let first = granted(&mut m, "a", 1, 2, &guard, now);
    let Ok((Acquired::Waiting(waiter), _)) = m.acquire(wait_for("a", 2, 2), &guard, now) else {
        panic!("waits")
    };
    m.cancel("a", waiter, &guard, now);
    m.release("a", first.id, &guard, now).unwrap();
    assert!(m.take_answers().is_empty());
    assert_eq!(m.get("a", &guard, now), Ok(None));
}

#[test]
fn a_grant_may_be_answered_only_while_the_table_that_made_it_speaks() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let Ok((Acquired::Granted(_), made)) = m.acquire(request("a", 1, 2), &guard, now) else {
        panic!("granted")
    };
    assert!(m.still_speaks_for(made, &guard, now));
    let late = now + LEADER_LEASE;
    assert!(
        !m.still_speaks_for(made, &leading(3, now), late),
        "guard ran out"
    );
    m.drop_table(Some(3), now);
    assert!(!m.still_speaks_for(made, &guard, now), "dropped");
    // Rebuilt again in the same term: another table, which may have settled
    // the grant as lost.
    let again = speaker_again(&mut m, 3, now);
    assert!(!m.still_speaks_for(made, &guard, now));
    assert!(m.still_speaks_for(again, &guard, now));
}

/// Rebuilds `m`'s table for `term` from nothing, every member read.
fn speaker_again(
    m: &mut leasehold_protocol::Member,
    term: u64,
    now: MonoTime,
) -> leasehold_protocol::Made {
    use leasehold_protocol::{MemberRead, RebuildInput};
    let input = RebuildInput {
        term,
        generation: m.generation(),
        reads: [1, 2, 3]
            .into_iter()
            .map(|member| MemberRead {
                member,
                max_lease: MAX_LEASE,
                copies: 2,
                uptime: None,
                locks: Vec::new(),
                departed: Vec::new(),
            })
            .collect(),
        missing: Vec::new(),
        took: Duration::ZERO,
    };
    m.rebuild(input, &leading(term, now), now).unwrap();
    assert!(m.is_rebuilt());
    m.made()
}

#[test]
fn a_grant_short_of_copies_or_from_a_dropped_table_is_not_answered() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let Ok((Acquired::Granted(lock), made)) = m.acquire(request("a", 1, 1), &guard, now) else {
        panic!("granted")
    };
    let (mut job, first) = m.begin_on_record(&lock, 1, made, now);
    assert_eq!(
        first,
        Copying::Send(vec![2]),
        "a client of the speaker: one copy more"
    );
    assert_eq!(
        m.copy_answered(&mut job, &lock, 2, false, now),
        Copying::Send(vec![3])
    );
    assert_eq!(
        m.copy_answered(&mut job, &lock, 2, false, now),
        Copying::Wait,
        "an answer after its timeout counts once"
    );
    assert_eq!(
        m.on_record(&job, &guard, now),
        Err(Refusal::TooFewCopies {
            reached: 0,
            needed: 1,
            copies: 2
        })
    );
    assert_eq!(
        m.copy_answered(&mut job, &lock, 3, true, now),
        Copying::Decide
    );
    assert_eq!(job.acked(), &[3]);
    assert_eq!(m.on_record(&job, &guard, now), Ok(()));
    // Both members a copy went to hear of its release.
    let (_, to) = m.release("a", lock.id, &guard, now).unwrap();
    assert_eq!(m.others_in(to).collect::<Vec<_>>(), [2, 3]);
    m.drop_table(Some(3), now);
    assert_eq!(m.on_record(&job, &guard, now), Err(Refusal::MovedOn));
}

#[test]
fn a_grant_the_speaker_and_holder_keep_needs_no_copy() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let Ok((Acquired::Granted(lock), made)) = m.acquire(request("a", 1, 2), &guard, now) else {
        panic!("granted")
    };
    let (job, first) = m.begin_on_record(&lock, 2, made, now);
    assert_eq!(first, Copying::Decide);
    assert_eq!(m.on_record(&job, &guard, now), Ok(()));
}

#[test]
fn a_member_that_failed_a_copy_is_tried_last_until_it_acknowledges_one() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let copy = |m: &mut leasehold_protocol::Member, name: &str, acked: bool| {
        let id = u128::from(name.as_bytes()[0]);
        let lock = granted(m, name, id, 1, &guard, now);
        let (mut job, first) = m.begin_on_record(&lock, 1, m.made(), now);
        if let Copying::Send(members) = &first {
            m.copy_answered(&mut job, &lock, members[0], acked, now);
        }
        first
    };
    assert_eq!(copy(&mut m, "a", false), Copying::Send(vec![2]));
    assert_eq!(copy(&mut m, "b", true), Copying::Send(vec![3]), "2 last");
    assert_eq!(copy(&mut m, "c", true), Copying::Send(vec![3]));
}

#[test]
fn a_copy_that_fails_while_another_is_out_waits_for_it() {
    // Four members, three copies: a client of the speaker needs two more.
    let m = member4(1, 3);
    let mut round = m.copy_round(1);
    assert_eq!(round.start(), vec![2, 3]);
    assert_eq!(round.answered(2, false), CopyStep::SendTo(4));
    assert_eq!(round.answered(3, false), CopyStep::Wait, "4 is still out");
    assert_eq!(round.answered(4, true), CopyStep::GiveUp);
}

fn member4(id: u64, copies: usize) -> leasehold_protocol::Member {
    use leasehold_protocol::MemberConfig;
    leasehold_protocol::Member::new(MemberConfig {
        id,
        members: vec![1, 2, 3, 4],
        copy_to: vec![1, 2, 3, 4],
        copies,
        lease: locktable::LeaseRule::default(),
        rebuild_mode: RebuildMode::Proceed,
        leader_lease: LEADER_LEASE,
        rebuild_timeout: Duration::from_millis(500),
        sabotage: leasehold_protocol::Sabotage::NONE,
    })
}

#[test]
fn a_copy_holder_hears_of_a_release_until_the_end_of_the_lease_it_holds() {
    let now = at(0);
    let guard_at = |t: MonoTime| leading(3, t);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let lock = granted(&mut m, "a", 1, 1, &guard_at(now), now);
    m.copy_sent(2, &lock, now);
    // Released a second before its lease ends.
    let late = lock.expires - Duration::from_secs(1);
    let (_, to) = m.release("a", lock.id, &guard_at(late), late).unwrap();
    assert_eq!(to, m.member(1).with(m.member(2)));
}

#[test]
fn a_rebuild_retried_in_the_same_term_keeps_where_locks_moved_from() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let lock = granted(&mut m, "a", 1, 3, &guard, now);
    let renewing = renewal("a", lock.id, 2, None);
    let (renewed, _) = m.renew(renewing, &guard, now).unwrap();
    // The table is dropped and rebuilt in term 3, reading the lock back.
    m.drop_table(Some(3), now);
    let input = leasehold_protocol::RebuildInput {
        term: 3,
        generation: m.generation(),
        reads: vec![leasehold_protocol::MemberRead {
            member: 2,
            max_lease: MAX_LEASE,
            copies: 2,
            uptime: None,
            locks: vec![renewed],
            departed: Vec::new(),
        }],
        missing: vec![],
        took: Duration::ZERO,
    };
    m.rebuild(input, &guard, now).unwrap();
    let (_, to) = m.release("a", lock.id, &guard, now).unwrap();
    assert_eq!(
        to,
        m.member(2).with(m.member(3)),
        "3 may still keep its Held"
    );
    // A new term forgets it: every member hears of an earlier term's lock.
    m.drop_table(Some(4), now);
    assert_eq!(m.speaking(), Some(4));
}

#[test]
fn what_a_renewal_reclaims_and_what_it_refuses() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    // The renewing node's record brings back a lock the table lacks.
    let record = in_transit(7, 3, LEASE).arrive(now);
    let renewing = renewal("jobs/1", record.id, 2, Some(record.clone()));
    let (renewed, _) = m.renew(renewing, &guard, now).unwrap();
    assert_eq!(renewed.fence, record.fence);
    assert_eq!(
        m.get("jobs/1", &guard, now).unwrap().map(|l| l.id),
        Some(record.id)
    );
    // Without one, a lock the table lacks is not held.
    let unknown = renewal("b", LockId::from_u128(99), 2, None);
    assert_eq!(m.renew(unknown, &guard, now).err(), Some(Refusal::NotHeld));

    // During a strict hold, a released lock is not held; an unknown one
    // may be on record with a member the rebuild missed.
    let mut strict = speaker(1, 3, now, vec![2, 3], RebuildMode::Strict);
    let hold_end = now + MAX_LEASE + LEADER_LEASE;
    strict.forget("x", LockId::from_u128(5), Some(LEASE), &guard, now);
    let released = renewal("x", LockId::from_u128(5), 2, None);
    assert_eq!(
        strict.renew(released, &guard, now).err(),
        Some(Refusal::NotHeld)
    );
    let after = renewal("y", LockId::from_u128(6), 2, None);
    assert_eq!(
        strict.renew(after, &leading(3, hold_end), hold_end).err(),
        Some(Refusal::NotHeld),
        "the hold is over"
    );
}

#[test]
fn get_and_list_answer_the_speakers_table() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let a = granted(&mut m, "jobs/a", 1, 2, &guard, now);
    granted(&mut m, "jobs/b", 2, 2, &guard, now);
    granted(&mut m, "other", 3, 2, &guard, now);
    assert_eq!(
        m.get("jobs/a", &guard, now).unwrap().map(|l| l.id),
        Some(a.id)
    );
    let listing = m.list("jobs/", 10, &guard, now).unwrap();
    let names: Vec<&str> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["jobs/a", "jobs/b"]);
    assert_eq!(listing.total, Some(2));
    assert_eq!(listing.waiters, [0, 0]);
    let first = m.list("jobs/", 1, &guard, now).unwrap();
    assert_eq!(
        (first.locks.len(), first.total),
        (1, Some(2)),
        "counted beyond the limit"
    );
    assert_eq!(
        m.get("jobs/a", &Guard::FOLLOWER, now),
        Err(Refusal::NotSpeaking)
    );
    assert_eq!(
        m.list("jobs/", 10, &Guard::FOLLOWER, now),
        Err(Refusal::NotSpeaking)
    );
}

#[test]
fn poll_ends_leases_says_so_and_keeps_the_next_deadline() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let lock = granted(&mut m, "a", 1, 1, &guard, now);
    assert_eq!(m.table_size(), (1, 0));
    assert_eq!(m.next_deadline(), Some(lock.expires));
    let polled = m.poll(&guard, now);
    assert!(!polled.changed);
    assert_eq!(polled.next, Some(lock.expires));
    let end = lock.expires;
    let polled = m.poll(&leading(3, end), end);
    assert!(polled.changed, "the lease ended");
    assert_eq!(m.table_size(), (0, 0));
    assert!(
        m.held_record(lock.id).is_none(),
        "and the Held record with it"
    );
    // A table that may not grant has no deadline to keep, and turns
    // waiters away.
    let g = leading(3, end);
    let holder = granted(&mut m, "b", 2, 2, &g, end);
    m.acquire(wait_for("b", 3, 2), &g, end).unwrap();
    let polled = m.poll(&Guard::FOLLOWER, end);
    assert_eq!(polled.next, None);
    let answers = m.take_answers();
    assert!(matches!(
        answers[0].result,
        Err(AcquireError::NotRebuilt(_))
    ));
    assert!(holder.expires > end);
}

#[test]
fn a_stopping_member_never_speaks_again() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    assert!(!m.is_stopping());
    m.stop_speaking(now);
    assert!(m.is_stopping());
    assert!(!m.is_rebuilt());
    assert!(!m.may_speak(&guard, now));
}

#[test]
fn a_read_by_a_newer_term_drops_an_older_speakers_table_and_not_its_own() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let generation = m.generation();
    assert!(m.deposed_by(3, now), "first read");
    assert!(!m.deposed_by(3, now), "not newer");
    assert_eq!(m.read_by(), 3);
    assert!(m.is_rebuilt(), "its own term's read keeps the table");
    assert!(m.deposed_by(4, now));
    assert!(!m.is_rebuilt());
    assert!(m.generation() > generation);
    assert_eq!(
        m.speaking(),
        Some(3),
        "still its term: its grants stay in Granted"
    );
}

#[test]
fn records_of_other_members_outlive_pruning_while_live() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    // More live records than the first pruning size: pruning keeps them.
    let first = granted(&mut m, "keep", 0, 1, &guard, now);
    m.copy_sent(2, &first, now);
    for i in 1..5_000u128 {
        let lock = granted(&mut m, &format!("n/{i}"), i, 1, &guard, now);
        m.copy_sent(3, &lock, now);
    }
    let (_, to) = m.release("keep", first.id, &guard, now).unwrap();
    assert_eq!(to, m.member(1).with(m.member(2)));
}

#[test]
fn members_are_known_by_id() {
    let m = member(2, RebuildMode::Proceed);
    assert_eq!(m.id(), 2);
    assert_eq!(m.member(1), Members::only(1));
    assert_eq!(m.member(3), Members::only(3));
    assert_eq!(m.member(9), Members::ALL, "not a member: everyone");
}

#[test]
fn a_records_lease_is_the_later_of_the_clients_and_the_copys() {
    let mut m = member(2, RebuildMode::Proceed);
    let held = held_through_speaker(&mut m, 7, LEASE);
    // A later renewal through another node, copied here.
    let copy = in_transit(7, 1, LEASE * 2).arrive(at(0));
    m.take_copies(1, vec![copy.clone()], 1, at(0)).unwrap();
    assert_eq!(m.held_record(held.id).unwrap().expires, copy.expires);
    // An older copy does not hide the client's later renewal.
    let mut other = member(2, RebuildMode::Proceed);
    let held = held_through_speaker(&mut other, 8, LEASE * 2);
    let older = in_transit(8, 1, LEASE).arrive(at(0));
    other.take_copies(1, vec![older], 1, at(0)).unwrap();
    assert_eq!(other.held_record(held.id).unwrap().expires, held.expires);
}

#[test]
fn a_release_heard_of_ends_every_record_and_a_late_copy_of_it() {
    let mut m = member(2, RebuildMode::Proceed);
    let lock = held_through_speaker(&mut m, 7, LEASE);
    m.forget(&lock.name, lock.id, Some(LEASE), &Guard::default(), at(2));
    assert!(m.held_record(lock.id).is_none());
    let late = in_transit(7, 1, LEASE).arrive(at(3));
    m.take_copies(1, vec![late], 1, at(3)).unwrap();
    assert!(m.held_record(lock.id).is_none(), "stays released");
    assert!(m.own_report(at(3)).is_empty());
}

#[test]
fn a_release_from_a_sender_that_names_no_lease_is_kept_for_the_longest() {
    let mut m = member(2, RebuildMode::Proceed);
    let lock = held_through_speaker(&mut m, 7, LEASE);
    m.forget(&lock.name, lock.id, None, &Guard::default(), at(2));
    // A copy of it still on its way long after the lease's own end.
    let later = 2 + 2 * LEASE.as_millis() as u64;
    let late = in_transit(7, 1, LEASE).arrive(at(later));
    m.take_copies(1, vec![late], 1, at(later)).unwrap();
    assert!(m.held_record(lock.id).is_none(), "stays released");
}

#[test]
fn a_lock_lost_at_a_rebuild_leaves_this_members_records() {
    let mut m = member(2, RebuildMode::Proceed);
    let lock = held_through_speaker(&mut m, 7, LEASE);
    let lost = m.lost([lock.id, LockId::from_u128(99)]);
    assert_eq!(lost.iter().map(|l| l.id).collect::<Vec<_>>(), [lock.id]);
    assert!(m.held_record(lock.id).is_none());
}

#[test]
fn a_report_carries_the_clients_locks_the_copies_and_what_was_granted() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let own = granted(&mut m, "own", 1, 1, &guard, now);
    let theirs = granted(&mut m, "theirs", 2, 2, &guard, now);
    let copy = in_transit(3, 3, LEASE).arrive(now);
    m.take_copies(3, vec![copy.clone()], 3, now).unwrap();
    let (held, granted) = m.report(now);
    let mut held: Vec<LockId> = held.map(|l| l.id()).collect();
    held.sort();
    assert_eq!(held, [own.id, copy.id]);
    let mut granted: Vec<LockId> = granted.into_iter().map(|l| l.id).collect();
    granted.sort();
    assert_eq!(granted, [own.id, theirs.id]);
    let mut all: Vec<LockId> = m.own_report(now).into_iter().map(|l| l.id).collect();
    all.sort();
    assert_eq!(all, [own.id, own.id, theirs.id, copy.id]);
}

#[test]
fn a_rebuild_is_discarded_when_leadership_moved_on_while_members_were_read() {
    let now = at(0);
    let input = |m: &leasehold_protocol::Member, term| leasehold_protocol::RebuildInput {
        term,
        generation: m.generation(),
        reads: Vec::new(),
        missing: Vec::new(),
        took: Duration::ZERO,
    };
    let mut m = member(1, RebuildMode::Proceed);
    m.drop_table(Some(3), now);
    let moved_on = m.rebuild(input(&m, 3), &leading(4, now), now);
    assert!(moved_on.is_err(), "Raft says term 4");
    m.drop_table(Some(4), now);
    let stale = m.rebuild(input(&m, 3), &leading(3, now), now);
    assert!(stale.is_err(), "the table speaks for term 4");
    assert!(!m.is_rebuilt());
    m.rebuild(input(&m, 4), &leading(4, now), now).unwrap();
    assert!(m.is_rebuilt());
}

/// A follower takes back a grant whose caller went away; the caller's
/// retry of the same request may have been answered with that grant
/// (renewed) before the take-back arrives. The take-back then leaves it
/// to the client that has it; a grant nobody renewed is released.
#[test]
fn a_take_back_releases_a_ghost_but_not_a_grant_a_retry_renewed() {
    let guard = leading(3, at(0));
    let mut m = speaker(1, 3, at(0), vec![], RebuildMode::Proceed);
    let ghost = granted(&mut m, "ghost", 1, 2, &guard, at(0));
    let (released, _) = m
        .take_back_unrenewed("ghost", ghost.id, &guard, at(100))
        .unwrap();
    assert_eq!(released.id, ghost.id);
    assert_eq!(m.get("ghost", &guard, at(100)).unwrap(), None);

    let claimed = granted(&mut m, "claimed", 2, 2, &guard, at(200));
    m.renew(renewal("claimed", claimed.id, 3, None), &guard, at(300))
        .unwrap();
    assert_eq!(
        m.take_back_unrenewed("claimed", claimed.id, &guard, at(400))
            .err(),
        Some(Refusal::Claimed)
    );
    let kept = m.get("claimed", &guard, at(400)).unwrap().unwrap();
    assert_eq!(kept.id, claimed.id, "the retry's client keeps it");
}

/// A renewal that changes a lock's data (an election's leader
/// proclaiming a new value) keeps the id, fence and holder; a rebuild
/// that reads the renewed record beside an older copy, which still has
/// the data as granted, keeps the new data (the view whose lease ends
/// last wins, data and all), whichever it reads first.
#[test]
fn a_renewal_that_changes_data_survives_a_rebuild_beside_an_older_copy() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let lock = granted(&mut m, "a", 1, 2, &guard, now);
    assert_eq!(lock.data, None);
    let later = at(1000);
    let mut proclaiming = renewal("a", lock.id, 2, None);
    proclaiming.data = Some("v2".to_string());
    let (renewed, _) = m.renew(proclaiming, &leading(3, later), later).unwrap();
    assert_eq!(
        (renewed.id, renewed.fence, renewed.data.as_deref()),
        (lock.id, lock.fence, Some("v2"))
    );
    assert_eq!(
        m.get("a", &leading(3, later), later)
            .unwrap()
            .unwrap()
            .data
            .as_deref(),
        Some("v2")
    );
    // A renewal without data keeps it.
    let (kept, _) = m
        .renew(renewal("a", lock.id, 2, None), &leading(3, later), later)
        .unwrap();
    assert_eq!(kept.data.as_deref(), Some("v2"));
    for reads in [
        vec![(3, lock.clone()), (2, renewed.clone())],
        vec![(2, renewed.clone()), (3, lock.clone())],
    ] {
        let rebuilt = rebuilt_from(&mut m, reads, "a", later);
        assert_eq!(rebuilt.data.as_deref(), Some("v2"), "{rebuilt:?}");
        assert_eq!(rebuilt.fence, lock.fence);
    }
}

/// A proclaim with a shorter lease than the renewal before it: the record
/// of the older data ends later, yet a rebuild keeps the newer data (the
/// higher revision), whichever member it reads first.
#[test]
fn a_proclaim_with_a_shorter_lease_keeps_its_data_through_a_rebuild() {
    let now = at(0);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let lock = granted(&mut m, "a", 1, 2, &leading(3, now), now);
    let mut long = renewal("a", lock.id, 2, None);
    long.lease = Some(Duration::from_secs(20));
    let (long, _) = m.renew(long, &leading(3, at(100)), at(100)).unwrap();
    let mut proclaim = renewal("a", lock.id, 2, None);
    proclaim.lease = Some(Duration::from_secs(2));
    proclaim.data = Some("v2".to_string());
    let later = at(200);
    let (short, _) = m.renew(proclaim, &leading(3, later), later).unwrap();
    assert!(long.expires > short.expires, "the older record ends later");
    assert_eq!((long.data_rev, short.data_rev), (0, 1));
    for reads in [
        vec![(3, long.clone()), (2, short.clone())],
        vec![(2, short.clone()), (3, long.clone())],
    ] {
        let rebuilt = rebuilt_from(&mut m, reads, "a", later);
        assert_eq!(rebuilt.data.as_deref(), Some("v2"), "{rebuilt:?}");
        assert_eq!(rebuilt.data_rev, 1);
        assert_eq!(
            rebuilt.expires, long.expires,
            "the longest lease still counts"
        );
    }
}

/// `m`'s table dropped and rebuilt for term 4 at `now` from one record per
/// member (`reads`, in that order): the lock `name` as rebuilt.
fn rebuilt_from(
    m: &mut leasehold_protocol::Member,
    reads: Vec<(u64, Lock)>,
    name: &str,
    now: MonoTime,
) -> Lock {
    m.drop_table(Some(4), now);
    let input = leasehold_protocol::RebuildInput {
        term: 4,
        generation: m.generation(),
        reads: reads
            .into_iter()
            .map(|(member, record)| leasehold_protocol::MemberRead {
                member,
                max_lease: MAX_LEASE,
                copies: 2,
                uptime: None,
                locks: vec![record],
                departed: Vec::new(),
            })
            .collect(),
        missing: vec![],
        took: Duration::ZERO,
    };
    m.rebuild(input, &leading(4, now), now).unwrap();
    m.get(name, &leading(4, now), now).unwrap().unwrap()
}

/// A reader that is not its name's oldest holder is found by its id: a
/// take-back of it once a retry renewed it leaves it to its client, and a
/// member leaving hands it over as held. (Both looked at the oldest
/// holder only, and took a renewed second reader from its client, or
/// counted it as not in the table.)
#[test]
fn a_second_reader_is_found_by_its_id() {
    let guard = leading(3, at(0));
    let mut m = speaker(1, 3, at(0), vec![], RebuildMode::Proceed);
    let reader = |id: u128| Request {
        kind: locktable::Kind::Shared,
        ..request("doc", id, 2)
    };
    let first = match m.acquire(reader(1), &guard, at(0)) {
        Ok((Acquired::Granted(lock), _)) => lock,
        other => panic!("{other:?}"),
    };
    let second = match m.acquire(reader(2), &guard, at(0)) {
        Ok((Acquired::Granted(lock), _)) => lock,
        other => panic!("{other:?}"),
    };
    assert_ne!(first.id, second.id);
    let found = m
        .handed_over("doc", second.id, second.expires, &guard, at(100))
        .unwrap();
    assert_eq!(found.map(|l| l.id), Some(second.id), "held, not absent");
    m.renew(renewal("doc", second.id, 3, None), &guard, at(200))
        .unwrap();
    assert_eq!(
        m.take_back_unrenewed("doc", second.id, &guard, at(300))
            .err(),
        Some(Refusal::Claimed),
        "the retry's client keeps it"
    );
}
