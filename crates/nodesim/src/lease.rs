//! The leases of the runs and the liveness bound they set: how soon after
//! the faults heal every node must serve a grant.

use std::time::Duration;

use locktable::LeaseRule;

/// How soon after the faults heal every node must serve a grant, with
/// the leases of most runs ([`LEASE`]): [`liveness_bound`].
pub const LIVENESS_BOUND: Duration = liveness_bound(LEASE);

/// How soon after the faults heal every node must serve a grant, with
/// leases of at most `lease.max`: seven seconds (an election, a rebuild's
/// reads, a retry, round trips on a slow network) and, for strict mode's
/// hold after a rebuild that missed a member, the longest lease.
pub const fn liveness_bound(lease: LeaseRule) -> Duration {
    Duration::from_secs(7).saturating_add(lease.max)
}

/// The leases of most runs: short, so that many come and go.
pub const LEASE: LeaseRule = LeaseRule {
    default: Duration::from_secs(2),
    max: Duration::from_secs(3),
};
