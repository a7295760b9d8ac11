//! Releases passed on to one member that may keep a record of the lock:
//! in batches, each tried again until the member acknowledges it or the
//! lease it cancels has ended, and given to every other member too while
//! this one is slow or failing, so that the next speaker, whichever it is,
//! knows of them.

use std::collections::VecDeque;
use std::time::Duration;

use locktable::{LockId, MonoTime, Table};

mod outbox;

pub use outbox::{Batch, Outbox};

/// A release on its way to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The lock's name.
    pub name: String,
    /// The lock's id.
    pub id: LockId,
    /// When the released lease would have ended, on this member's clock.
    pub ends: MonoTime,
    /// Whether the other members were given it too (after the member it
    /// was for failed to acknowledge it): it is not given to them again.
    pub spread: bool,
}

impl Release {
    /// Whether every record of the released lease has ended by `now`, so no
    /// rebuild can bring it back: the release is no longer needed.
    pub fn ended(&self, now: MonoTime) -> bool {
        now >= self.ends + Table::FORGET_MARGIN
    }
}

/// The releases queued for one member, and when to send, try again and
/// spread them. The driver sends what [`ReleaseSender::sending`] takes,
/// reports how it went, and gives every other member what the sender says
/// to spread.
#[derive(Debug, Clone)]
pub struct ReleaseSender {
    pending: VecDeque<Release>,
    /// How long to wait after the next failure.
    wait: Duration,
    /// The member is slow or failing: releases are spread as they come.
    down: bool,
    /// The batch under way: how many releases from the front.
    in_flight: Option<usize>,
}

impl Default for ReleaseSender {
    fn default() -> Self {
        Self::new()
    }
}

impl ReleaseSender {
    /// The first wait before a member that did not acknowledge is tried
    /// again; it doubles with every failure, up to [`Self::RETRY_MAX`].
    pub const RETRY_FIRST: Duration = Duration::from_millis(50);
    /// The longest wait between tries to one member.
    pub const RETRY_MAX: Duration = Duration::from_secs(1);
    /// A batch a member has not acknowledged this soon is given to every
    /// other member too. A later speaker can exist no sooner than 75 ms
    /// after this one's last release (a follower votes only
    /// `election_timeout_max` after the last heartbeat it took; a speaker
    /// releases only until 75 ms before that), so the other members
    /// usually hear of it first.
    pub const SPREAD_AFTER: Duration = Duration::from_millis(50);

    /// Nothing queued.
    pub fn new() -> Self {
        ReleaseSender {
            pending: VecDeque::new(),
            wait: Self::RETRY_FIRST,
            down: false,
            in_flight: None,
        }
    }

    /// The releases queued, oldest first.
    pub fn pending(&self) -> &VecDeque<Release> {
        &self.pending
    }

    /// Whether the member is slow or failing (releases that come are
    /// spread at once).
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// Queues `release`; answers it, marked spread, when the other members
    /// must be given it now too (the member is slow or failing).
    pub fn push(&mut self, mut release: Release, now: MonoTime) -> Option<Release> {
        let spread = if self.down {
            Self::spread_one(&mut release, now)
        } else {
            None
        };
        self.pending.push_back(release);
        spread
    }

    /// The first `taken` releases leave as one batch.
    pub fn sending(&mut self, taken: usize) {
        self.in_flight = Some(taken.min(self.pending.len()));
    }

    /// Drops the first `count` releases, none of which needs sending any
    /// more (their leases ended).
    pub fn skip(&mut self, count: usize) {
        self.pending.drain(..count.min(self.pending.len()));
    }

    /// The batch under way was not acknowledged by `now`, its late time:
    /// the member is down, and every release queued for it, the batch's
    /// and those waiting behind it, goes to every other member too
    /// (answered, marked spread), as what comes while it is down does.
    pub fn late(&mut self, now: MonoTime) -> Vec<Release> {
        self.down = true;
        self.spread_pending(now)
    }

