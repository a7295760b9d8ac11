//! A rebuild attempt from start to end (`Member::start_attempt`), as a
//! driver carries it out: the order of what it is told to do, and what
//! each answer fed back leads to.

use std::time::Duration;

use leasehold_protocol::{
    Attempt, AttemptOut, Gone, Member, MemberRead, ReadOut, RebuildFeed, RebuildMode, Rebuilding,
    Sabotage, READ_AGAIN_AFTER,
};
use locktable::{Acquired, Lock, LockId, LockInTransit, MonoTime, NodeId};

use crate::common::*;

/// Member `id`'s answer, up an hour, with `locks`.
fn answer(id: NodeId, locks: Vec<Lock>) -> MemberRead {
    MemberRead {
        member: id,
        max_lease: MAX_LEASE,
        copies: 2,
        uptime: Some(Duration::from_secs(3600)),
        locks,
        departed: Vec::new(),
    }
}

/// Member `id`'s answer naming `gone` (member, address, ms left) as
/// members that left lately.
fn answer_naming(id: NodeId, gone: &[(NodeId, &str, u64)]) -> MemberRead {
    let mut read = answer(id, vec![]);
    read.departed = gone
        .iter()
        .map(|&(member, addr, left_ms)| Gone {
            member,
            addr: addr.into(),
            left: Duration::from_millis(left_ms),
        })
        .collect();
    read
}

/// Member 1, speaking for term 4 in `mode`, and its attempt 9 started at 0
/// ms, its confirmation taken out.
fn attempt(mode: RebuildMode) -> (Member, Rebuilding) {
    let mut m = member(1, mode);
    m.drop_table(Some(4), at(0));
    let mut a = m.start_attempt(9, 4, at(0));
    assert_eq!((a.number(), a.term()), (9, 4));
    match a.poll() {
        Some(AttemptOut::Confirm { within }) => assert_eq!(within, m.config().confirm_within()),
        other => panic!("confirm first, not {other:?}"),
    }
    assert!(a.poll().is_none(), "nothing before the confirmation");
    assert!(a.is_confirming());
    (m, a)
}

thread_local! {
    /// The feed the attempt under test handed out, for its settling.
    static FEED: std::cell::RefCell<Option<RebuildFeed>> = const { std::cell::RefCell::new(None) };
}

/// The reads `a` asks for, taken out (and its feed, kept for [`settle`]).
fn reads(a: &mut Rebuilding) -> Vec<ReadOut> {
    let mut reads = Vec::new();
    while let Some(out) = a.poll() {
        match out {
            AttemptOut::Read(read) => reads.push(read),
            AttemptOut::Collect(feed) => {
                assert!(reads.is_empty(), "the feed comes before the reads");
                FEED.set(Some(feed));
            }
            other => panic!("reads only, not {other:?}"),
        }
    }
    reads
}

/// What follows the settling: the report if rebuilt, the losers told (by
/// node, their locks' ids), the outcome.
type AfterSettling = (
    Option<leasehold_api::RebuildReport>,
    Vec<(NodeId, Vec<LockId>)>,
    Attempt,
);

/// Settles what `a` hands out to settle, at `now`, and takes out
/// everything after it: the report if rebuilt, the losers told, the
/// outcome.
fn settle(a: &mut Rebuilding, m: &mut Member, term: u64, now: MonoTime) -> AfterSettling {
    let Some(AttemptOut::Settle(job)) = a.poll() else {
        panic!("the reads ended: settle");
    };
    assert!(a.poll().is_none(), "nothing until settled");
    let feed = FEED.take().expect("the attempt handed out its feed");
    a.settled(job.settle(feed), m, &leading(term, now), now);
    let (mut report, mut told) = (None, Vec::new());
    loop {
        match a.poll() {
            Some(AttemptOut::Rebuilt(r)) => report = Some(r),
            Some(AttemptOut::TellLost { member, locks }) => {
                told.push((member, locks.iter().map(|l| l.id).collect()))
            }
            Some(AttemptOut::Ended(outcome)) => {
                assert!(a.poll().is_none(), "nothing after the end");
                assert!(a.is_over());
                return (report, told, outcome);
            }
            other => panic!("{other:?} after settling"),
        }
    }
}

