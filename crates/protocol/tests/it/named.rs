//! Retries of an acquisition its caller named (`Member::acquire_named`,
//! `waited`): the grant's id comes from the name, a retry finds its own
//! grant and renews it, and an id released lately is never handed out
//! again.

use std::time::Duration;

use leasehold_protocol::{waited, Acquisition, Guard, Member, Named, RebuildMode, Refusal, Waited};
use locktable::{AcquireError, Acquired, Lock, LockId, MonoTime, Request};

use crate::common::{at, leading, request, speaker};

const WALL_MS: u64 = 1_700_000_000_000;

fn named(request: &str) -> Named<'_> {
    Named {
        holder: "h",
        request,
        wall_ms: WALL_MS,
    }
}

fn waiting(name: &str, id: u128) -> Request {
    Request {
        wait: Duration::from_secs(5),
        ..request(name, id, 1)
    }
}

/// A speaker of term 3 at time 0, and its guard.
fn speaker_now() -> (Member, Guard, MonoTime) {
    let now = at(0);
    (
        speaker(1, 3, now, vec![], RebuildMode::Proceed),
        leading(3, now),
        now,
    )
}

/// `request` granted at once, as `named` if given.
fn grant(
    m: &mut Member,
    request: Request,
    named: Option<Named<'_>>,
    guard: &Guard,
    now: MonoTime,
) -> Lock {
    match m.acquire_named(request, named, guard, now) {
        Ok(Acquisition::Table(Acquired::Granted(lock), _)) => lock,
        other => panic!("not granted: {other:?}"),
    }
}

#[test]
fn a_named_grant_takes_the_id_made_from_its_name() {
    let (mut m, guard, now) = speaker_now();
    let lock = grant(&mut m, request("a", 7, 1), Some(named("r1")), &guard, now);
    assert_eq!(lock.id, named("r1").lock_id("a"));
    assert!(named("r1").owns(&lock));
    assert!(!named("r2").owns(&lock));

    // Not named: the id the driver made.
    let lock = grant(&mut m, request("b", 7, 1), None, &guard, now);
    assert_eq!(lock.id, LockId::from_u128(7));
}

#[test]
fn a_retry_that_finds_its_own_grant_renews_it_waiting_or_not() {
    let (mut m, guard, now) = speaker_now();
    let lock = grant(&mut m, request("a", 7, 1), Some(named("r1")), &guard, now);
    for retry in [request("a", 8, 1), waiting("a", 9)] {
        let again = m.acquire_named(retry, Some(named("r1")), &guard, now);
        let Ok(Acquisition::Own(own)) = again else {
            panic!("not its own grant: {again:?}");
        };
        assert_eq!(own.id, lock.id);
    }
    // Another acquisition of the same holder is refused, or waits.
    let other = m.acquire_named(request("a", 8, 1), Some(named("r2")), &guard, now);
    assert!(matches!(other, Err(Refusal::Held(l)) if l.id == lock.id));
    let other = m.acquire_named(waiting("a", 9), Some(named("r2")), &guard, now);
    assert!(matches!(
        other,
        Ok(Acquisition::Table(Acquired::Waiting(_), _))
    ));
}

#[test]
fn an_id_released_lately_is_not_handed_out_again() {
    let (mut m, guard, now) = speaker_now();
    let lock = grant(&mut m, request("a", 7, 1), Some(named("r1")), &guard, now);
    m.release("a", lock.id, &guard, now).expect("released");
    // The same acquisition again, in the same millisecond: its named id
    // was just released, so the grant takes the driver's.
    let again = grant(&mut m, request("a", 8, 1), Some(named("r1")), &guard, now);
    assert_eq!(again.id, LockId::from_u128(8));
    assert_ne!(again.id, lock.id);
}

#[test]
fn a_waiting_acquisition_is_answered_its_grant_its_own_or_a_refusal() {
    let (mut m, guard, now) = speaker_now();
    let own = grant(&mut m, request("a", 7, 1), Some(named("r1")), &guard, now);
    let other = crate::common::granted(&mut m, "b", 9, 1, &guard, now);

    assert_eq!(
        waited(Ok(other.clone()), Some(named("r1"))),
        Ok(Waited::Granted(other.clone()))
    );
    let held = |l: &locktable::Lock| Err(AcquireError::Held(Box::new(l.clone())));
    assert_eq!(
        waited(held(&own), Some(named("r1"))),
        Ok(Waited::Own(own.clone()))
    );
    assert_eq!(
        waited(held(&own), None),
        Err(Refusal::Held(Box::new(own.clone())))
    );
    assert_eq!(
        waited(held(&other), Some(named("r1"))),
        Err(Refusal::Held(Box::new(other)))
    );
    assert_eq!(
        waited(Err(AcquireError::FencesExhausted), Some(named("r1"))),
        Err(Refusal::FencesExhausted)
    );
    // A session that ended while its request waited: answered as a
    // request naming an ended session is (`404 not_held`), not retried.
    assert_eq!(
        waited(Err(AcquireError::NoSession), None),
        Err(Refusal::NoSession)
    );
}

/// Found by the second reader: a named retry (its first answer lost) of a shared or permit
/// acquisition, with wait 0, a few ms later (another wall_ms, so another
/// id). The doc promises "a retry of an acquisition that was granted is
/// answered with that grant, renewed, instead of 409 held".
#[test]
fn a_named_retry_of_a_reader_without_a_wait_finds_its_own_grant() {
    use locktable::Kind;
    let (mut m, guard, now) = speaker_now();
    let first_try = Named {
        holder: "h",
        request: "r1",
        wall_ms: WALL_MS,
    };
    let retry = Named {
        holder: "h",
        request: "r1",
        wall_ms: WALL_MS + 7,
    };
    let shared = |id| Request {
        kind: Kind::Shared,
        ..request("a", id, 1)
    };
    let lock = grant(&mut m, shared(7), Some(first_try), &guard, now);
    let again = m.acquire_named(shared(8), Some(retry), &guard, now);
    let holders = m.holders("a", &guard, now).unwrap();
    assert!(
        matches!(&again, Ok(Acquisition::Own(own)) if own.id == lock.id),
        "retry answered {again:?}; holders now {:?}",
        holders.iter().map(|l| l.id).collect::<Vec<_>>()
    );
}

