//! A rebuild attempt's reads as a driver carries them out
//! (`Member::start_reading`): what it is told to read, read again and
//! wait for, and what the rebuild gets.

use std::time::Duration;

use leasehold_protocol::{
    MemberRead, ReadOut, Reading, RebuildMode, Sabotage, READ_AGAIN_AFTER, STRAGGLER_SHARE,
};
use locktable::NodeId;

use crate::common::*;

/// Member `id`'s answer: up an hour, the configuration's lease and copies,
/// no locks.
fn answer(id: NodeId) -> MemberRead {
    MemberRead {
        member: id,
        max_lease: MAX_LEASE,
        copies: 2,
        uptime: Some(Duration::from_secs(3600)),
        locks: Vec::new(),
        departed: Vec::new(),
    }
}

fn outs(reading: &mut Reading) -> Vec<ReadOut> {
    std::iter::from_fn(|| reading.poll_read()).collect()
}

fn reading_by(id: NodeId, sabotage: Sabotage) -> Reading {
    let mut m = member(id, RebuildMode::Proceed);
    m.set_sabotage(sabotage);
    m.start_reading(7, 3, &[1, 2, 3, 2], at(0))
}

#[test]
fn every_member_is_read_once_this_one_first() {
    let mut r = reading_by(2, Sabotage::NONE);
    assert_eq!(
        outs(&mut r),
        [ReadOut::Read(2), ReadOut::Read(1), ReadOut::Read(3)]
    );
    assert_eq!((r.term(), r.began()), (7, at(0)));
    assert_eq!(r.deadline(), at(0) + REBUILD_TIMEOUT);
    assert!(!r.none_out());
}

#[test]
fn a_failed_read_is_read_again_while_it_matters_and_then_no_more() {
    let mut r = reading_by(1, Sabotage::NONE);
    outs(&mut r);
    assert!(r.answered(answer(1)));
    // Two of three unread with two copies: 2 may hold a grant's only
    // other record.
    assert_eq!(r.failed(2, "refused".into(), at(10)), Some(true));
    assert_eq!(
        outs(&mut r),
        [ReadOut::ReadAgain {
            member: 2,
            after: READ_AGAIN_AFTER
        }]
    );
    assert_eq!(r.stop_at(at(10)), r.deadline(), "not enough read yet");
    assert!(r.answered(answer(3)));
    // 1 and 3 read: every grant seen, and every first read ended: the
    // reads end, the read of 2 again with them.
    assert_eq!(r.stop_at(at(20)), at(20));
    assert!(!r.none_out(), "2 is still out");
    let (input, unread) = r.finish(Duration::from_millis(31));
    assert_eq!((input.term, input.generation), (7, 3));
    assert_eq!(input.missing, vec![2]);
    let read: Vec<NodeId> = input.reads.iter().map(|r| r.member).collect();
    assert_eq!(read, vec![1, 3]);
    assert_eq!(input.took, Duration::from_millis(31));
    assert_eq!(unread, vec![(2, "refused".to_string())]);
}

#[test]
fn a_failure_once_enough_is_read_ends_that_read_and_a_straggler_is_waited_for_a_share() {
    let mut r = reading_by(1, Sabotage::NONE);
    outs(&mut r);
    assert!(r.answered(answer(1)));
    assert!(r.answered(answer(3)));
    // 2 has not answered: waited for a share of the timeout from when the
    // others covered every grant.
    assert_eq!(
        r.stop_at(at(20)),
        at(20) + REBUILD_TIMEOUT / STRAGGLER_SHARE
    );
    assert_eq!(r.failed(2, "refused".into(), at(30)), Some(false));
    assert!(outs(&mut r).is_empty(), "no read of 2 changes the outcome");
    assert!(r.none_out());
    assert_eq!(r.stop_at(at(30)), at(30), "none out: the reads end");
}

#[test]
fn an_answer_or_failure_of_no_read_out_is_not_taken() {
    let mut r = reading_by(1, Sabotage::NONE);
    assert!(r.answered(answer(2)));
    assert!(!r.answered(answer(2)), "answered twice: taken once");
    assert!(!r.answered(answer(9)), "never asked");
    assert_eq!(r.failed(2, "late".into(), at(5)), None);
    let (input, _) = r.finish(Duration::ZERO);
    assert_eq!(input.reads.len(), 1);
}