#[test]
fn an_attempt_confirms_reads_every_member_this_one_first_settles_and_ends() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    assert_eq!(a.stop_at(at(0)), None, "no reads before the confirmation");
    a.confirmed(&mut m, &[2, 3, 1], &guard, at(1));
    assert!(!a.is_confirming());
    assert_eq!(
        reads(&mut a),
        [ReadOut::Read(1), ReadOut::Read(2), ReadOut::Read(3)]
    );
    assert_eq!(a.read_deadline(), Some(at(1) + REBUILD_TIMEOUT));
    assert_eq!(a.reading_began(), Some(at(1)));
    for id in [1, 2] {
        assert!(a.answered(answer(id, vec![]), &mut m, &guard, at(2)));
        assert!(a.poll().is_none(), "3 is still read");
    }
    assert!(
        !a.answered(answer(2, vec![]), &mut m, &guard, at(2)),
        "read once"
    );
    assert!(a.answered(answer(3, vec![]), &mut m, &guard, at(3)));
    assert!(!m.is_rebuilt(), "not before it settled");
    let (report, told, outcome) = settle(&mut a, &mut m, 4, at(4));
    let report = report.expect("rebuilt");
    assert_eq!(outcome, Attempt::Rebuilt);
    assert!(told.is_empty());
    assert_eq!(
        (report.term, report.members_read.clone()),
        (4, vec![1, 2, 3])
    );
    assert!(report.members_missing.is_empty() && report.all_seen);
    assert_eq!(
        report.took_ms, 3,
        "from the start of the attempt to the reads' end"
    );
    assert!(m.is_rebuilt());
    assert!(
        !a.answered(answer(3, vec![]), &mut m, &guard, at(5)),
        "over"
    );
}

#[test]
fn an_attempt_no_quorum_confirmed_fails_and_takes_nothing_more() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    a.not_confirmed("no quorum confirmed this leader");
    match a.poll() {
        Some(AttemptOut::Ended(Attempt::Failed(why))) => {
            assert_eq!(why, "no quorum confirmed this leader")
        }
        other => panic!("{other:?}"),
    }
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    assert!(
        a.poll().is_none() && a.is_over(),
        "a late confirmation is not taken"
    );
    assert!(!a.answered(answer(1, vec![]), &mut m, &guard, at(2)));
}

#[test]
fn a_failed_read_is_read_again_and_the_reads_end_at_their_stop_time_with_it_missing() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(0));
    reads(&mut a);
    assert!(a.answered(answer(1, vec![]), &mut m, &guard, at(1)));
    assert_eq!(
        a.failed(2, "refused".into(), &mut m, &guard, at(2)),
        Some(true),
        "two not read with two copies: reading 2 may change the rebuild"
    );
    assert_eq!(
        reads(&mut a),
        [ReadOut::ReadAgain {
            member: 2,
            after: READ_AGAIN_AFTER
        }]
    );
    assert_eq!(
        a.failed(4, "no such read".into(), &mut m, &guard, at(2)),
        None
    );
    let stop = a.stop_at(at(3)).expect("reading");
    assert_eq!(stop, at(0) + REBUILD_TIMEOUT, "to the deadline");
    a.timeout(&mut m, &guard, at(100));
    assert!(a.poll().is_none(), "not yet");
    let guard = leading(4, stop);
    a.timeout(&mut m, &guard, stop);
    let (report, _, outcome) = settle(&mut a, &mut m, 4, stop);
    assert_eq!(outcome, Attempt::Rebuilt);
    let report = report.expect("rebuilt");
    assert_eq!(report.members_missing, [2, 3]);
    assert!(!report.all_seen);
}

#[test]
fn a_member_another_reports_departed_is_read_too_at_the_address_it_left_from_once() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    reads(&mut a);
    // 3 is a member: not departed, whatever 2 says.
    let from_2 = answer_naming(2, &[(5, "e:1", 30_000), (3, "c:1", 30_000)]);
    a.answered(from_2, &mut m, &leading(4, at(2)), at(2));
    assert_eq!(reads(&mut a), [ReadOut::Read(5)]);
    assert_eq!(a.departed_addr(5), Some("e:1"));
    assert_eq!(a.departed_addr(3), None);
    assert_eq!(
        m.added_again_in(5, at(2)),
        Some(Duration::from_secs(30)),
        "this member takes it as departed for as long as 2 said"
    );
    let from_3 = answer_naming(3, &[(5, "e:2", 40_000)]);
    a.answered(from_3, &mut m, &guard, at(2));
    assert!(reads(&mut a).is_empty(), "read once");
    assert_eq!(a.departed_addr(5), Some("e:1"), "its first address stays");
    assert_eq!(m.added_again_in(5, at(2)), Some(Duration::from_secs(40)));
    a.answered(answer(1, vec![]), &mut m, &guard, at(2));
    assert!(a.poll().is_none(), "5 is waited for");
    a.answered(answer(5, vec![]), &mut m, &guard, at(3));
    let (report, _, _) = settle(&mut a, &mut m, 4, at(3));
    assert_eq!(report.expect("rebuilt").members_read, [1, 2, 3, 5]);
}

