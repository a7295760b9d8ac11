//! The node's Prometheus metrics (`GET /metrics`, the text format), by
//! prometheus-client: counters and histograms updated where the events
//! happen (atomics, nothing on the grant path takes a lock of its own), and
//! gauges read off the node when scraped. docs/operations.md lists them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod elections;
mod prefixes;
mod process;
mod text;
pub(crate) use elections::Elections;
pub(crate) use prefixes::{Ended, Prefixes};

/// A member, for its reachability.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    /// The member's id.
    member: String,
}

/// Why the speaker could not serve a call, for the `unavailable` series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhyLabels {
    /// The refusal's kind (`unconfirmed`, `not_rebuilt`, ...).
    why: &'static str,
}

/// The build, for its info series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// leasehold's version.
    version: String,
    /// The highest protocol version the build speaks.
    protocol: String,
}

/// A request's route and status class, for the request histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    /// The route's pattern (`/v1/locks/{name}`), or `unmatched`.
    pub(crate) route: String,
    /// `2xx`, `4xx`, `5xx`, ...
    pub(crate) status: &'static str,
}

type Durations = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// The public routes the request histogram names by their pattern; any
/// other path is `other`.
const ROUTES: &[&str] = &[
    "/v1/locks/acquire",
    "/v1/locks/release",
    "/v1/locks/renew",
    "/v1/locks/{name}",
    "/v1/locks",
    "/v1/cluster",
    "/v1/cluster/history",
    "/v1/cluster/members",
    "/v1/cluster/members/{id}",
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/openapi.json",
];

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Each (route, status class) histogram of the request family, found once
/// and kept: a request's timing takes no lookup, no allocation and no lock
/// of the family's, only the histogram's own.
struct RequestTimes {
    family: Durations,
    slots: Vec<[std::sync::OnceLock<Histogram>; 5]>,
}

impl RequestTimes {
    fn new(family: Durations) -> Self {
        RequestTimes {
            family,
            slots: (0..=ROUTES.len()).map(|_| Default::default()).collect(),
        }
    }

    /// Times a request to the route `pattern` answered `status`.
    fn observe(&self, pattern: Option<&str>, status: u16, seconds: f64) {
        let route = pattern
            .and_then(|p| ROUTES.iter().position(|r| *r == p))
            .unwrap_or(ROUTES.len());
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        let histogram = self.slots[route][class].get_or_init(|| {
            self.family.get_or_create_owned(&RouteLabels {
                route: ROUTES.get(route).copied().unwrap_or("other").to_string(),
                status: CLASSES[class],
            })
        });
        histogram.observe(seconds);
    }
}

