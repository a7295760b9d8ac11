//! A readable trace of a run: every node's log lines, stamped with the
//! simulated time and the host that wrote them.

use std::fmt;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::EnvFilter;

/// The environment variable that turns the trace on for
/// [`cluster::build`](crate::cluster::build), with a filter in `RUST_LOG`
/// syntax (`info`, `leasehold_node=debug,openraft=info`).
pub const ENV: &str = "LEASEHOLD_SIM_LOG";

/// Stamps a line with the simulated time since the run began.
struct SimTime;

impl FormatTime for SimTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match turmoil::sim_elapsed() {
            Some(t) => write!(w, "{:>9.3}s", t.as_secs_f64()),
            None => write!(w, "{:>10}", "-"),
        }
    }
}

/// Prints the nodes' log lines, filtered by `filter` (`RUST_LOG` syntax),
/// to standard error for the rest of the process. Later calls do nothing.
pub fn init(filter: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_timer(SimTime)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
}
