//! Time the machine spent suspended (a laptop's lid closed, a VM suspended
//! from inside). The monotonic clock, and so every timer of the runtime, does
//! not count it; the cluster's leases run on meanwhile. A guard adds it to
//! its own count of the lease, so that a suspend longer than what was left
//! of the lease loses the lock the moment the machine resumes.

use std::time::{Duration, Instant};

/// How long this machine has been suspended since the clock began.
pub trait SuspendClock: Send + Sync + 'static {
    /// The time suspended so far; it never shrinks.
    fn suspended(&self) -> Duration;
}

/// `CLOCK_BOOTTIME` (counts suspend) against the monotonic clock
/// (`CLOCK_MONOTONIC`, does not; read directly, not through the runtime,
/// whose clock a test may pause). Where there is no `CLOCK_BOOTTIME`, no
/// suspend is seen. A virtual machine paused by its host is not suspended
/// inside it: neither clock sees the pause (fencing tokens are the defence
/// there).
pub struct BootClock {
    boot: Duration,
    monotonic: Instant,
}

impl BootClock {
    /// A clock that starts counting now.
    pub fn new() -> Self {
        BootClock {
            boot: boottime(),
            monotonic: Instant::now(),
        }
    }
}

impl Default for BootClock {
    fn default() -> Self {
        Self::new()
    }
}

impl SuspendClock for BootClock {
    fn suspended(&self) -> Duration {
        boottime()
            .saturating_sub(self.boot)
            .saturating_sub(self.monotonic.elapsed())
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boottime() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boottime() -> Duration {
    Duration::ZERO
}
