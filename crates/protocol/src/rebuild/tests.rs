use super::*;

const LEASE: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(1);

fn at(ms: u64) -> MonoTime {
    MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
}

fn up() -> Duration {
    Duration::from_secs(3600)
}

/// Reads of `members` by a speaker with `copies`, started at 0 ms.
fn reads_of(members: &[NodeId], copies: usize) -> Reads {
    Reads::new(members, copies, LEASE, at(0) + TIMEOUT, TIMEOUT)
}

#[test]
fn with_two_copies_one_member_failing_is_not_read_again() {
    let mut reads = reads_of(&[1, 2, 3], 2);
    reads.answered(1, up(), false, LEASE, 2);
    assert!(!reads.enough(), "2 and 3 not answered yet");
    reads.answered(2, up(), false, LEASE, 2);
    assert!(
        !reads.failed(3, "refused".into(), at(10)),
        "one missing < two copies: no read of 3 can change the outcome"
    );
    assert!(reads.enough());
    assert_eq!(reads.stop_at(at(10)), at(10), "every first read ended");
    assert_eq!(reads.members(), &[1, 2, 3]);
    let (read, missing, unread) = reads.finish();
    assert_eq!((read, missing), (vec![1, 2], vec![3]));
    assert_eq!(unread, vec![(3, "refused".to_string())]);
}

#[test]
fn a_member_that_does_not_answer_is_waited_for_a_quarter_of_the_timeout_once_the_others_suffice() {
    // A host that is gone answers nothing: its read would run to the
    // deadline, past the leases of the locks it held.
    let mut reads = reads_of(&[1, 2, 3], 2);
    assert_eq!(reads.stop_at(at(0)), at(1_000));
    reads.answered(2, up(), false, LEASE, 2);
    assert!(!reads.enough(), "two unanswered with two copies");
    assert_eq!(reads.stop_at(at(5)), at(1_000), "wait to the deadline");
    reads.answered(3, up(), false, LEASE, 2);
    assert!(reads.enough(), "one unanswered < two copies");
    assert_eq!(reads.straggler_wait(), TIMEOUT / 4);
    assert_eq!(reads.stop_at(at(20)), at(270), "a quarter more for 1");
    assert_eq!(reads.stop_at(at(100)), at(270), "counted from the first");
    let (read, missing, unread) = reads.finish();
    assert_eq!((read, missing), (vec![2, 3], vec![1]));
    assert_eq!(unread, vec![(1, "no answer".to_string())]);

    // A member that answers within the wait is read: a healthy
    // cluster's report names nobody missing.
    let mut reads = reads_of(&[1, 2, 3], 2);
    reads.answered(2, up(), false, LEASE, 2);
    reads.answered(3, up(), false, LEASE, 2);
    assert_eq!(reads.stop_at(at(20)), at(270));
    reads.answered(1, up(), false, LEASE, 2);
    assert_eq!(reads.stop_at(at(30)), at(30));
    assert_eq!(reads.finish().1, Vec::<NodeId>::new());

    let mut reads = reads_of(&[1, 2, 3, 4, 5], 2);
    for member in [1, 2, 3] {
        reads.answered(member, up(), false, LEASE, 2);
    }
    reads.answered(4, Duration::from_secs(1), false, LEASE, 2);
    assert!(
        !reads.enough(),
        "4 restarted and 5 unanswered are two missing: wait for 5"
    );
    assert_eq!(reads.stop_at(at(20)), at(1_000));

    let mut reads = reads_of(&[1, 2, 3], 1);
    reads.answered(1, up(), false, LEASE, 1);
    reads.answered(2, up(), false, LEASE, 1);
    assert!(!reads.enough(), "one copy: every member is waited for");
    assert_eq!(reads.stop_at(at(20)), at(1_000));
}

#[test]
fn a_member_with_fewer_copies_counts_against_the_fewest() {
    // Halfway through a change of --copies from 2 to 3: grants made
    // with two copies may be on 4 and 5 only.
    let mut reads = reads_of(&[1, 2, 3, 4, 5], 3);
    reads.answered(1, up(), false, LEASE, 3);
    reads.answered(2, up(), false, LEASE, 2);
    reads.answered(3, up(), false, LEASE, 3);
    assert!(!reads.enough(), "two unread are as many as two copies");
    assert_eq!(reads.stop_at(at(20)), at(1_000), "wait for 4 and 5");
    reads.answered(4, up(), false, LEASE, 2);
    assert!(reads.enough());

    // Enough, then not: a member with one copy answers.
    let mut reads = reads_of(&[1, 2, 3, 4, 5], 3);
    reads.answered(1, up(), false, LEASE, 3);
    reads.answered(2, up(), false, LEASE, 3);
    reads.answered(3, up(), false, LEASE, 3);
    assert_eq!(reads.stop_at(at(10)), at(260));
    reads.answered(4, up(), false, LEASE, 1);
    assert_eq!(reads.stop_at(at(20)), at(1_000), "one unread = one copy");
}

