//! The members a strict rebuild missed are read again during the hold: a
//! lock only they kept (a copy, a lock of a session) is taken back into
//! the table before its session's renewal would answer it lost.

use crate::common::*;

use crate::common::renewal as renewal_of;

use std::time::Duration;

use leasehold_protocol::{LateRead, Member, MemberRead, RebuildMode, Refusal, SessionRenewal};
use locktable::{session, session_name, Fence, Lock, LockId, Request};

/// Speaker 1's grants of term 1: a session (10 s) at 0 for a client of
/// node 1, `a` in it at 1 ms, and `x`, a plain lock, at 2 ms.
fn term_1_grants() -> (Lock, Lock, Lock) {
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Strict);
    let session = grant_for(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            ..request(&session_name(LockId::from_u128(900)), 900, 1)
        },
        1,
        at(0),
    );
    let a = Request {
        session: Some(session.id),
        ..request("a", 1, 1)
    };
    let a = grant_for(&mut s1, a, 1, at(1));
    let x = grant_for(&mut s1, request("x", 2, 1), 1, at(2));
    (session, a, x)
}

/// Member 2 rebuilt for term 2 at 2 s in strict mode, reading only itself
/// (a copy of the session, and `read`), missing 1 and 3: new grants are
/// held back for the longest lease and a leader lease.
fn speaker_2_missing_1_and_3(read: Vec<Lock>) -> Member {
    let mut s2 = member(2, RebuildMode::Strict);
    s2.drop_table(Some(2), at(2_000));
    rebuild_reading(&mut s2, 2, vec![(2, read)], vec![1, 3], at(2_000));
    s2
}

/// Member `member`'s report: `locks`, as every member runs (two copies,
/// the longest lease).
fn report(member: u64, locks: Vec<Lock>) -> MemberRead {
    MemberRead {
        member,
        max_lease: MAX_LEASE,
        copies: 2,
        uptime: None,
        locks,
        departed: Vec::new(),
    }
}

fn renewal(sid: LockId, client_digest: u128) -> SessionRenewal {
    SessionRenewal {
        id: sid,
        lease: None,
        node: 2,
        digest: None,
        client_digest: Some(client_digest),
        session_copies: true,
        reclaimable: true,
    }
}

#[test]
fn a_lock_only_a_missed_member_kept_is_taken_back_before_its_session_renews() {
    let (session, a, _) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(vec![session.clone()]);
    let now = at(2_500);
    let guard = leading(2, now);
    assert!(
        s2.get("a", &guard, now).unwrap().is_none(),
        "the rebuild missed `a`"
    );
    assert!(s2.late_read_wanted(2, 3, &guard, now));

    let done = s2.late_read(2, report(3, vec![a.clone()]), &guard, now);
    let done = done.expect("node 3 is wanted during the hold");
    assert_eq!(
        done,
        LateRead {
            taken_back: 1,
            merged: 0,
            refused: 0
        }
    );
    let kept = s2.get("a", &guard, now).unwrap().expect("`a` taken back");
    assert_eq!(
        (kept.id, kept.fence, kept.session),
        (a.id, a.fence, Some(session.id))
    );

    // The client's renewal of the session counts `a`: nothing is lost.
    let (renewed, _) = s2
        .renew_session(renewal(session.id, session::digest([a.id])), &guard, now)
        .expect("renewed");
    assert_eq!(renewed.locks, 1);
    let listed = renewed.records.unwrap_or_default();
    assert!(listed.iter().all(|l| l.id == a.id), "{listed:?}");
}

#[test]
fn a_late_report_is_taken_only_during_the_hold_by_the_term_that_missed_it() {
    let (session, a, _) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(vec![session]);
    let now = at(2_500);
    let guard = leading(2, now);
    // A member the rebuild read, another term, or this member itself.
    assert!(!s2.late_read_wanted(2, 2, &guard, now));
    assert!(!s2.late_read_wanted(3, 3, &guard, now));
    let wrong_term = s2.late_read(3, report(3, vec![a.clone()]), &guard, now);
    assert_eq!(wrong_term, Err(Refusal::NotRebuilt));
    // Led no longer (Raft says another term).
    let other = leading(3, now);
    assert!(!s2.late_read_wanted(2, 3, &other, now));
    // A report holding a grant of a later term: this speaker was deposed.
    let later = Lock {
        fence: Fence::new(3, 1),
        ..a.clone()
    };
    let deposed = s2.late_read(2, report(3, vec![later]), &guard, now);
    assert_eq!(deposed, Err(Refusal::NotRebuilt));
    assert!(s2.get("a", &guard, now).unwrap().is_none());
    // Once the hold is over, the rebuild's count stands: nothing is read.
    let after = at(2_000) + MAX_LEASE + LEADER_LEASE + Duration::from_millis(1);
    let guard = leading(2, after);
    assert!(!s2.late_read_wanted(2, 3, &guard, after));
    let late = s2.late_read(2, report(3, vec![a]), &guard, after);
    assert_eq!(late, Err(Refusal::NotRebuilt));
}