#[test]
fn the_members_that_left_are_read_until_their_time_runs_out_unless_they_handed_over() {
    let mut m = member(1, RebuildMode::Proceed);
    m.members_left(&[1, 2], [(3, "c:1"), (4, "d:1")], at(0));
    assert!(m.departed_handed_over(4, at(0)));
    m.drop_table(Some(4), at(0));
    let guard = leading(4, at(1));
    let mut a = m.start_attempt(1, 4, at(1));
    a.poll();
    let ended = a.confirmed(&mut m, &[1, 2], &guard, at(1));
    assert!(ended.is_empty());
    assert_eq!(
        reads(&mut a),
        [ReadOut::Read(1), ReadOut::Read(2), ReadOut::Read(3)],
        "3 left lately; 4 handed its records over"
    );
    assert_eq!(a.departed_addr(3), Some("c:1"));
    // Past the longest lease and a rebuild's timeout, 3 is read no more,
    // and the next attempt says so (its releases may stop).
    let later = at(0) + MAX_LEASE + REBUILD_TIMEOUT;
    let mut a = m.start_attempt(2, 4, later);
    a.poll();
    let ended = a.confirmed(&mut m, &[1, 2], &leading(4, later), later);
    assert_eq!(ended, [3]);
    assert_eq!(reads(&mut a), [ReadOut::Read(1), ReadOut::Read(2)]);
}

#[test]
fn the_holder_of_a_grant_an_older_one_beat_is_told_before_the_attempt_ends() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    reads(&mut a);
    let mut older = in_transit(7, 1, LEASE);
    older.held_for = Duration::from_secs(5);
    let mut younger = in_transit(8, 2, LEASE);
    younger.node = 3;
    a.answered(answer(1, vec![]), &mut m, &guard, at(2));
    a.answered(answer(2, vec![older.arrive(at(2))]), &mut m, &guard, at(2));
    a.answered(
        answer(3, vec![younger.arrive(at(2))]),
        &mut m,
        &guard,
        at(2),
    );
    let (report, told, outcome) = settle(&mut a, &mut m, 4, at(3));
    assert_eq!(report.expect("rebuilt").conflicts, 1);
    assert_eq!(told, [(3, vec![LockId::from_u128(8)])]);
    assert_eq!(outcome, Attempt::Rebuilt);
}

#[test]
fn an_attempt_whose_leadership_moved_on_while_it_settled_fails_and_reports_nothing() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1], &guard, at(1));
    reads(&mut a);
    a.answered(answer(1, vec![]), &mut m, &guard, at(2));
    let (report, told, outcome) = settle(&mut a, &mut m, 5, at(3));
    assert!(report.is_none() && told.is_empty());
    assert_eq!(
        outcome,
        Attempt::Failed("leadership moved on during the rebuild")
    );
    assert!(!m.is_rebuilt());
}

/// Member 1's strict rebuild for term 4 that read only itself (2 and 3
/// missing, with two copies: the whole longest lease and a leader lease
/// held back), sabotaged as said: whether it grants a new name at 60.5 s
/// after the rebuild.
fn grants_late_in_the_hold(sabotage: Sabotage) -> bool {
    let (mut m, mut a) = attempt(RebuildMode::Strict);
    m.set_sabotage(sabotage);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    reads(&mut a);
    a.answered(answer(1, vec![]), &mut m, &guard, at(1));
    let end = a.stop_at(at(1)).expect("reading");
    a.timeout(&mut m, &leading(4, end), end);
    let (report, _, _) = settle(&mut a, &mut m, 4, end);
    let report = report.expect("rebuilt");
    assert_eq!(
        Duration::from_millis(report.held_back_ms),
        MAX_LEASE + LEADER_LEASE
    );
    let now = end + MAX_LEASE + Duration::from_millis(500);
    matches!(
        m.acquire(request("new", 1, 1), &leading(4, now), now),
        Ok((Acquired::Granted(_), _))
    )
}