#[test]
fn a_failed_read_is_retried_while_it_decides_whether_every_grant_was_seen() {
    let mut reads = reads_of(&[1, 2, 3], 2);
    reads.answered(1, up(), false, LEASE, 2);
    // 2 and 3 restarted within the longest lease: missing already.
    reads.answered(2, Duration::from_secs(1), false, LEASE, 2);
    reads.answered(3, Duration::from_secs(1), false, LEASE, 2);
    assert!(
        !reads.failed(1, "refused".into(), at(10)),
        "missing already reach copies: no read can change the outcome"
    );
    assert_eq!(reads.stop_at(at(10)), at(10), "every first read ended");
    // Restarted members as many as copies: the others are still read
    // (their locks go in the table), to the deadline if need be.
    let mut reads = reads_of(&[1, 2, 3, 4], 2);
    reads.answered(1, Duration::from_secs(1), false, LEASE, 2);
    reads.answered(2, Duration::from_secs(1), false, LEASE, 2);
    assert!(!reads.failed(3, "refused".into(), at(10)));
    assert_eq!(reads.stop_at(at(10)), at(1_000), "4 is still read");
    reads.answered(4, up(), false, LEASE, 2);
    assert_eq!(reads.stop_at(at(20)), at(20));
    let mut reads = reads_of(&[1, 2, 3], 2);
    reads.answered(1, up(), false, LEASE, 2);
    assert!(reads.failed(2, "refused".into(), at(10)));
    assert!(reads.failed(3, "timed out".into(), at(10)));
    assert!(!reads.enough(), "two failing with two copies: read again");
    assert_eq!(reads.stop_at(at(10)), at(1_000));
    assert!(
        !reads.failed(3, "timed out".into(), at(951)),
        "not once the next read would pass the deadline"
    );
    reads.answered(2, up(), false, LEASE, 2);
    assert!(reads.enough());
}

#[test]
fn a_first_start_is_not_missing_however_young() {
    let mut reads = reads_of(&[1, 2], 2);
    reads.answered(1, Duration::ZERO, true, LEASE, 2);
    reads.answered(2, Duration::from_secs(9), false, Duration::from_secs(20), 2);
    let (_, missing, _) = reads.finish();
    assert_eq!(
        missing,
        vec![2],
        "counted against the longer of both leases"
    );
}

#[test]
fn a_member_another_saw_leave_is_read_too_or_missing() {
    // 1 and 2 answer, which covers every grant with 2 copies; the
    // members that left lately count as members not read yet.
    let mut reads = reads_of(&[1, 2], 2);
    reads.answered(1, Duration::from_secs(999), false, LEASE, 2);
    reads.answered(2, Duration::from_secs(999), false, LEASE, 2);
    assert!(reads.enough());
    reads.add(3);
    reads.add(3);
    assert_eq!(reads.members(), &[1, 2, 3]);
    assert!(reads.enough(), "one of three unread, with two copies");
    reads.add(4);
    assert!(!reads.enough(), "two unread: a grant may be on them alone");
    let (read, missing, _) = reads.finish();
    assert_eq!(read, vec![1, 2]);
    assert_eq!(missing, vec![3, 4], "unread departed members count missing");
}

#[test]
fn a_strict_rebuild_reads_a_failed_member_again_only_for_a_while() {
    let mut reads = reads_of(&[1, 2, 3], 2).reread_for(TIMEOUT / 4, TIMEOUT);
    reads.answered(1, up(), false, LEASE, 2);
    reads.answered(2, Duration::from_secs(1), false, LEASE, 2);
    assert!(reads.failed(3, "refused".into(), at(10)), "within the span");
    assert!(
        !reads.failed(3, "refused".into(), at(201)),
        "past a quarter of the timeout a dead member is not waited for"
    );
    // One that does not answer at all is waited for as long.
    let mut reads = reads_of(&[1, 2, 3], 2).reread_for(TIMEOUT / 4, TIMEOUT);
    reads.answered(1, up(), false, LEASE, 2);
    reads.answered(2, Duration::from_secs(1), false, LEASE, 2);
    assert_eq!(reads.stop_at(at(10)), at(250));
}

#[test]
fn a_restarted_member_counts_as_missing_only_for_grants_before_its_start() {
    let lease = Duration::from_secs(10);
    let secs = Duration::from_secs;
    // Two copies; the speaker unread and one member restarted 3 s ago:
    // only grants older than 3 s may be unseen, and they end within 7 s.
    assert_eq!(at_risk_for(&[1, 2], &[secs(3)], 2, lease), secs(7));
    // Two unread: any grant.
    assert_eq!(at_risk_for(&[1, 2], &[], 2, lease), lease);
    // Two restarted, none unread: the later of the two restarts.
    assert_eq!(at_risk_for(&[1, 2], &[secs(8), secs(2)], 2, lease), secs(2));
    // Three copies, one unread, restarts 1 s, 4 s and 6 s ago: a grant
    // needs two restarts after it, the second most recent is 4 s ago.
    let restarted = [secs(6), secs(1), secs(4)];
    assert_eq!(at_risk_for(&[1, 2, 3, 4], &restarted, 3, lease), secs(6));
    // Up longer than the lease: nothing it lost can still run.
    assert_eq!(at_risk_for(&[1, 2], &[secs(30)], 2, lease), Duration::ZERO);
}
