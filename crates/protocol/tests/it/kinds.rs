//! Permits at the member level: a semaphore admits as many holders as it
//! has permits, unless sabotaged.

use crate::common::*;

use leasehold_protocol::{RebuildMode, Refusal, Sabotage};
use locktable::{Acquired, Kind, Request};

/// The sabotage `permits-overfull`: the speaker grants a request for one
/// of two permits as one of three, so a third holder shares the name.
/// Without it, the third is refused.
#[test]
fn a_semaphore_admits_its_permits_unless_sabotaged() {
    for sabotaged in [false, true] {
        let mut s1 = speaker(1, 1, at(0), vec![], RebuildMode::Proceed);
        s1.set_sabotage(Sabotage {
            permits_overfull: sabotaged,
            ..Sabotage::NONE
        });
        let permit = |id| Request {
            kind: Kind::Permit(2),
            ..request("pool", id, 2)
        };
        for id in [1, 2] {
            let granted = s1.acquire(permit(id), &leading(1, at(1)), at(1));
            assert!(
                matches!(granted, Ok((Acquired::Granted(_), _))),
                "{granted:?}"
            );
        }
        let third = s1.acquire(permit(3), &leading(1, at(1)), at(1));
        match sabotaged {
            true => assert!(matches!(third, Ok((Acquired::Granted(_), _))), "{third:?}"),
            false => assert!(matches!(third, Err(Refusal::Held(_))), "{third:?}"),
        }
    }
}
