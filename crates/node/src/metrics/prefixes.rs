//! The series labelled by name prefix: how long acquires waited and locks
//! were held, how locks ended (released or lapsed), and how many requests
//! wait, under each prefix of `--metrics-prefix-depth` segments.
//!
//! Cardinality is bounded twice: a name's prefix is at most that many
//! `/`-separated segments (`jobs/` for `jobs/42` at depth 1), and at most
//! [`MAX_PREFIXES`] prefixes get series of their own; names under any
//! later one are counted under [`OTHER`].

use std::collections::HashMap;
use std::sync::RwLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The most prefixes with series of their own.
pub(crate) const MAX_PREFIXES: usize = 100;

/// The label of the names under prefixes past [`MAX_PREFIXES`].
pub(crate) const OTHER: &str = "(other)";

/// A prefix, for its series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrefixLabels {
    prefix: String,
}

/// A prefix and how a lock under it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    prefix: String,
    /// `released` or `lapsed`.
    how: &'static str,
}

/// How a lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its holder released it.
    Released,
    /// Its lease ran out.
    Lapsed,
}

/// One prefix's series, found once.
#[derive(Clone)]
struct Series {
    wait: Histogram,
    hold: Histogram,
    released: Counter,
    lapsed: Counter,
}

type Histograms = Family<PrefixLabels, Histogram, fn() -> Histogram>;

/// The series by prefix.
pub(crate) struct Prefixes {
    depth: usize,
    known: RwLock<HashMap<String, Series>>,
    waits: Histograms,
    holds: Histograms,
    ends: Family<EndLabels, Counter>,
    queues: Family<PrefixLabels, Gauge>,
    longest_queue: Gauge,
}

