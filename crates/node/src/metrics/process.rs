//! The process's own series, as every Prometheus client exports them
//! (`process_*`), read from `/proc/self` when scraped: memory, CPU time,
//! open file descriptors, start time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Reads `/proc/self` at each scrape; exports nothing it cannot read.
#[derive(Debug, Default)]
pub(crate) struct Process;

/// The kernel's clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on
/// every Linux this runs on).
const TICKS: f64 = 100.0;

/// The page size `statm` counts in.
const PAGE: f64 = 4096.0;

fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name, in parentheses, may hold spaces: fields after it.
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_string).collect())
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|b| b.trim().parse().ok())
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let fields = stat_fields();
        // After the name: state is 0, utime 11, stime 12, starttime 19.
        let field = |i: usize| -> Option<f64> { fields.as_ref()?.get(i)?.parse().ok() };
        if let (Some(user), Some(system)) = (field(11), field(12)) {
            let e = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new((user + system) / TICKS).encode(e)?;
        }
        if let (Some(start), Some(boot)) = (field(19), boot_time()) {
            let e = encoder.encode_descriptor(
                "process_start_time_seconds",
                "When the process started, in seconds since the Unix epoch",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(boot + start / TICKS).encode(e)?;
        }
        let resident = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok());
        if let Some(pages) = resident {
            let e = encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory, in bytes",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(pages * PAGE).encode(e)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let e = encoder.encode_descriptor(
                "process_open_fds",
                "Open file descriptors",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(fds.count() as i64).encode(e)?;
        }
        Ok(())
    }
}
