//! Time as the table sees it: a monotonic instant the caller reads, and leases.

use std::ops::{Add, Sub};
use std::time::Duration;

/// An instant on the caller's monotonic clock, in nanoseconds from an origin
/// the caller picks.
///
/// The table never reads a clock: every call that depends on time is given
/// the current `MonoTime`. Nodes never send one another a `MonoTime`; they
/// send durations (time left, time held), which each adds to its own clock.
/// A caller should pick an origin well before its first reading (a node
/// uses its start time minus many years) so that subtracting a time held
/// never saturates at zero.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MonoTime(u64);

impl MonoTime {
    /// The origin of the clock.
    pub const ZERO: MonoTime = MonoTime(0);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        MonoTime(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: MonoTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for MonoTime {
    type Output = MonoTime;
    /// Saturates at the end of time rather than wrapping.
    fn add(self, d: Duration) -> MonoTime {
        MonoTime(self.0.saturating_add(nanos(d)))
    }
}

impl Sub<Duration> for MonoTime {
    type Output = MonoTime;
    /// Saturates at the origin rather than wrapping.
    fn sub(self, d: Duration) -> MonoTime {
        MonoTime(self.0.saturating_sub(nanos(d)))
    }
}

/// The default lease and the longest one granted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LeaseRule {
    /// The lease of a request naming none (or zero).
    pub default: Duration,
    /// The longest lease granted: a longer request is clamped to it.
    pub max: Duration,
}

impl LeaseRule {
    /// The seed's default lease: 30 s.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The seed's maximum lease: 10 min. A lock is for a short critical
    /// section, and the lease is what frees it when its holder dies.
    pub const MAX_LEASE: Duration = Duration::from_secs(600);
    /// The longest lease any node may be set to grant (a day): the bound a
    /// rebuild, a reclaim and a forget apply to a lease another node
    /// reports. Not the table's own `max`: members may run with different
    /// maximums, and cutting another speaker's grant to this one's shorter
    /// maximum would free a name its holder still holds.
    pub const LONGEST: Duration = Duration::from_secs(24 * 60 * 60);

    /// The lease granted for a request asking for `requested`: none or zero
    /// means the default, longer than the maximum is clamped to it.
    pub fn lease(&self, requested: Option<Duration>) -> Duration {
        match requested {
            None => self.default.min(self.max),
            Some(d) if d.is_zero() => self.default.min(self.max),
            Some(d) => d.min(self.max),
        }
    }

    /// The lease granted for `requested` beside a lock-delay of `delay`
    /// ([`LeaseRule::lease`], cut so that lease and delay together stay
    /// within the longest lease every bound of the protocol counts: a
    /// closed name is a lock held). A rule whose longest leaves no room
    /// for the delay (members set apart, the grant made by another) cuts
    /// nothing rather than to nothing.
    pub fn lease_beside(&self, requested: Option<Duration>, delay: Duration) -> Duration {
        let lease = self.lease(requested);
        match self.max.saturating_sub(delay) {
            room if room.is_zero() => lease,
            room => lease.min(room),
        }
    }

    /// The lock-delay granted a lock of a session whose lease is `lease`:
    /// `requested`, cut so that the session's lease and the delay together
    /// stay within the longest lease (the lease is the session's, and
    /// moves with its renewals: the delay gives way).
    pub fn delay_beside(&self, requested: Duration, lease: Duration) -> Duration {
        requested.min(self.max.saturating_sub(lease))
    }
}

impl Default for LeaseRule {
    fn default() -> Self {
        LeaseRule {
            default: Self::DEFAULT_LEASE,
            max: Self::MAX_LEASE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_lease_or_zero_means_the_default() {
        let rule = LeaseRule::default();
        assert_eq!(rule.lease(None), Duration::from_secs(30));
        assert_eq!(rule.lease(Some(Duration::ZERO)), Duration::from_secs(30));
    }

    #[test]
    fn a_longer_lease_is_clamped_to_the_maximum() {
        let rule = LeaseRule::default();
        assert_eq!(
            rule.lease(Some(Duration::from_secs(3600))),
            Duration::from_secs(600)
        );
        assert_eq!(
            rule.lease(Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn both_are_configurable() {
        let rule = LeaseRule {
            default: Duration::from_secs(2),
            max: Duration::from_secs(4),
        };
        assert_eq!(rule.lease(None), Duration::from_secs(2));
        assert_eq!(
            rule.lease(Some(Duration::from_secs(9))),
            Duration::from_secs(4)
        );
    }

    #[test]
    fn mono_time_saturates() {
        let t = MonoTime::from_nanos(5);
        assert_eq!(t - Duration::from_secs(1), MonoTime::ZERO);
        assert_eq!(
            MonoTime::from_nanos(u64::MAX) + Duration::from_secs(1),
            MonoTime::from_nanos(u64::MAX)
        );
        assert_eq!(
            t.saturating_duration_since(MonoTime::from_nanos(9)),
            Duration::ZERO
        );
    }
}