#[test]
fn a_late_record_that_does_not_fit_beside_the_holder_is_not_kept() {
    let (_, _, x) = term_1_grants();
    // Another grant of `x`, made apart by another speaker (term 0), is the
    // table's. (A later grant of `x`'s own term would supersede `x`.)
    let rival = Lock {
        id: LockId::from_u128(77),
        fence: Fence::new(0, 9),
        ..x.clone()
    };
    let mut s2 = speaker_2_missing_1_and_3(vec![rival.clone()]);
    let now = at(2_500);
    let guard = leading(2, now);
    let done = s2.late_read(2, report(1, vec![x]), &guard, now).unwrap();
    assert_eq!((done.taken_back, done.refused), (0, 1));
    let holder = s2.get("x", &guard, now).unwrap().expect("held");
    assert_eq!(holder.id, rival.id);
}

#[test]
fn a_session_the_table_lacks_is_left_to_its_nodes_records() {
    // The rebuild read neither the session nor `a`: a late report of both
    // takes neither back (the renewing node's records do, with every lock
    // of the session, or the renewal is refused `503` during the hold).
    let (session, a, _) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(Vec::new());
    let now = at(2_500);
    let guard = leading(2, now);
    let done = s2
        .late_read(2, report(3, vec![session.clone(), a]), &guard, now)
        .unwrap();
    assert_eq!((done.taken_back, done.refused), (0, 2));
    assert!(s2.get(&session.name, &guard, now).unwrap().is_none());
    assert!(s2.get("a", &guard, now).unwrap().is_none());
}

#[test]
fn a_lock_released_during_the_hold_is_not_read_back() {
    // `x`'s client releases it during the hold; the table lacks it. A
    // missed member's copy of it, read late, must not close its name.
    let (_, _, x) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(Vec::new());
    let now = at(2_500);
    let guard = leading(2, now);
    let released = s2.release("x", x.id, &guard, now);
    assert_eq!(released.err(), Some(Refusal::NotHeld));
    let done = s2
        .late_read(2, report(3, vec![x]), &guard, at(2_600))
        .unwrap();
    assert_eq!((done.taken_back, done.refused), (0, 1));
    assert!(s2.get("x", &guard, at(2_600)).unwrap().is_none());
}

#[test]
fn no_lock_of_a_session_renewed_during_the_hold_is_read_back() {
    // The session's renewal reached the speaker before the late read: its
    // client was answered the session without `a` and counts it lost. Read
    // back, `a` would follow the session's renewals, held by nobody.
    let (session, a, _) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(vec![session.clone()]);
    let now = at(2_500);
    let guard = leading(2, now);
    let (renewed, _) = s2
        .renew_session(renewal(session.id, session::digest([a.id])), &guard, now)
        .expect("renewed");
    assert_eq!(renewed.locks, 0);
    let done = s2
        .late_read(2, report(3, vec![a]), &guard, at(2_600))
        .unwrap();
    assert_eq!((done.taken_back, done.refused), (0, 1));
    assert!(s2.get("a", &guard, at(2_600)).unwrap().is_none());
}

#[test]
fn a_renewal_of_a_grant_whose_lease_ran_out_here_waits_for_the_late_read() {
    // `p` (10 s, a 3 s lock-delay) granted at 0, renewed at 8 s: the
    // renewal's records are at members 1 and 3, which the rebuild missed;
    // it read the first grant's record (from member 2).
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Strict);
    let p = grant_for(
        &mut s1,
        Request {
            lease: Some(Duration::from_secs(10)),
            delay: Duration::from_secs(3),
            ..request("p", 5, 2)
        },
        1,
        at(0),
    );
    let renewed_at_8 = Lock {
        expires: p.expires + Duration::from_secs(8),
        ..p.clone()
    };
    let mut s2 = speaker_2_missing_1_and_3(vec![p.clone()]);
    // At 11 s the table's lease of `p` ran out (its delay runs to 13 s);
    // the renewing node sends the record it has, no later.
    let now = at(11_000);
    let guard = leading(2, now);
    let renewal = || renewal_of("p", p.id, 2, Some(p.clone()));
    let refused = s2.renew(renewal(), &guard, now);
    assert_eq!(refused.err(), Some(Refusal::MayBeOnRecordElsewhere));
    // Member 3's later record, read late, lets the retry through.
    let done = s2
        .late_read(2, report(3, vec![renewed_at_8]), &guard, now)
        .unwrap();
    assert_eq!(done.merged, 1);
    let (lock, _) = s2.renew(renewal(), &guard, at(11_100)).unwrap();
    assert_eq!(lock.fence, p.fence);
}

#[test]
fn a_take_back_of_a_grant_the_table_lacks_does_not_keep_it_from_its_records() {
    // A retry of the request was answered with `x` and its client renewed
    // it; the follower whose first caller went away takes the grant back
    // during the hold of a rebuild that missed it (from the second reader).
    let (_, _, x) = term_1_grants();
    let mut s2 = speaker_2_missing_1_and_3(Vec::new());
    let (now, guard) = (at(2_500), leading(2, at(2_500)));
    let taken = s2.take_back_unrenewed("x", x.id, &guard, now);
    assert_eq!(taken.err(), Some(Refusal::NotHeld));
    let done = s2
        .late_read(2, report(1, vec![x.clone()]), &guard, at(2_600))
        .unwrap();
    assert_eq!(done.taken_back, 1, "the holder's record is taken back");
    let renewed = s2.renew(renewal_of("x", x.id, 1, None), &guard, at(2_700));
    assert!(renewed.is_ok(), "{renewed:?}");
}
