//! Lock-delay at the member level (second reader).

use crate::common::*;

use std::time::Duration;

use leasehold_protocol::{Forwarded, RebuildMode, Refusal};
use locktable::{Acquired, LockInTransit};

fn delayed_in_transit(id: u128, lease: Duration, delay: Duration) -> LockInTransit {
    LockInTransit {
        delay,
        lease,
        ttl: lease + delay,
        ..in_transit(id, 1, lease)
    }
}

/// A stalled holder's late renewal, refused "not held" because its lease
/// lapsed, must not drop its node's record while the lock-delay still
/// closes the name: with two copies (the speaker and the holder's node),
/// that record is the only one a next speaker reads.
#[test]
fn a_late_renewal_refused_keeps_the_record_that_closes_the_name() {
    let lease = Duration::from_millis(1_500);
    let delay = Duration::from_secs(8);
    let mut m2 = member(2, RebuildMode::Proceed);
    let call = Forwarded {
        sent: at(0),
        read_before: 0,
    };
    let lock = m2
        .granted_through_speaker(
            call,
            delayed_in_transit(7, lease, delay),
            Duration::ZERO,
            at(1),
        )
        .unwrap();
    assert_eq!(lock.lease_ends(), at(1_500));
    assert_eq!(lock.expires, at(9_500));

    // The client stalled; it renews at 2 s, after its lease ran out: the
    // speaker's table answers not_held (lapsed, inside the delay).
    m2.renewal_refused(lock.id, &Refusal::NotHeld, at(2_000));

    // The speaker crashes at 3 s; speaker 3 of term 2 reads members 2 and 3.
    let now = at(3_000);
    let reported = m2.own_report(now);
    let mut s = member(3, RebuildMode::Proceed);
    s.drop_table(Some(2), now);
    rebuild_reading(
        &mut s,
        2,
        vec![(2, reported), (3, Vec::new())],
        vec![1],
        now,
    );
    let guard = leading(2, now);
    let got = s.acquire(request("jobs/1", 9, 3), &guard, now);
    assert!(
        matches!(got, Err(Refusal::Held(_))),
        "the lapsed grant's delay (until 9.5 s) must keep jobs/1 closed at 3 s, got {got:?}"
    );
    assert!(!matches!(got, Ok((Acquired::Granted(_), _))));
}