#[test]
fn the_strict_hold_runs_from_the_rebuild_and_the_short_hold_sabotage_is_seen() {
    assert!(!grants_late_in_the_hold(Sabotage::NONE));
    let mut short = Sabotage::NONE;
    assert!(short.switch("short-hold"));
    assert!(
        grants_late_in_the_hold(short),
        "stamped one leader lease early, the hold ends that much sooner"
    );
}

/// Member 1's attempt, confirmed at 1 ms, its reads of 1, 2 and 3 taken
/// out.
fn reading() -> (Member, Rebuilding) {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    a.confirmed(&mut m, &[1, 2, 3], &leading(4, at(1)), at(1));
    assert_eq!(reads(&mut a).len(), 3);
    (m, a)
}

#[test]
fn a_second_confirmation_while_reading_is_not_taken() {
    let (mut m, mut a) = reading();
    let guard = leading(4, at(2));
    assert!(a.answered(answer(1, vec![]), &mut m, &guard, at(2)));
    a.confirmed(&mut m, &[1, 2, 3, 4], &guard, at(3));
    assert!(a.poll().is_none(), "no reads again, no read of 4");
    assert_eq!(a.reading_began(), Some(at(1)), "the reads keep their start");
    assert!(
        !a.answered(answer(1, vec![]), &mut m, &guard, at(3)),
        "1's answer is kept"
    );
}

#[test]
fn a_late_no_quorum_while_reading_does_not_end_the_attempt() {
    let (mut m, mut a) = reading();
    a.not_confirmed("late");
    assert!(!a.is_over() && a.poll().is_none());
    assert!(a.answered(answer(1, vec![]), &mut m, &leading(4, at(2)), at(2)));
}

#[test]
fn a_failed_last_read_not_read_again_ends_the_reads_at_once() {
    let (mut m, mut a) = reading();
    let guard = leading(4, at(2));
    a.answered(answer(1, vec![]), &mut m, &guard, at(2));
    a.answered(answer(2, vec![]), &mut m, &guard, at(2));
    assert!(a.poll().is_none(), "3 is waited for a while");
    assert_eq!(
        a.failed(3, "refused".into(), &mut m, &guard, at(3)),
        Some(false)
    );
    assert!(
        matches!(a.poll(), Some(AttemptOut::Settle(_))),
        "no timer needed"
    );
}

#[test]
fn leadership_gone_when_the_reads_end_fails_the_attempt_without_settling() {
    let (mut m, mut a) = reading();
    let guard = leading(4, at(2));
    a.answered(answer(1, vec![]), &mut m, &guard, at(2));
    a.answered(answer(2, vec![]), &mut m, &guard, at(2));
    a.answered(answer(3, vec![]), &mut m, &leading(5, at(3)), at(3));
    match a.poll() {
        Some(AttemptOut::Ended(Attempt::Failed(why))) => {
            assert_eq!(why, "leadership moved on during the rebuild")
        }
        other => panic!("{other:?}"),
    }
    assert!(a.is_over() && a.poll().is_none() && !m.is_rebuilt());
}

#[test]
fn a_member_of_the_configuration_a_report_names_is_not_taken_as_departed() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    reads(&mut a);
    let from_2 = answer_naming(2, &[(3, "c:1", 30_000)]);
    a.answered(from_2, &mut m, &guard, at(2));
    assert!(reads(&mut a).is_empty());
    assert_eq!(
        m.added_again_in(3, at(2)),
        None,
        "3 is a member, not departed"
    );
    assert!(m.departed_with_time_left(at(2)).is_empty());
}

#[test]
fn one_that_handed_over_is_not_read_when_a_report_names_it() {
    let mut m = member(1, RebuildMode::Proceed);
    m.members_left(&[1, 2], [(3, "c:1")], at(0));
    assert!(m.departed_handed_over(3, at(0)));
    m.drop_table(Some(4), at(0));
    let guard = leading(4, at(1));
    let mut a = m.start_attempt(1, 4, at(1));
    a.poll();
    a.confirmed(&mut m, &[1, 2], &guard, at(1));
    assert_eq!(reads(&mut a), [ReadOut::Read(1), ReadOut::Read(2)]);
    let from_2 = answer_naming(2, &[(3, "c:1", 30_000)]);
    a.answered(from_2, &mut m, &guard, at(2));
    assert!(reads(&mut a).is_empty(), "3 handed its records over");
    assert_eq!(a.departed_addr(3), None);
    assert_eq!(m.added_again_in(3, at(2)), None);
}