/// Every series the node exports.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) grants: Counter,
    pub(crate) releases: Counter,
    pub(crate) expiries: Counter,
    pub(crate) conflicts: Counter,
    unavailable: Family<WhyLabels, Counter>,
    pub(crate) rebuilds: Counter,
    pub(crate) forwarded: Counter,
    pub(crate) rebuild_duration: Histogram,
    pub(crate) members_missing_at_rebuild: Gauge,
    pub(crate) locks_held: Gauge,
    pub(crate) waiters: Gauge,
    pub(crate) is_speaker: Gauge,
    pub(crate) has_speaker: Gauge,
    pub(crate) renewals: Counter,
    pub(crate) speaker_changes: Counter,
    member_reachable: Family<MemberLabels, Gauge>,
    pub(crate) raft_term: Gauge,
    /// Connections of the binary transport open.
    pub(crate) binary_connections: Gauge,
    /// Calls of the binary transport served, or answered and not yet
    /// written.
    pub(crate) binary_calls_in_flight: Gauge,
    /// Members' calls served over the binary transport.
    pub(crate) binary_peer_calls: Counter,
    /// The electors of this process whose counts the node exports.
    pub(crate) elections: Elections,
    requests: RequestTimes,
    waiting: RequestTimes,
    /// The series by name prefix.
    pub(crate) prefixes: Prefixes,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn request_histogram() -> Histogram {
    // 100 µs to about 6.5 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

fn waiting_histogram() -> Histogram {
    // 1 ms to about 2 min: a wait lasts up to 60 s, and a waiting acquire
    // through a failover longer.
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

impl Metrics {
    /// Every series, those by name prefix with prefixes of
    /// `prefix_depth` segments (none at 0).
    pub(crate) fn new(prefix_depth: usize) -> Self {
        let mut registry = Registry::default();
        let prefixes = Prefixes::new(prefix_depth, &mut registry);
        let mut metrics = Metrics {
            registry,
            grants: Counter::default(),
            releases: Counter::default(),
            expiries: Counter::default(),
            conflicts: Counter::default(),
            unavailable: Family::default(),
            rebuilds: Counter::default(),
            forwarded: Counter::default(),
            // 1 ms to about 65 s.
            rebuild_duration: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            members_missing_at_rebuild: Gauge::default(),
            locks_held: Gauge::default(),
            waiters: Gauge::default(),
            is_speaker: Gauge::default(),
            has_speaker: Gauge::default(),
            renewals: Counter::default(),
            speaker_changes: Counter::default(),
            member_reachable: Family::default(),
            raft_term: Gauge::default(),
            binary_connections: Gauge::default(),
            binary_calls_in_flight: Gauge::default(),
            binary_peer_calls: Counter::default(),
            elections: Elections::default(),
            requests: RequestTimes::new(Family::new_with_constructor(request_histogram)),
            waiting: RequestTimes::new(Family::new_with_constructor(waiting_histogram)),
            prefixes,
        };
        let r = &mut metrics.registry;
        r.register(
            "leasehold_grants",
            "Locks granted (and answered) by this node as the speaker",
            metrics.grants.clone(),
        );
        r.register(
            "leasehold_releases",
            "Locks released by this node as the speaker",
            metrics.releases.clone(),
        );
        r.register(
            "leasehold_expiries",
            "Leases this node as the speaker ended because they ran out",
            metrics.expiries.clone(),
        );
        r.register(
            "leasehold_conflicts",
            "Acquires this node as the speaker refused because the lock was held",
            metrics.conflicts.clone(),
        );
        r.register(
            "leasehold_unavailable",
            "Calls this node itself refused 503 not_rebuilt (not relayed ones), by why: not_speaking, \
             not_rebuilt, unconfirmed (no quorum acknowledged the speaker within its leader \
             lease), moved_on, held_back, too_few_copies, stopping, ...",
            metrics.unavailable.clone(),
        );
        r.register(
            "leasehold_rebuilds",
            "Lock table rebuilds this node finished as a new speaker",
            metrics.rebuilds.clone(),
        );
        r.register(
            "leasehold_forwarded",
            "Calls this node forwarded to the speaker",
            metrics.forwarded.clone(),
        );
        r.register(
            "leasehold_rebuild_duration_seconds",
            "How long each rebuild took",
            metrics.rebuild_duration.clone(),
        );
        r.register(
            "leasehold_members_missing_at_rebuild",
            "Members the last rebuild counted missing",
            metrics.members_missing_at_rebuild.clone(),
        );
        r.register(
            "leasehold_locks_held",
            "Locks in this node's table (0 unless it speaks)",
            metrics.locks_held.clone(),
        );
        r.register(
            "leasehold_waiters",
            "Acquires waiting in this node's table (0 unless it speaks)",
            metrics.waiters.clone(),
        );
        r.register(
            "leasehold_is_speaker",
            "1 while this node speaks with a rebuilt table, else 0",
            metrics.is_speaker.clone(),
        );
        r.register(
            "leasehold_binary_connections",
            "Connections of the binary transport open",
            metrics.binary_connections.clone(),
        );
        r.register(
            "leasehold_binary_calls_in_flight",
            "Calls of the binary transport served or answered and not yet written",
            metrics.binary_calls_in_flight.clone(),
        );
        r.register(
            "leasehold_binary_peer_calls",
            "Members' calls this node served over the binary transport",
            metrics.binary_peer_calls.clone(),
        );
        r.register(
            "leasehold_raft_term",
            "This node's current Raft term",
            metrics.raft_term.clone(),
        );
        r.register(
            "leasehold_has_speaker",
            "1 while this node knows a speaker (Raft leader), else 0",
            metrics.has_speaker.clone(),
        );
        r.register(
            "leasehold_renewals",
            "Renewals this node as the speaker made (and answered)",
            metrics.renewals.clone(),
        );
        r.register(
            "leasehold_speaker_changes",
            "Changes of speaker this node saw",
            metrics.speaker_changes.clone(),
        );
        r.register(
            "leasehold_member_reachable",
            "While this node speaks: 1 for each member that answers it, 0 for one that has not lately",
            metrics.member_reachable.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
                protocol: leasehold_raft::version::SPEAKS.to_string(),
            })
            .set(1);
        r.register(
            "leasehold_build_info",
            "1, labelled with this build's version and protocol",
            build,
        );
        r.register_collector(Box::new(process::Process));
        r.register_collector(Box::new(metrics.elections.clone()));
        r.register(
            "leasehold_http_request_duration_seconds",
            "Public API requests that did not ask to wait, by route and status class, and how long each took",
            metrics.requests.family.clone(),
        );
        r.register(
            "leasehold_http_waiting_request_duration_seconds",
            "Public API requests that asked to wait (an acquire with wait_ms, a watch), by route and status class, and how long each took",
            metrics.waiting.family.clone(),
        );
        metrics
    }

    /// Times a public request: the route pattern it matched, its status,
    /// and whether it asked to wait.
    pub(crate) fn observe_request(
        &self,
        pattern: Option<&str>,
        status: u16,
        seconds: f64,
        waited: bool,
    ) {
        match waited {
            true => self.waiting.observe(pattern, status, seconds),
            false => self.requests.observe(pattern, status, seconds),
        }
    }

    /// Counts a call refused `503 not_rebuilt` for the refusal kind `why`.
    pub(crate) fn unavailable(&self, why: &'static str) {
        self.unavailable.get_or_create(&WhyLabels { why }).inc();
    }

    /// While this node speaks, whether each member answers it; nothing
    /// otherwise (a follower's view is not the one that counts).
    pub(crate) fn set_reachable(&self, members: impl Iterator<Item = (u64, bool)>) {
        self.member_reachable.clear();
        for (member, reachable) in members {
            self.member_reachable
                .get_or_create(&MemberLabels {
                    member: member.to_string(),
                })
                .set(i64::from(reachable));
        }
    }

    /// Every series, in OpenMetrics text (`application/openmetrics-text`).
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    /// Every series, in the Prometheus text format (`text/plain;
    /// version=0.0.4`).
    pub(crate) fn encode_prometheus(&self) -> String {
        text::prometheus_text(&self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_the_operations_doc_names_is_exported() {
        let metrics = Metrics::new(1);
        metrics.grants.inc();
        metrics.unavailable("unconfirmed");
        metrics.observe_request(Some("/v1/locks/acquire"), 200, 0.002, false);
        metrics.observe_request(Some("/v1/locks/acquire"), 200, 0.004, false);
        metrics.observe_request(Some("/no/such"), 503, 0.001, false);
        metrics.observe_request(Some("/v1/locks/{name}"), 200, 12.0, true);
        let text = metrics.encode();
        for series in [
            "leasehold_grants_total 1",
            "leasehold_releases_total 0",
            "leasehold_expiries_total",
            "leasehold_conflicts_total",
            "leasehold_locks_held",
            "leasehold_waiters",
            "leasehold_is_speaker",
            "leasehold_raft_term",
            "leasehold_rebuilds_total",
            "leasehold_rebuild_duration_seconds_bucket",
            "leasehold_members_missing_at_rebuild",
            "leasehold_forwarded_total",
            "leasehold_unavailable_total{why=\"unconfirmed\"} 1",
            "leasehold_http_request_duration_seconds_count{route=\"/v1/locks/acquire\",status=\"2xx\"} 2",
            "leasehold_http_request_duration_seconds_count{route=\"other\",status=\"5xx\"} 1",
            "leasehold_http_waiting_request_duration_seconds_count{route=\"/v1/locks/{name}\",status=\"2xx\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
    }
}