#[test]
fn a_named_retry_of_a_permit_on_a_full_semaphore_is_not_refused_held() {
    use locktable::Kind;
    let (mut m, guard, now) = speaker_now();
    let permit = |id| Request {
        kind: Kind::Permit(2),
        ..request("s", id, 1)
    };
    // Another client holds the oldest permit.
    let _other = grant(
        &mut m,
        Request {
            holder: "other".into(),
            ..permit(1)
        },
        None,
        &guard,
        now,
    );
    let first_try = Named {
        holder: "h",
        request: "r1",
        wall_ms: WALL_MS,
    };
    let retry = Named {
        holder: "h",
        request: "r1",
        wall_ms: WALL_MS + 7,
    };
    let lock = grant(&mut m, permit(7), Some(first_try), &guard, now);
    let again = m.acquire_named(permit(8), Some(retry), &guard, now);
    assert!(
        matches!(&again, Ok(Acquisition::Own(own)) if own.id == lock.id),
        "retry answered {again:?}"
    );
}

/// A set granted to a named acquisition, whose answer was lost: its retry
/// (a later wall time, ids of its own) finds the set's own grants on every
/// name and is answered with them, not refused `held` against itself; a
/// set another acquisition of the holder names is refused.
#[test]
fn a_named_retry_of_a_set_finds_its_own_grants() {
    use leasehold_protocol::SetAcquisition;
    use locktable::AcquiredSet;
    let (mut m, guard, now) = speaker_now();
    let set = |first: u128| vec![request("a", first, 1), request("b", first + 1, 1)];
    let first_try = Named {
        holder: "h",
        request: "r1",
        wall_ms: WALL_MS,
    };
    let granted = match m.acquire_set(set(7), Some(first_try), &guard, now) {
        Ok(SetAcquisition::Table(AcquiredSet::Granted(locks), _)) => locks,
        other => panic!("not granted: {other:?}"),
    };
    assert_eq!(granted[0].id, first_try.lock_id("a"));
    assert_eq!(granted[1].id, first_try.lock_id("b"));
    let retry = Named {
        wall_ms: WALL_MS + 9,
        ..first_try
    };
    match m.acquire_set(set(20), Some(retry), &guard, now) {
        Ok(SetAcquisition::Own(own)) => assert_eq!(own, granted),
        other => panic!("the retry did not find its own set: {other:?}"),
    }
    let other = m.acquire_set(set(30), Some(named("r2")), &guard, now);
    assert!(matches!(other, Err(Refusal::Held(_))), "{other:?}");
}

/// Second reader: a retry of a named acquisition whose own earlier grant
/// lapsed (its lease ran out, its lock-delay keeps the name closed) must
/// not be answered `Own`: renewing that grant is refused (not held), so the
/// retry, which asked to wait, fails `not_held` instead of waiting for the
/// delay to end.
#[test]
fn a_retry_does_not_own_its_lapsed_grant() {
    let (mut m, guard, now) = speaker_now();
    let first = Request {
        lease: Some(Duration::from_secs(1)),
        delay: Duration::from_secs(5),
        ..request("a", 7, 1)
    };
    let lock = grant(&mut m, first, Some(named("r1")), &guard, now);
    let later = at(2_000);
    let guard = leading(3, later);
    let retry = Request {
        delay: Duration::from_secs(5),
        ..waiting("a", 8)
    };
    match m.acquire_named(retry, Some(named("r1")), &guard, later) {
        Ok(Acquisition::Own(own)) => {
            assert_eq!(own.id, lock.id);
            let renewed = m.renew(crate::common::renewal("a", own.id, 1, None), &guard, later);
            panic!("answered Own of a lapsed grant, whose renewal is {renewed:?}");
        }
        Ok(Acquisition::Table(Acquired::Waiting(_), _)) => {}
        other => panic!("expected to wait for the delay to end: {other:?}"),
    }
}

/// A named retry of a set whose own grants lapsed (only their lock-delay
/// left) is not answered with them: it waits for the names, under ids of
/// its own, and is granted when the delay ends.
#[test]
fn a_retry_of_a_set_does_not_own_its_lapsed_grants() {
    use leasehold_protocol::SetAcquisition;
    use locktable::AcquiredSet;
    let (mut m, guard, now) = speaker_now();
    let set = |first: u128, wait: bool| {
        ["a", "b"]
            .iter()
            .enumerate()
            .map(|(i, name)| Request {
                lease: Some(Duration::from_secs(1)),
                delay: Duration::from_secs(5),
                ..if wait {
                    waiting(name, first + i as u128)
                } else {
                    request(name, first + i as u128, 1)
                }
            })
            .collect::<Vec<_>>()
    };
    match m.acquire_set(set(7, false), Some(named("r1")), &guard, now) {
        Ok(SetAcquisition::Table(AcquiredSet::Granted(_), _)) => {}
        other => panic!("not granted: {other:?}"),
    }
    let later = at(2_000);
    let guard = leading(3, later);
    match m.acquire_set(set(20, true), Some(named("r1")), &guard, later) {
        Ok(SetAcquisition::Table(AcquiredSet::Waiting(_), _)) => {}
        other => panic!("expected to wait for the delay to end: {other:?}"),
    }
}
