//! Who leads which term, as each host sees its own node every simulated
//! millisecond: what lets a fault strike a speaker the moment it is
//! elected, before its first rebuild has finished.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use leasehold_node::Node;

/// Each node's latest sample: the term it leads, if it does, and whether
/// its table was rebuilt.
#[derive(Debug, Default, Clone)]
pub struct Leaders(Arc<Mutex<BTreeMap<u64, Sample>>>);

#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    term: Option<u64>,
    rebuilt: bool,
}

impl Leaders {
    /// Samples `node` every [`crate::guards::EVERY`] until the host goes
    /// down.
    pub async fn watch(self, id: u64, node: Arc<Node>) {
        loop {
            tokio::time::sleep(crate::guards::EVERY).await;
            self.sample(id, node.leading_term(), node.is_rebuilt());
        }
    }

    fn sample(&self, id: u64, term: Option<u64>, rebuilt: bool) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Sample { term, rebuilt });
    }

    /// Whether node `id`'s table was rebuilt at its latest sample.
    pub fn rebuilt(&self, id: u64) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .is_some_and(|s| s.rebuilt)
    }

    /// Every node that led a term at its latest sample, with the term (a
    /// crashed host's latest sample stays).
    pub fn leading(&self) -> Vec<(u64, u64)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(id, sample)| sample.term.map(|t| (*id, t)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_sample_of_each_node_counts() {
        let leaders = Leaders::default();
        leaders.sample(1, Some(3), false);
        leaders.sample(2, None, false);
        assert_eq!(leaders.leading(), vec![(1, 3)]);
        assert!(!leaders.rebuilt(1));
        leaders.sample(1, None, false);
        leaders.sample(2, Some(4), true);
        assert_eq!(leaders.leading(), vec![(2, 4)]);
        assert!(leaders.rebuilt(2));
    }
}
