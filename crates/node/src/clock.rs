//! The node's clocks: leases on a monotonic clock that counts suspend
//! (`CLOCK_BOOTTIME`), the wall clock for display and lock ids, and a
//! watch for suspends that the guard's Raft timestamps cannot see.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use locktable::MonoTime;
use nix::time::{clock_gettime, ClockId};
use tokio::time::Instant;

/// Reads the process's lease clock as the table's [`MonoTime`].
///
/// In production the clock is `CLOCK_BOOTTIME`: monotonic, not stepped by
/// NTP or an operator, and (unlike `CLOCK_MONOTONIC`, which
/// `std::time::Instant` and tokio read) still running while the machine or
/// VM is suspended. A lease counted on it ends on time even across a
/// suspend. Under a simulator the clock is tokio's ([`Clock::tokio`]),
/// which the simulator moves.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    source: Source,
}

/// Where a [`Clock`] reads the time.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// `CLOCK_BOOTTIME`, from `origin` (a reading of it).
    Boot { origin: Duration },
    /// tokio's clock, from `origin`.
    Tokio { origin: Instant },
}

/// Where the process's clock starts on the table's scale: far enough from
/// zero that subtracting a time held never saturates.
const ORIGIN_NANOS: u64 = 1 << 62;

/// A tokio clock's wall time at its origin: 2026-01-01T00:00:00Z, in
/// milliseconds since the Unix epoch.
const TOKIO_WALL_ORIGIN_MS: u64 = 1_767_225_600_000;

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
    /// The production clock (`CLOCK_BOOTTIME`), whose origin is now.
    pub fn new() -> Self {
        Clock {
            source: Source::Boot { origin: boottime() },
        }
    }

    /// A clock on tokio's time, whose origin is now: the clock of a node
    /// run under a simulator that drives tokio's time. It sees no suspend
    /// (a simulated host is never suspended; a paused one is the
    /// simulator's to model), so a node on it runs no suspend watch.
    pub fn tokio() -> Self {
        Clock {
            source: Source::Tokio {
                origin: Instant::now(),
            },
        }
    }

    /// Whether the clock counts time the machine spent suspended, which
    /// tokio's timestamps (and openraft's) do not: then the node needs a
    /// suspend watch.
    pub fn counts_suspends(&self) -> bool {
        matches!(self.source, Source::Boot { .. })
    }

    /// How long since the clock's origin.
    fn since_origin(&self) -> Duration {
        match self.source {
            Source::Boot { origin } => boottime().saturating_sub(origin),
            Source::Tokio { origin } => origin.elapsed(),
        }
    }

    /// The current time on the lease clock.
    pub fn now(&self) -> MonoTime {
        let since = self.since_origin();
        MonoTime::from_nanos(
            ORIGIN_NANOS.saturating_add(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `instant` (a reading of tokio's clock, as openraft's timestamps are;
    /// past or future) on the lease clock, by its distance from now, never
    /// later than it was: the lease clock is read before tokio's, so a stall
    /// between the reads moves the answer earlier. For a time a lease is
    /// counted from (an acknowledgement).
    pub fn at_or_before(&self, instant: Instant) -> MonoTime {
        let now = self.now();
        let mono_now = Instant::now();
        Self::shift(now, mono_now, instant)
    }

    /// As [`Clock::at_or_before`], but never earlier than it was (tokio's
    /// clock is read first). For a time only what follows counts (a
    /// resume).
    pub fn at_or_after(&self, instant: Instant) -> MonoTime {
        let mono_now = Instant::now();
        let now = self.now();
        Self::shift(now, mono_now, instant)
    }

    /// `instant` moved onto the lease clock by its distance from
    /// `mono_now`, read at `now`.
    fn shift(now: MonoTime, mono_now: Instant, instant: Instant) -> MonoTime {
        match instant.checked_duration_since(mono_now) {
            Some(ahead) => now + ahead,
            None => now - mono_now.duration_since(instant),
        }
    }

    /// The same clock, its origin moved to now: a node's uptime counts from
    /// its own start.
    pub fn restarted(&self) -> Self {
        match self.source {
            Source::Boot { .. } => Clock::new(),
            Source::Tokio { .. } => Clock::tokio(),
        }
    }

    /// How long the process has been running (suspends included on the
    /// production clock).
    pub fn uptime(&self) -> Duration {
        self.since_origin()
    }

    /// Milliseconds since the Unix epoch on the wall clock (for display and
    /// lock ids; no lease reads it): the system's on the production clock;
    /// on a tokio clock, 2026-01-01T00:00:00Z at its origin plus tokio's
    /// time since, so a simulated run reads the same wall times every time.
    pub fn wall_ms(&self) -> u64 {
        match self.source {
            Source::Boot { .. } => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            Source::Tokio { origin } => TOKIO_WALL_ORIGIN_MS
                .saturating_add(u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// A gap between `CLOCK_BOOTTIME` and `CLOCK_MONOTONIC` larger than any
/// seen before by more than this is taken for a suspend. A reading delayed
/// by preemption can look like one; a false alarm costs the guard one
/// heartbeat's wait, and a real suspend shorter than this is inside the
/// guard's margin.
const SUSPEND_TOLERANCE: Duration = Duration::from_millis(10);

/// Notices that the machine was suspended, for the speaker's guard.
///
/// openraft stamps heartbeat acknowledgements with `CLOCK_MONOTONIC`, which
/// stands still during a suspend: after a resume, an acknowledgement from
/// before it looks recent although the followers may long have elected
/// another leader. The gap `G = boottime − monotonic` grows by exactly the
/// time suspended. Each check reads boottime, monotonic, boottime again and
/// monotonic again: `boot₁ − mono₁` is a lower bound of `G` (the baseline
/// keeps the largest lower bound ever seen, so it never overshoots), and
/// `boot₂ − mono₁` an upper bound that includes any suspend before the
/// second boottime read. An upper bound above the baseline by more than
/// the tolerance marks a resume, stamped with the last monotonic read,
/// taken after every suspend the check could see: only acknowledgements of
/// heartbeats sent after it count.
#[derive(Debug)]
pub struct SuspendWatch {
    mono_origin: Instant,
    boot_origin: Duration,
    /// The largest lower bound of the gap seen, in ns.
    baseline_ns: AtomicU64,
    /// When (ns after `mono_origin`) a suspend was last noticed; 0: never.
    resumed_ns: AtomicU64,
}

impl SuspendWatch {
    /// A watch whose origin is now.
    pub fn new() -> Self {
        SuspendWatch {
            mono_origin: Instant::now(),
            boot_origin: boottime(),
            baseline_ns: AtomicU64::new(0),
            resumed_ns: AtomicU64::new(0),
        }
    }

    /// The `CLOCK_MONOTONIC` instant at which a suspend was last noticed
    /// (checking now), if ever.
    pub fn last_resume(&self) -> Option<Instant> {
        let boot1 = boottime().saturating_sub(self.boot_origin);
        let mono1 = self.mono_origin.elapsed();
        let boot2 = boottime().saturating_sub(self.boot_origin);
        let mono2 = self.mono_origin.elapsed();
        self.observe(Reading {
            boot1,
            mono1,
            boot2,
            mono2,
        });
        match self.resumed_ns.load(Ordering::Acquire) {
            0 => None,
            ns => Some(self.mono_origin + Duration::from_nanos(ns)),
        }
    }

    fn observe(&self, r: Reading) {
        let lower = nanos(r.boot1.saturating_sub(r.mono1));
        let upper = nanos(r.boot2.saturating_sub(r.mono1));
        let before = self.baseline_ns.fetch_max(lower, Ordering::AcqRel);
        if upper > before.saturating_add(nanos(SUSPEND_TOLERANCE)) {
            self.resumed_ns
                .fetch_max(nanos(r.mono2).max(1), Ordering::AcqRel);
        }
    }
}

/// One check's reads of both clocks, in order, each since the origin.
#[derive(Debug, Clone, Copy)]
struct Reading {
    boot1: Duration,
    mono1: Duration,
    boot2: Duration,
    mono2: Duration,
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
    fn the_production_wall_clock_is_the_systems() {
        let system = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let wall = Clock::new().wall_ms();
        assert!(wall.abs_diff(system.as_millis() as u64) < 60_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clocks_wall_time_moves_with_tokios_time() {
        let clock = Clock::tokio();
        assert_eq!(clock.wall_ms(), TOKIO_WALL_ORIGIN_MS);
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(clock.wall_ms(), TOKIO_WALL_ORIGIN_MS + 1_500);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(clock.wall_ms(), TOKIO_WALL_ORIGIN_MS + 61_500);
        let later = Clock::tokio();
        assert_eq!(later.wall_ms(), TOKIO_WALL_ORIGIN_MS, "its own origin");
    }

    /// A node counts its uptime (which decides whether rebuilds count it as
    /// recently restarted) from its own start, not from when the clock it
    /// was given was made (review finding: a reused clock made a restarted
    /// node look long up).
    #[tokio::test(start_paused = true)]
    async fn a_restarted_clock_counts_uptime_from_its_restart() {
        let clock = Clock::tokio();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(clock.uptime(), Duration::from_secs(30));
        let restarted = clock.restarted();
        assert_eq!(restarted.uptime(), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(restarted.uptime(), Duration::from_secs(2));
        assert!(Clock::new().restarted().counts_suspends());
        assert!(!restarted.counts_suspends());
    }

    /// Converting a reading of tokio's clock onto the lease clock errs the
    /// way each use needs: an acknowledgement no later, a resume no
    /// earlier, than it was.
    #[tokio::test(start_paused = true)]
    async fn conversions_onto_the_lease_clock_err_the_safe_way() {
        let clock = Clock::tokio();
        tokio::time::advance(Duration::from_secs(5)).await;
        let then = Instant::now() - Duration::from_secs(1);
        let now = clock.now();
        assert_eq!(clock.at_or_before(then), now - Duration::from_secs(1));
        assert_eq!(clock.at_or_after(then), now - Duration::from_secs(1));
        let boot = Clock::new();
        let then = Instant::now();
        assert!(boot.at_or_before(then) <= boot.at_or_after(then));
    }

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Reads with no delay between them, `suspended` ms of boottime ahead.
    fn tight(at: u64, suspended: u64) -> Reading {
        Reading {
            boot1: ms(at + suspended),
            mono1: ms(at),
            boot2: ms(at + suspended),
            mono2: ms(at),
        }
    }

    fn resumed(watch: &SuspendWatch) -> u64 {
        watch.resumed_ns.load(Ordering::Relaxed)
    }

    #[test]
    fn a_growing_gap_between_the_clocks_is_a_resume() {
        let watch = SuspendWatch::new();
        watch.observe(tight(100, 0));
        assert_eq!(resumed(&watch), 0);
        watch.observe(tight(200, 5));
        assert_eq!(resumed(&watch), 0, "within tolerance");
        // Suspended for 30 s: boot time ran on, monotonic time did not.
        watch.observe(tight(300, 30_000));
        assert_eq!(resumed(&watch), nanos(ms(300)));
        watch.observe(tight(400, 30_000));
        assert_eq!(
            resumed(&watch),
            nanos(ms(300)),
            "the gap stays: no new resume"
        );
    }

    #[test]
    fn a_delayed_reading_does_not_blind_the_watch() {
        let watch = SuspendWatch::new();
        watch.observe(tight(100, 0));
        // Preempted for 200 ms between the reads: boot₂ and mono₂ late.
        watch.observe(Reading {
            boot1: ms(200),
            mono1: ms(200),
            boot2: ms(400),
            mono2: ms(400),
        });
        assert_eq!(
            resumed(&watch),
            nanos(ms(400)),
            "a false alarm, stamped late"
        );
        // The baseline did not move: a real 150 ms suspend is still seen.
        watch.observe(tight(500, 150));
        assert_eq!(resumed(&watch), nanos(ms(500)));
    }

    #[test]
    fn a_suspend_between_the_reads_is_seen_and_stamped_after_it() {
        let watch = SuspendWatch::new();
        watch.observe(tight(100, 0));
        // boot₁ read, then a 5 s suspend, then the rest.
        watch.observe(Reading {
            boot1: ms(200),
            mono1: ms(200),
            boot2: ms(5_200),
            mono2: ms(201),
        });
        assert_eq!(resumed(&watch), nanos(ms(201)));
    }
}
