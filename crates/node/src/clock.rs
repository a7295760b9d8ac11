//! The node's clocks: monotonic for leases, wall only for display.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use locktable::MonoTime;

/// Reads the process's monotonic clock as the table's [`MonoTime`].
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

/// Where the process's clock starts on the table's scale: far enough from
/// zero that subtracting a time held never saturates.
const ORIGIN_NANOS: u64 = 1 << 62;

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    /// The current monotonic time.
    pub fn now(&self) -> MonoTime {
        self.at(Instant::now())
    }

    /// `instant` on the table's scale.
    pub fn at(&self, instant: Instant) -> MonoTime {
        let since = instant.saturating_duration_since(self.origin);
        MonoTime::from_nanos(
            ORIGIN_NANOS.saturating_add(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// How long the process has been running.
    pub fn uptime(&self) -> std::time::Duration {
        self.origin.elapsed()
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
