//! Second reader's attacks on "the session's note stands for its locks"
//! (70cc907) and the session copies' fallback (b67b0ca): a release of a
//! lock of a session must reach every member keeping a copy of it.

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Made, Member, RebuildMode, RecordOut, Recording, SessionRenewal};
use locktable::{session_name, Acquired, Lock, LockId, MonoTime, Request};

fn outs(r: &mut Recording) -> Vec<RecordOut> {
    std::iter::from_fn(|| r.poll()).collect()
}

fn granted_in(s: &mut Member, term: u64, request: Request, now: MonoTime) -> (Lock, Made) {
    match s.acquire(request, &leading(term, now), now) {
        Ok((Acquired::Granted(lock), made)) => (lock, made),
        other => panic!("not granted: {other:?}"),
    }
}

fn arrived(lock: &Lock, sent: MonoTime, arrives: MonoTime) -> Lock {
    lock.in_transit(sent).arrive(arrives)
}

fn renew(
    s: &mut Member,
    term: u64,
    sid: LockId,
    node: u64,
    lease: Option<Duration>,
    now: MonoTime,
) -> (Lock, Made) {
    let renewal = SessionRenewal {
        id: sid,
        lease,
        node,
        digest: if node == s.id() {
            s.session_digest(sid)
        } else {
            None
        },
        client_digest: None,
        session_copies: true,
        reclaimable: false,
    };
    let (renewed, made) = s.renew_session(renewal, &leading(term, now), now).unwrap();
    (renewed.session, made)
}

/// The speaker puts `lock` (its own client's) on record at `now`: one copy,
/// to member 2.
fn copy_to_2(s: &mut Member, term: u64, lock: &Lock, made: Made, now: MonoTime) -> Recording {
    let mut r = s.start_on_record(lock, s.id(), made, &leading(term, now), now);
    assert_eq!(outs(&mut r), [RecordOut::Copy(2)]);
    r
}

/// Member 2 keeps a session's record from an earlier term that ends later
/// than anything the speaker of the next term noted (the session renewed
/// shorter since): a session copy of the new term must not renew member 2's
/// copy of a lock granted in the new term to that earlier end, past every
/// note of the new speaker, or the lock's release is not passed on to
/// member 2 and the next rebuild brings the released lock back (its name
/// held, by a session renewed on, for a client that released it). Fails
/// when the copies follow the session's record rather than the copy's end.
#[test]
fn a_lock_renewed_by_a_session_copy_past_the_notes_still_has_its_release_passed_on() {
    // Term 1: speaker 1 grants its own client a session of 60 s, copied to
    // member 2 (no lock in it yet).
    let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
    let mut m2 = member(2, RebuildMode::Proceed);
    let sid = LockId::from_u128(900);
    let (session, made) = granted_in(
        &mut s1,
        1,
        Request {
            lease: Some(Duration::from_secs(60)),
            ..request(&session_name(sid), 900, 1)
        },
        at(0),
    );
    let r = copy_to_2(&mut s1, 1, &session, made, at(0));
    let noted = r.session_locks().expect("a session's copy");
    assert!(m2
        .take_session_copy(1, arrived(&session, at(0), at(1)), noted, 1, at(1))
        .unwrap());

    // Term 2 (speaker 1 again, after a blip): its notes start empty.
    let now = at(1_000);
    s1.drop_table(Some(2), now);
    let reads = vec![
        (1, s1.own_report(now)),
        (2, m2.own_report(now)),
        (3, Vec::new()),
    ];
    rebuild_reading(&mut s1, 2, reads, vec![], now);

    // The client renews its session for 10 s (to 12 s): copied to member
    // 2, whose record of the session still ends at 60 s.
    let now = at(2_000);
    let (renewed, made) = renew(&mut s1, 2, sid, 1, Some(Duration::from_secs(10)), now);
    let r = copy_to_2(&mut s1, 2, &renewed, made, now);
    let noted = r.session_locks().unwrap();
    assert!(m2
        .take_session_copy(2, arrived(&renewed, now, now), noted, 2, now)
        .unwrap());

    // A lock `c` is granted in the session in term 2 and copied to member 2.
    let now = at(3_000);
    let (c, made) = granted_in(
        &mut s1,
        2,
        Request {
            session: Some(sid),
            ..request("c", 3, 1)
        },
        now,
    );
    assert_eq!(c.fence.epoch(), 2);
    copy_to_2(&mut s1, 2, &c, made, now);
    m2.take_copies(2, vec![arrived(&c, now, now)], 2, now)
        .unwrap();

    // Renewed again (to 14 s) with member 2's copies matching: member 2
    // renews its copy of `c`, to 14 s (to its record of the session, 60 s,
    // before the fix: past every note speaker 1 has of member 2).
    let now = at(4_000);
    let (renewed, made) = renew(&mut s1, 2, sid, 1, None, now);
    let r = copy_to_2(&mut s1, 2, &renewed, made, now);
    let noted = r.session_locks().unwrap();
    assert_eq!(noted.count, 1);
    assert!(m2
        .take_session_copy(2, arrived(&renewed, now, now), noted, 2, now)
        .unwrap());

    // The client moves to node 3 and renews there (no copy needed: the
    // speaker and node 3 are records enough).
    for t in [10_000, 16_000] {
        renew(&mut s1, 2, sid, 3, None, at(t));
    }

    // `c` is released at 20 s: member 2 is told, or keeps no copy of it.
    let now = at(20_000);
    let (_, to) = s1.release("c", c.id, &leading(2, now), now).unwrap();
    let kept = m2.own_report(now).into_iter().find(|l| l.id == c.id);
    assert!(
        to.contains(2) || kept.is_none(),
        "member 2 is not told of the release of `c`, and keeps {kept:?}"
    );

    // Speaker 1 crashes; node 3 rebuilds for term 3 reading members 2 and 3
    // (member 3 keeps what speaker 1's table had, as node 3's records of
    // the session would).
    let now = at(21_000);
    let mut s3 = member(3, RebuildMode::Proceed);
    s3.drop_table(Some(3), now);
    let reads = vec![(2, m2.own_report(now)), (3, s1.own_report(now))];
    rebuild_reading(&mut s3, 3, reads, vec![1], now);
    let back = s3.get("c", &leading(3, now), now).unwrap();
    assert!(back.is_none(), "term 3 holds the released `c`: {back:?}");
}