#[test]
fn a_departed_member_another_reports_is_read_too_once() {
    let mut r = reading_by(1, Sabotage::NONE);
    outs(&mut r);
    r.add(5);
    r.add(5);
    r.add(3);
    assert_eq!(outs(&mut r), [ReadOut::Read(5)], "3 is read already");
    for id in [1, 2, 3] {
        assert!(r.answered(answer(id)));
    }
    assert!(!r.none_out(), "5 is out");
    let (input, _) = r.finish(Duration::ZERO);
    assert_eq!(input.missing, vec![5]);
}

#[test]
fn the_reread_sabotages_read_a_failed_member_no_more() {
    let mut no_reread = Sabotage::NONE;
    no_reread.no_reread = true;
    let mut r = reading_by(1, no_reread);
    outs(&mut r);
    assert_eq!(r.failed(2, "refused".into(), at(10)), Some(false));
    assert!(outs(&mut r).is_empty());
    assert!(r.answered(answer(1)));
    assert!(r.answered(answer(3)));
    assert_eq!(r.stop_at(at(11)), at(11), "its read is over");

    let mut read_once = Sabotage::NONE;
    read_once.read_once = true;
    let mut r = reading_by(1, read_once);
    outs(&mut r);
    assert_eq!(r.failed(2, "refused".into(), at(10)), Some(false));
    assert!(outs(&mut r).is_empty());
    assert!(r.answered(answer(1)));
    assert!(r.answered(answer(3)));
    assert_eq!(
        r.stop_at(at(11)),
        r.deadline(),
        "waited for until the deadline, no early end"
    );
}

#[test]
fn a_member_up_shorter_than_the_longest_lease_is_missing_and_a_first_start_is_not() {
    let mut r = reading_by(1, Sabotage::NONE);
    outs(&mut r);
    assert!(r.answered(answer(1)));
    assert!(r.answered(MemberRead {
        uptime: Some(MAX_LEASE / 2),
        ..answer(2)
    }));
    assert!(r.answered(MemberRead {
        uptime: None,
        ..answer(3)
    }));
    let (input, _) = r.finish(Duration::ZERO);
    assert_eq!(
        input.missing,
        vec![2],
        "2 restarted within a lease and may have forgotten a grant; 3's data directory is new: it forgot nothing"
    );
}

#[test]
fn read_once_keeps_a_failed_member_out_and_takes_its_late_answer() {
    let mut read_once = Sabotage::NONE;
    read_once.read_once = true;
    let mut r = reading_by(1, read_once);
    outs(&mut r);
    assert!(r.answered(answer(1)));
    assert_eq!(r.failed(2, "refused".into(), at(10)), Some(false));
    assert!(!r.none_out(), "2 is waited for until the deadline");
    assert!(r.answered(answer(2)), "its late answer is taken");
    assert!(r.answered(answer(3)));
    assert!(r.none_out());
    let (input, _) = r.finish(Duration::ZERO);
    assert!(input.missing.is_empty());
}

#[test]
fn in_strict_mode_a_failed_member_is_read_again_only_for_a_quarter_of_the_timeout() {
    let mut m = member(1, RebuildMode::Strict);
    let mut r = m.start_reading(7, 3, &[1, 2, 3], at(0));
    outs(&mut r);
    let window = REBUILD_TIMEOUT / STRAGGLER_SHARE;
    let last = window.as_millis() as u64 - READ_AGAIN_AFTER.as_millis() as u64 - 1;
    assert_eq!(r.failed(2, "refused".into(), at(last)), Some(true));
    assert_eq!(
        r.stop_at(at(last)),
        at(0) + window,
        "not enough read: stops at the end of the window"
    );
    assert_eq!(r.failed(2, "refused".into(), at(last + 1)), Some(false));
    assert!(!outs(&mut r).is_empty(), "the first failure's read again");
}
