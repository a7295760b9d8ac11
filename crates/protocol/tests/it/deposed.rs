//! A member whose guard ran out (deposed, or cut off and paused) hands
//! nothing on: what a take-back, a forget or a cancel would let a waiter
//! have goes to nobody, and the waiters are told to retry.

use crate::common;

use common::*;
use leasehold_protocol::{Members, RebuildMode};
use locktable::Acquired;

/// A grant taken back once the speaker's guard ran out (its copy round
/// failed while the speaker was cut off and paused) is handed to no waiter:
/// that grant would be a deposed speaker's. The simulation found it
/// (`sim --sessions --proceed`, seed 513546: the speaker woke from a pause
/// after its successor's election, its copy round failed, and the name went
/// to the next waiter in the old term). The waiter is told to retry, and
/// the name stays free.
#[test]
fn a_grant_taken_back_once_the_guard_ran_out_is_handed_to_no_waiter() {
    let now = at(0);
    let guard = leading(3, now);
    let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
    let first = granted(&mut m, "a", 1, 2, &guard, now);
    let Ok((Acquired::Waiting(waiter), _)) = m.acquire(wait_for("a", 2, 1), &guard, now) else {
        panic!("waits")
    };
    let woke = at(2_000);
    assert!(!m.may_speak(&guard, woke), "the guard ran out");
    assert_eq!(m.take_back(&first, &guard, woke), Members::ALL);
    let answers = m.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, waiter);
    assert!(answers[0].result.is_err(), "{:?}", answers[0].result);
    let guard = leading(3, woke);
    assert!(m.get("a", &guard, woke).unwrap().is_none(), "taken back");
}

/// A forget heard while the guard has run out grants nothing: a set that
/// leaves the forgotten name's queue would let the request behind it on
/// another name be served, a deposed speaker's grant (`sim --kinds --sets`,
/// seed 2180: a speaker paused through its successor's election woke and
/// granted a waiting request as a forget turned a set away). Its waiters
/// are told to retry; with the guard fresh, the request is served.
#[test]
fn a_forget_once_the_guard_ran_out_grants_nothing() {
    use leasehold_protocol::SetAcquisition;
    use locktable::AcquiredSet;
    let now = at(0);
    let guard = leading(3, now);
    let woke = at(2_000);
    for fresh in [false, true] {
        let mut m = speaker(1, 3, now, vec![], RebuildMode::Proceed);
        let held = granted(&mut m, "a", 1, 2, &guard, now);
        let set = vec![wait_for("a", 2, 1), wait_for("c", 3, 1)];
        let Ok(SetAcquisition::Table(AcquiredSet::Waiting(_), _)) =
            m.acquire_set(set, None, &guard, now)
        else {
            panic!("the set waits")
        };
        let Ok((Acquired::Waiting(behind), _)) = m.acquire(wait_for("c", 4, 1), &guard, now) else {
            panic!("waits behind the set")
        };
        let at_forget = if fresh { leading(3, woke) } else { guard };
        m.forget("a", held.id, None, &at_forget, woke);
        let answers = m.take_answers();
        let served: Vec<_> = answers.iter().filter(|a| a.result.is_ok()).collect();
        match fresh {
            true => assert!(
                served.len() == 1 && served[0].waiter == behind,
                "{answers:?}"
            ),
            false => assert!(served.is_empty() && answers.len() == 2, "{answers:?}"),
        }
    }
}