    /// The batch under way was acknowledged (`acked`) or not, at `now`.
    /// Answers the releases to give every other member, and how long to
    /// wait before the next try (none after an acknowledgement).
    pub fn sent(&mut self, acked: bool, now: MonoTime) -> (Vec<Release>, Option<Duration>) {
        if acked {
            if let Some(taken) = self.in_flight.take() {
                self.skip(taken);
            }
            self.wait = Self::RETRY_FIRST;
            self.down = false;
            return (Vec::new(), None);
        }
        self.down = true;
        let spread = self.spread_pending(now);
        self.in_flight = None;
        // Releases whose lease has ended meanwhile need no more tries.
        self.pending.retain(|r| !r.ended(now));
        let wait = self.wait;
        self.wait = (self.wait * 2).min(Self::RETRY_MAX);
        (spread, Some(wait))
    }

    /// Every queued release not spread yet nor ended, marked spread.
    fn spread_pending(&mut self, now: MonoTime) -> Vec<Release> {
        self.pending
            .iter_mut()
            .filter_map(|r| Self::spread_one(r, now))
            .collect()
    }

    fn spread_one(release: &mut Release, now: MonoTime) -> Option<Release> {
        if release.spread || release.ended(now) {
            return None;
        }
        release.spread = true;
        Some(release.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    fn release(id: u128, ends_ms: u64) -> Release {
        Release {
            name: "x".into(),
            id: LockId::from_u128(id),
            ends: at(ends_ms),
            spread: false,
        }
    }

    fn ids(releases: &[Release]) -> Vec<u128> {
        releases.iter().map(|r| r.id.as_u128()).collect()
    }

    #[test]
    fn failures_back_off_doubling_to_a_second_and_spread_once() {
        let mut s = ReleaseSender::new();
        assert_eq!(s.push(release(1, 60_000), at(0)), None);
        let mut waits = Vec::new();
        let mut spread = Vec::new();
        for _ in 0..7 {
            s.sending(1);
            let (out, wait) = s.sent(false, at(0));
            spread.extend(out);
            waits.push(wait.unwrap().as_millis());
        }
        assert_eq!(waits, [50, 100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(ids(&spread), [1], "given to the others once");
        s.sending(1);
        assert_eq!(s.sent(true, at(0)), (vec![], None));
        assert!(s.pending().is_empty());
        assert!(!s.is_down());
        s.sending(0);
        assert_eq!(s.sent(false, at(0)).1, Some(ReleaseSender::RETRY_FIRST));
    }

    #[test]
    fn a_late_batch_is_spread_and_so_is_what_comes_while_the_member_is_down() {
        let mut s = ReleaseSender::new();
        s.push(release(1, 60_000), at(0));
        s.push(release(2, 60_000), at(0));
        s.sending(1);
        assert!(!s.is_down());
        assert_eq!(
            ids(&s.late(at(50))),
            [1, 2],
            "the batch under way and what waits behind it"
        );
        assert!(s.is_down(), "what comes now is spread as it comes");
        let spread = s.push(release(3, 60_000), at(60)).unwrap();
        assert!(spread.spread && spread.id == LockId::from_u128(3));
        let (spread, _) = s.sent(false, at(2_000));
        assert!(spread.is_empty(), "1 was spread already");
        s.sending(3);
        let (spread, wait) = s.sent(true, at(2_060));
        assert!(spread.is_empty() && wait.is_none());
        assert_eq!(s.push(release(4, 60_000), at(2_070)), None, "up again");
    }

    #[test]
    fn a_release_whose_lease_ended_is_neither_tried_again_nor_spread() {
        let mut s = ReleaseSender::new();
        // Ends at 500 ms; with the forget margin, no longer needed at 1.5 s.
        s.push(release(1, 500), at(0));
        s.push(release(2, 60_000), at(0));
        s.sending(2);
        let (spread, _) = s.sent(false, at(1_400));
        assert_eq!(ids(&spread), [1, 2]);
        s.sending(2);
        let (spread, _) = s.sent(false, at(1_500));
        assert!(spread.is_empty());
        let left: Vec<Release> = s.pending().iter().cloned().collect();
        assert_eq!(ids(&left), [2]);
        let mut ended = release(3, 0);
        assert!(ended.ended(at(1_000)));
        ended.spread = false;
        s.late(at(1_600));
        assert_eq!(s.push(ended, at(1_600)), None, "ended: not spread");
    }
}
