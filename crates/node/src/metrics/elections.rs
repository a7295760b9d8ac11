//! Per-election series for the electors an embedding application hands
//! its node ([`crate::Node::export_election`]), read off each elector's
//! counts when scraped.

use std::sync::{Arc, Mutex};

use leasehold_client::{ElectionStats, Elector};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// A series: its name, its help, and its value read off an elector's counts.
type Series<T> = (&'static str, &'static str, fn(&ElectionStats) -> T);

/// The electors whose counts are exported, by election name.
#[derive(Clone, Default)]
pub(crate) struct Elections(Arc<Mutex<Vec<Elector>>>);

impl std::fmt::Debug for Elections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Elections")
    }
}

impl Elections {
    /// Exports `elector`'s counts from now on (once per election name: a
    /// later one replaces an earlier one of the same name).
    pub(crate) fn add(&self, elector: &Elector) {
        let mut electors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        electors.retain(|e| e.name() != elector.name());
        electors.push(elector.clone());
    }
}

impl Collector for Elections {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let electors = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if electors.is_empty() {
            return Ok(());
        }
        let stats: Vec<_> = electors.iter().map(|e| (e.name(), e.stats())).collect();
        let gauges: [Series<i64>; 3] = [
            (
                "leasehold_election_leading",
                "1 while this process's candidate leads the election",
                |s| i64::from(s.leading),
            ),
            (
                "leasehold_election_has_leader",
                "1 while someone leads the election, as this process observes it",
                |s| i64::from(s.leader_fence.is_some()),
            ),
            (
                "leasehold_election_leader_fence",
                "The fence of the election's current term as observed (0: no leader)",
                |s| {
                    s.leader_fence
                        .map_or(0, |f| i64::try_from(f).unwrap_or(i64::MAX))
                },
            ),
        ];
        for (name, help, value) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (election, s) in &stats {
                let labels = [("election", *election)];
                ConstGauge::new(value(s)).encode(family.encode_family(&labels)?)?;
            }
        }
        let counters: [Series<f64>; 3] = [
            (
                "leasehold_election_leader_changes",
                "Changes of the election's leader this process observed",
                |s| s.changes as f64,
            ),
            (
                "leasehold_election_terms_led",
                "Terms this process's candidate led",
                |s| s.terms_led as f64,
            ),
            (
                "leasehold_election_leaderless_seconds",
                "Time, in all, the election had no leader as this process observed it",
                |s| s.without_leader.as_secs_f64(),
            ),
        ];
        for (name, help, value) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (election, s) in &stats {
                let labels = [("election", *election)];
                ConstCounter::new(value(s)).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
