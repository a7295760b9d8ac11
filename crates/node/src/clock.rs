//! The node's clocks: leases on a monotonic clock that counts suspend
//! (`CLOCK_BOOTTIME`), the wall clock only for display, and a watch for
//! suspends that the guard's Raft timestamps cannot see.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use locktable::MonoTime;
use nix::time::{clock_gettime, ClockId};

/// Reads the process's lease clock as the table's [`MonoTime`].
///
/// The clock is `CLOCK_BOOTTIME`: monotonic, not stepped by NTP or an
/// operator, and (unlike `CLOCK_MONOTONIC`, which `std::time::Instant` and
/// tokio read) still running while the machine or VM is suspended. A lease
/// counted on it ends on time even across a suspend.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Duration,
}

/// Where the process's clock starts on the table's scale: far enough from
/// zero that subtracting a time held never saturates.
const ORIGIN_NANOS: u64 = 1 << 62;

/// `CLOCK_BOOTTIME` as a duration since boot.
fn boottime() -> Duration {
    // Linux has had CLOCK_BOOTTIME since 2.6.39; should it ever fail,
    // CLOCK_MONOTONIC is the closest clock there is.
    let ts = clock_gettime(ClockId::CLOCK_BOOTTIME)
        .or_else(|_| clock_gettime(ClockId::CLOCK_MONOTONIC))
        .expect("a monotonic clock");
    Duration::from(ts)
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Clock { origin: boottime() }
    }

    /// The current time on the lease clock.
    pub fn now(&self) -> MonoTime {
        let since = boottime().saturating_sub(self.origin);
        MonoTime::from_nanos(
            ORIGIN_NANOS.saturating_add(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `instant` (a `CLOCK_MONOTONIC` reading, past or future) on the lease
    /// clock, by its distance from now.
    pub fn at(&self, instant: Instant) -> MonoTime {
        let mono_now = Instant::now();
        let now = self.now();
        match instant.checked_duration_since(mono_now) {
            Some(ahead) => now + ahead,
            None => now - mono_now.duration_since(instant),
        }
    }

    /// How long the process has been running (suspends included).
    pub fn uptime(&self) -> Duration {
        boottime().saturating_sub(self.origin)
    }

    /// Milliseconds since the Unix epoch on the wall clock (display only).
    pub fn wall_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// A jump in `CLOCK_BOOTTIME − CLOCK_MONOTONIC` larger than this is taken
/// for a suspend. Reading the two clocks one after the other can look like
/// a small one when the thread is preempted between the reads; a false
/// alarm costs one heartbeat's wait, and a real suspend shorter than this
/// is inside the guard's margin.
const SUSPEND_TOLERANCE: Duration = Duration::from_millis(10);

/// Notices that the machine was suspended, for the speaker's guard.
///
/// openraft stamps heartbeat acknowledgements with `CLOCK_MONOTONIC`, which
/// stands still during a suspend: after a resume, an acknowledgement from
/// before it looks recent although the followers may long have elected
/// another leader. The gap between the two clocks grows by exactly the time
/// suspended, so a growth seen at any check marks a resume; the guard then
/// trusts only acknowledgements of heartbeats sent after it.
#[derive(Debug)]
pub struct SuspendWatch {
    mono_origin: Instant,
    boot_origin: Duration,
    /// The largest gap seen, in ns.
    gap_ns: AtomicU64,
    /// When (ns after `mono_origin`) a suspend was last noticed; 0: never.
    resumed_ns: AtomicU64,
}

impl SuspendWatch {
    /// A watch whose origin is now.
    pub fn new() -> Self {
        SuspendWatch {
            mono_origin: Instant::now(),
            boot_origin: boottime(),
            gap_ns: AtomicU64::new(0),
            resumed_ns: AtomicU64::new(0),
        }
    }

    /// The `CLOCK_MONOTONIC` instant at which a suspend was last noticed
    /// (checking now), if ever.
    pub fn last_resume(&self) -> Option<Instant> {
        let mono = self.mono_origin.elapsed();
        let boot = boottime().saturating_sub(self.boot_origin);
        self.observe(mono, boot);
        match self.resumed_ns.load(Ordering::Acquire) {
            0 => None,
            ns => Some(self.mono_origin + Duration::from_nanos(ns)),
        }
    }

    /// Takes a reading of both clocks (each since this watch's origin).
    fn observe(&self, mono: Duration, boot: Duration) {
        let gap = nanos(boot.saturating_sub(mono));
        let before = self.gap_ns.fetch_max(gap, Ordering::AcqRel);
        if gap > before.saturating_add(nanos(SUSPEND_TOLERANCE)) {
            self.resumed_ns
                .fetch_max(nanos(mono).max(1), Ordering::AcqRel);
        }
    }
}

impl Default for SuspendWatch {
    fn default() -> Self {
        Self::new()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_clock_moves_forward() {
        let clock = Clock::new();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(5));
        let b = clock.now();
        assert!(b > a);
        assert!(b.saturating_duration_since(a) >= Duration::from_millis(5));
    }

    #[test]
    fn a_growing_gap_between_the_clocks_is_a_resume() {
        let watch = SuspendWatch::new();
        let ms = Duration::from_millis;
        watch.observe(ms(100), ms(100));
        assert_eq!(watch.resumed_ns.load(Ordering::Relaxed), 0);
        // Preemption between the two reads: within tolerance.
        watch.observe(ms(200), ms(205));
        assert_eq!(watch.resumed_ns.load(Ordering::Relaxed), 0);
        // Suspended for 30 s: boot time ran on, monotonic time did not.
        watch.observe(ms(300), ms(30_305));
        assert_eq!(watch.resumed_ns.load(Ordering::Relaxed), nanos(ms(300)));
        // The gap stays: no new resume.
        watch.observe(ms(400), ms(30_405));
        assert_eq!(watch.resumed_ns.load(Ordering::Relaxed), nanos(ms(300)));
    }
}