/// A lock of term 1 named `name` under `id`, arrived at `now` with 20 s
/// left.
fn arrived(name: &str, id: u128, now: MonoTime) -> Lock {
    let mut lock = in_transit(id, 1, Duration::from_secs(20));
    lock.name = name.into();
    lock.fence = locktable::Fence::new(1, id as u64);
    lock.arrive(now)
}

/// The feed comes out before the first read, and what goes into it as the
/// reports arrive is the rebuilt table: the locks of a read that failed
/// after they arrived included (records its member kept), a lock released
/// while the reads went on left out.
#[test]
fn locks_fed_as_they_arrive_are_the_table_less_the_releases_heard_meanwhile() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    assert_eq!(
        reads(&mut a),
        [ReadOut::Read(1), ReadOut::Read(2), ReadOut::Read(3)]
    );
    let (a_lock, b_lock, c_lock) = (
        arrived("a", 1, at(2)),
        arrived("b", 2, at(2)),
        arrived("c", 3, at(2)),
    );
    FEED.with_borrow_mut(|feed| {
        let feed = feed.as_mut().expect("handed out with the reads");
        feed.add(vec![a_lock.clone(), b_lock.clone()], at(2));
        feed.add(vec![c_lock.clone()], at(2));
        assert_eq!(feed.reports(), 3);
    });
    // Released while the reads go on.
    m.forget("a", a_lock.id, None, &guard, at(2));
    assert!(a.answered(answer(1, vec![]), &mut m, &guard, at(3)));
    assert!(a.answered(answer(2, vec![]), &mut m, &guard, at(3)));
    // Member 3's read fails after its lock arrived.
    assert_eq!(
        a.failed(3, "cut".into(), &mut m, &guard, at(3)),
        Some(false)
    );
    let mut outs = Vec::new();
    while let Some(out) = a.poll() {
        match out {
            AttemptOut::Settle(job) => outs.push(job),
            AttemptOut::Read(_) => {}
            other => panic!("{other:?} before the settling"),
        }
    }
    let job = outs.pop().expect("the reads ended");
    let feed = FEED.take().expect("kept");
    let now = at(4);
    a.settled(job.settle(feed), &mut m, &leading(4, now), now);
    let guard = leading(4, now);
    assert!(m.is_rebuilt());
    assert_eq!(m.get("a", &guard, now).unwrap(), None, "released meanwhile");
    assert_eq!(
        m.get("b", &guard, now).unwrap().map(|l| l.id),
        Some(b_lock.id)
    );
    assert_eq!(
        m.get("c", &guard, now).unwrap().map(|l| l.id),
        Some(c_lock.id)
    );
}

/// Two grants of one name made apart, fed as they arrive, both live then:
/// the one held the longest ends (at 102 ms) before the reads are over
/// (300 ms).
/// Nobody holds it any more: the other, still live, is kept and its node
/// is not told it lost (the rebuild that settled at the end of the reads
/// kept it; settled as the reports came, it lost to a lease already over,
/// and the name was free at once while its client still held it).
#[test]
fn a_grant_fed_early_does_not_lose_to_one_whose_lease_ended_before_the_reads() {
    let (mut m, mut a) = attempt(RebuildMode::Proceed);
    let guard = leading(4, at(1));
    a.confirmed(&mut m, &[1, 2, 3], &guard, at(1));
    assert_eq!(reads(&mut a).len(), 3);
    let older = LockInTransit {
        held_for: Duration::from_secs(10),
        ..in_transit(1, 1, Duration::from_millis(100))
    };
    let younger = LockInTransit {
        node: 3,
        held_for: Duration::from_secs(1),
        ..in_transit(2, 2, Duration::from_secs(20))
    };
    FEED.with_borrow_mut(|feed| {
        let feed = feed.as_mut().expect("handed out with the reads");
        feed.add(vec![older.arrive(at(2))], at(2));
        feed.add(vec![younger.arrive(at(2))], at(2));
    });
    for id in [1, 2] {
        assert!(a.answered(answer(id, vec![]), &mut m, &guard, at(3)));
    }
    assert!(a.answered(answer(3, vec![]), &mut m, &guard, at(300)));
    let (report, told, outcome) = settle(&mut a, &mut m, 4, at(300));
    assert_eq!(outcome, Attempt::Rebuilt);
    assert!(report.is_some());
    assert_eq!(told, vec![], "nobody lost to a lease already over");
    let holder = m.get("jobs/1", &leading(4, at(300)), at(300)).unwrap();
    assert_eq!(holder.map(|l| l.id), Some(LockId::from_u128(2)));
}
