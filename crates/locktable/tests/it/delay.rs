//! Lock-delay: a grant whose lease runs out unreleased keeps its name
//! closed for its delay; a release frees it at once; the holder holds
//! nothing once its lease ran out.

use crate::common::*;

use std::time::Duration;

use locktable::{AcquireError, Acquired, LeaseRule, LockError, LockId, Request};

fn delayed(name: &str, id: u128, delay: Duration) -> Request {
    Request {
        delay,
        ..req(name, id, 1)
    }
}

fn refused_as_held(result: Result<Acquired, AcquireError>) {
    assert!(
        matches!(result, Err(AcquireError::Held(_))),
        "expected held, got {result:?}"
    );
}

#[test]
fn a_lapsed_lease_keeps_its_name_closed_for_the_delay() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let lock = granted(table.acquire(delayed("a", 1, 3 * SEC), t(0)));
    assert_eq!(lock.lease, 10 * SEC);
    assert_eq!(lock.delay, 3 * SEC);
    assert_eq!(lock.lease_ends(), t(10));
    assert_eq!(lock.expires, t(13));
    assert_eq!(lock.lease_left(t(4)), 6 * SEC);

    // The lease ran out: the holder holds nothing, the name stays closed.
    table.poll(t(11));
    refused_as_held(table.acquire(req("a", 2, 1), t(11)));
    let shown = table.get("a", t(11)).unwrap().expect("closed");
    assert!(shown.is_lapsed(t(11)));
    assert_eq!(shown.lease_left(t(11)), Duration::ZERO);
    assert_eq!(
        table.renew("a", LockId::from_u128(1), None, 1, t(11)),
        Err(LockError::NotHeld),
        "a renewal after the lease ran out is refused"
    );
    assert_eq!(
        table.release("a", LockId::from_u128(1), t(12)),
        Err(LockError::NotHeld),
        "a release after the lease ran out does not cut the delay short"
    );
    refused_as_held(table.acquire(req("a", 2, 1), t(12)));

    // The delay over, the name is free.
    table.poll(t(13));
    let next = granted(table.acquire(req("a", 3, 1), t(13)));
    assert!(next.fence > lock.fence);
}

#[test]
fn a_waiter_is_served_when_the_delay_ends_not_the_lease() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(delayed("a", 1, 5 * SEC), t(0)));
    let waiting = table
        .acquire(waiting(req("a", 2, 1), 60 * SEC), t(1))
        .unwrap();
    assert!(matches!(waiting, Acquired::Waiting(_)));
    table.poll(t(10));
    table.poll(t(14));
    assert!(table.take_answers().is_empty(), "not within the delay");
    table.poll(t(15));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].result.as_ref().unwrap().id, LockId::from_u128(2));
}

#[test]
fn a_release_within_the_lease_frees_the_name_at_once() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(delayed("a", 1, 30 * SEC), t(0)));
    table.release("a", LockId::from_u128(1), t(9)).unwrap();
    granted(table.acquire(req("a", 2, 1), t(9)));
}

#[test]
fn a_renewal_keeps_the_delay_after_the_new_lease() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(delayed("a", 1, 2 * SEC), t(0)));
    let renewed = table
        .renew("a", LockId::from_u128(1), Some(20 * SEC), 1, t(9))
        .unwrap();
    assert_eq!(renewed.delay, 2 * SEC);
    assert_eq!(renewed.lease_ends(), t(29));
    assert_eq!(renewed.expires, t(31));
    assert!(renewed.renewed_since_granted());
    let fresh = table.grant_of("a", LockId::from_u128(1), t(9)).unwrap();
    assert!(fresh.renewed_since_granted());
    let mut other = rebuilt_table(1, vec![], t(0));
    let just_granted = granted(other.acquire(delayed("b", 5, 2 * SEC), t(0)));
    assert!(
        !just_granted.renewed_since_granted(),
        "the delay is not a renewal"
    );
}

#[test]
fn the_lease_and_the_delay_together_stay_within_the_longest_lease() {
    let rule = LeaseRule {
        default: 30 * SEC,
        max: 60 * SEC,
    };
    let mut table = rebuilt_under(rule);
    let mut asked = delayed("a", 1, 20 * SEC);
    asked.lease = Some(600 * SEC);
    let lock = granted(table.acquire(asked, t(0)));
    assert_eq!(lock.lease, 40 * SEC, "cut to make room for the delay");
    assert_eq!(lock.expires, t(60));
    let renewed = table
        .renew("a", LockId::from_u128(1), Some(600 * SEC), 1, t(1))
        .unwrap();
    assert_eq!(renewed.expires, t(61));

    for bad in [60 * SEC, 61 * SEC] {
        assert!(
            matches!(
                table.acquire(delayed("b", 2, bad), t(1)),
                Err(AcquireError::BadDelay { .. })
            ),
            "a delay of {bad:?} leaves no lease under 60 s"
        );
    }
    let mut wide = rebuilt_under(LeaseRule::default());
    assert!(matches!(
        wide.acquire(delayed("c", 3, 61 * SEC), t(0)),
        Err(AcquireError::BadDelay { .. })
    ));
    granted(wide.acquire(delayed("c", 3, 60 * SEC), t(0)));
    let set = vec![delayed("d", 4, SEC), delayed("e", 5, 61 * SEC)];
    assert!(matches!(
        wide.acquire_set(set, t(0)),
        Err(AcquireError::BadDelay { .. })
    ));
}

#[test]
fn a_rebuild_keeps_a_lapsed_grant_closing_its_name_for_its_delay_left() {
    // A record reported after the holder's lease ran out, inside its delay.
    let mut lock = held_lock("a", 1, 2, t(0), t(13), 5);
    lock.lease = 10 * SEC;
    lock.delay = 3 * SEC;
    let mut table = rebuilt_table(2, vec![lock], t(11));
    refused_as_held(table.acquire(req("a", 2, 1), t(12)));
    assert_eq!(
        table.renew("a", LockId::from_u128(1), None, 2, t(12)),
        Err(LockError::NotHeld)
    );
    table.poll(t(13));
    granted(table.acquire(req("a", 3, 1), t(13)));
}

/// Second reader: two grants of one name made apart (a rebuild in Proceed
/// mode missed the first one's records): one lapsed, only its lock-delay
/// left, the other live. The seed's rule keeps the one held longest, the
/// lapsed one here, and the live holder loses its lock to a grant nobody
/// holds (before lock-delay the lapsed one would simply have ended).
#[test]
fn a_rebuild_keeps_a_live_grant_over_a_lapsed_one_of_another_term() {
    let mut lapsed = held_lock("a", 1, 2, t(0), t(30), locktable::Fence::new(1, 1).0);
    lapsed.lease = 10 * SEC;
    lapsed.delay = 20 * SEC;
    let live = held_lock("a", 2, 3, t(12), t(42), locktable::Fence::new(2, 1).0);
    let table = rebuilt_table(3, vec![lapsed, live], t(15));
    let kept = table.get("a", t(15)).unwrap().expect("held");
    assert_eq!(
        kept.id,
        LockId::from_u128(2),
        "the live holder keeps its lock; kept {kept:?}"
    );
}
