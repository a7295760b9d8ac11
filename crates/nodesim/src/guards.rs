//! The guard premise, checked on the running nodes: at no simulated
//! instant do two nodes both hold a guard that lets them grant, for
//! different terms. Each host samples its own node's guard every
//! simulated millisecond (on its own clock, inside its runtime) and
//! compares it with what the other hosts sampled at the same instant.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::Node;

/// What every host sampled last, and the instants two guards were open at
/// once.
#[derive(Debug, Default, Clone)]
pub struct Guards(Arc<Mutex<Samples>>);

#[derive(Debug, Default)]
struct Samples {
    /// Per node: when it sampled last, and the term its guard was open
    /// for then, if any.
    last: BTreeMap<u64, (Duration, Option<u64>)>,
    /// Every term some guard was seen open for.
    terms: BTreeSet<u64>,
    violations: Vec<String>,
}

/// How often a host samples its node's guard: one simulated tick, so every
/// host samples at every instant (`cluster::build` sets the tick to it).
pub const EVERY: Duration = Duration::from_millis(1);

/// At most this many violations are kept: one open guard too many lasts
/// many samples.
const KEEP: usize = 10;

impl Guards {
    /// Samples `node`'s guard until the host goes down.
    pub async fn watch(self, id: u64, node: Arc<Node>) {
        loop {
            tokio::time::sleep(EVERY).await;
            let Some(at) = turmoil::sim_elapsed() else {
                continue;
            };
            self.sample(id, at, node.may_grant_for());
        }
    }

    /// Node `id`'s guard at `at` was open for `term`, if any.
    fn sample(&self, id: u64, at: Duration, term: Option<u64>) {
        let mut samples = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(term) = term {
            samples.terms.insert(term);
            let clash = samples.last.iter().find(|(other, (when, theirs))| {
                **other != id && *when == at && theirs.is_some_and(|t| t != term)
            });
            if let Some((other, (_, theirs))) = clash {
                let why = format!(
                    "at {at:?} node {id} (term {term}) and node {other} (term {}) could both grant",
                    theirs.unwrap_or_default()
                );
                if samples.violations.len() < KEEP {
                    samples.violations.push(why);
                }
            }
        }
        samples.last.insert(id, (at, term));
    }

    /// Every term some guard was seen open for.
    pub fn terms(&self) -> BTreeSet<u64> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .terms
            .clone()
    }

    /// Every instant two guards were open at once (the first few).
    pub fn violations(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .violations
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn two_guards_open_at_one_instant_for_different_terms_are_a_violation() {
        let guards = Guards::default();
        guards.sample(1, ms(10), Some(3));
        guards.sample(2, ms(10), None);
        guards.sample(2, ms(11), Some(4));
        assert!(guards.violations().is_empty(), "one instant apart");
        guards.sample(1, ms(11), Some(3));
        assert_eq!(guards.violations().len(), 1);
        assert!(guards.violations()[0].contains("node 1 (term 3) and node 2 (term 4)"));
        assert_eq!(guards.terms(), BTreeSet::from([3, 4]));
    }
}