fn wait_histogram() -> Histogram {
    // 1 ms to about 2 min.
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

fn hold_histogram() -> Histogram {
    // 10 ms to about 6 days.
    Histogram::new(exponential_buckets(0.01, 4.0, 17))
}

/// The prefix of `name` at `depth`: its first `depth` segments, each with
/// the `/` that ends it; a name with fewer is under the prefix of the
/// segments it has (`jobs` is under `""`).
pub(crate) fn prefix_of(name: &str, depth: usize) -> &str {
    let end = name
        .match_indices('/')
        .take(depth)
        .last()
        .map_or(0, |(at, _)| at + 1);
    &name[..end]
}

impl Prefixes {
    /// Series of prefixes `depth` segments long (none at 0), registered
    /// in `registry`.
    pub(crate) fn new(depth: usize, registry: &mut Registry) -> Self {
        let prefixes = Prefixes {
            depth,
            known: RwLock::new(HashMap::new()),
            waits: Family::new_with_constructor(wait_histogram),
            holds: Family::new_with_constructor(hold_histogram),
            ends: Family::default(),
            queues: Family::default(),
            longest_queue: Gauge::default(),
        };
        registry.register(
            "leasehold_longest_queue",
            "The most requests waiting for one name in this node's table (0 unless it speaks)",
            prefixes.longest_queue.clone(),
        );
        if depth == 0 {
            return prefixes;
        }
        registry.register(
            "leasehold_lock_wait_seconds",
            "Acquires this node as the speaker granted, by name prefix, and how long each took from its arrival to its answer",
            prefixes.waits.clone(),
        );
        registry.register(
            "leasehold_lock_hold_seconds",
            "Locks that ended at this node as the speaker, by name prefix, and how long each was held",
            prefixes.holds.clone(),
        );
        registry.register(
            "leasehold_lock_ends",
            "Locks that ended at this node as the speaker, by name prefix and how (released, lapsed)",
            prefixes.ends.clone(),
        );
        registry.register(
            "leasehold_queue_length",
            "Requests waiting in this node's table, by name prefix (0 unless it speaks)",
            prefixes.queues.clone(),
        );
        prefixes
    }

    /// The label `name` is counted under.
    fn label<'a>(&self, name: &'a str) -> &'a str {
        prefix_of(name, self.depth)
    }

    /// The series of `name`'s prefix, made on first use while fewer than
    /// [`MAX_PREFIXES`] have series; none for a session's name (sessions
    /// are not locks a client named).
    fn series(&self, name: &str) -> Option<Series> {
        if self.depth == 0 || locktable::is_session_name(name) {
            return None;
        }
        Some(self.series_of(self.label(name)).1)
    }

    /// The label `prefix` is counted under and its series, made on first
    /// use: `prefix` itself while fewer than [`MAX_PREFIXES`] have series,
    /// else [`OTHER`].
    fn series_of(&self, prefix: &str) -> (String, Series) {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        if let Some(series) = known.get(prefix) {
            return (prefix.to_string(), series.clone());
        }
        drop(known);
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        let label = match known.len() < MAX_PREFIXES || known.contains_key(prefix) {
            true => prefix,
            false => OTHER,
        };
        let series = known.entry(label.to_string()).or_insert_with(|| {
            let labels = PrefixLabels {
                prefix: label.to_string(),
            };
            let ended = |how| EndLabels {
                prefix: label.to_string(),
                how,
            };
            Series {
                wait: self.waits.get_or_create_owned(&labels),
                hold: self.holds.get_or_create_owned(&labels),
                released: self.ends.get_or_create_owned(&ended("released")),
                lapsed: self.ends.get_or_create_owned(&ended("lapsed")),
            }
        });
        (label.to_string(), series.clone())
    }

    /// An acquire of `name` granted `seconds` after it arrived.
    pub(crate) fn granted(&self, name: &str, seconds: f64) {
        if let Some(series) = self.series(name) {
            series.wait.observe(seconds);
        }
    }

    /// A lock of `name`, held `seconds`, ended as `how` says.
    pub(crate) fn ended(&self, name: &str, seconds: f64, how: Ended) {
        if let Some(series) = self.series(name) {
            series.hold.observe(seconds);
            match how {
                Ended::Released => series.released.inc(),
                Ended::Lapsed => series.lapsed.inc(),
            };
        }
    }

    /// The queues now: how many requests wait for each name that has any.
    pub(crate) fn set_queues<'a>(&self, queues: impl Iterator<Item = (&'a str, usize)>) {
        let mut by_prefix: HashMap<&str, usize> = HashMap::new();
        let mut longest = 0;
        for (name, waiting) in queues {
            longest = longest.max(waiting);
            if self.depth > 0 {
                *by_prefix.entry(self.label(name)).or_default() += waiting;
            }
        }
        self.longest_queue
            .set(i64::try_from(longest).unwrap_or(i64::MAX));
        self.queues.clear();
        let mut labelled: HashMap<String, usize> = HashMap::new();
        for (prefix, waiting) in by_prefix {
            *labelled.entry(self.series_of(prefix).0).or_default() += waiting;
        }
        for (label, waiting) in labelled {
            self.set_queue(&label, waiting);
        }
    }

    fn set_queue(&self, prefix: &str, waiting: usize) {
        self.queues
            .get_or_create(&PrefixLabels {
                prefix: prefix.to_string(),
            })
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_names_prefix_is_its_first_segments_with_their_slashes() {
        assert_eq!(prefix_of("jobs/42", 1), "jobs/");
        assert_eq!(prefix_of("jobs/eu/42", 1), "jobs/");
        assert_eq!(prefix_of("jobs/eu/42", 2), "jobs/eu/");
        assert_eq!(prefix_of("jobs/42", 2), "jobs/");
        assert_eq!(prefix_of("flat", 1), "");
        assert_eq!(prefix_of("jobs/42", 0), "");
        assert_eq!(prefix_of("/lead", 1), "/");
    }

    #[test]
    fn prefixes_past_the_most_are_counted_under_other() {
        let mut registry = Registry::default();
        let prefixes = Prefixes::new(1, &mut registry);
        for i in 0..MAX_PREFIXES + 10 {
            prefixes.ended(&format!("p{i}/x"), 1.0, Ended::Lapsed);
        }
        prefixes.ended("p3/y", 2.0, Ended::Released);
        prefixes.set_queues([("p1/a", 2), ("p1/b", 3), ("late/a", 4)].into_iter());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let series = |prefix: &str, how: &str| {
            format!("leasehold_lock_ends_total{{prefix=\"{prefix}\",how=\"{how}\"}}")
        };
        assert!(
            text.contains(&format!("{} 1\n", series("p0/", "lapsed"))),
            "{text}"
        );
        assert!(
            text.contains(&format!("{} 1\n", series("p3/", "released"))),
            "{text}"
        );
        assert!(
            text.contains(&format!("{} 10\n", series(OTHER, "lapsed"))),
            "{text}"
        );
        assert!(
            !text.contains(&series(&format!("p{MAX_PREFIXES}/"), "lapsed")),
            "{text}"
        );
        assert!(
            text.contains("leasehold_queue_length{prefix=\"p1/\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_queue_length{prefix=\"(other)\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("leasehold_longest_queue 4\n"), "{text}");
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("leasehold_lock_hold_seconds_count"))
            .count();
        assert_eq!(labelled, MAX_PREFIXES + 1, "{text}");
    }

    #[test]
    fn depth_zero_exports_no_prefix_series() {
        let mut registry = Registry::default();
        let prefixes = Prefixes::new(0, &mut registry);
        prefixes.granted("jobs/1", 0.1);
        prefixes.ended("jobs/1", 1.0, Ended::Released);
        prefixes.set_queues([("jobs/1", 2)].into_iter());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("prefix="), "{text}");
        assert!(text.contains("leasehold_longest_queue 2\n"), "{text}");
    }

    #[test]
    fn sessions_are_not_counted_as_locks_of_a_prefix() {
        let mut registry = Registry::default();
        let prefixes = Prefixes::new(1, &mut registry);
        let session = locktable::session_name(locktable::LockId::from_u128(1));
        prefixes.granted(&session, 0.1);
        prefixes.ended(&session, 1.0, Ended::Lapsed);
        prefixes.granted("jobs/1", 0.1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("prefix=\"jobs/\""), "{text}");
        assert!(!text.contains("session"), "{text}");
    }
}
