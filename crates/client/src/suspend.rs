//! Time the machine spent suspended (a laptop's lid closed, a VM paused by
//! its host). The monotonic clock, and so every timer of the runtime, does
//! not count it; the cluster's leases run on meanwhile. A guard adds it to
//! its own count of the lease, so that a suspend longer than what was left
//! of the lease loses the lock the moment the machine resumes.

use std::time::Duration;

use tokio::time::Instant;

/// How long this machine has been suspended since the clock began.
pub trait SuspendClock: Send + Sync + 'static {
    /// The time suspended so far; it never shrinks.
    fn suspended(&self) -> Duration;
}

/// `CLOCK_BOOTTIME` (counts suspend) against the runtime's clock
/// (`CLOCK_MONOTONIC`, does not). Where there is no `CLOCK_BOOTTIME`, no
/// suspend is seen.
pub struct BootClock {
    boot: Duration,
    runtime: Instant,
}

impl BootClock {
    /// A clock that starts counting now.
    pub fn new() -> Self {
        BootClock {
            boot: boottime(),
            runtime: Instant::now(),
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
            .saturating_sub(self.runtime.elapsed())
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
