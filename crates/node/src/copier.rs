//! Copies on their way to the other members: one queue per member.

use std::collections::BTreeMap;

use locktable::{Lock, NodeId};
use tokio::sync::oneshot;

use crate::queue::Queue;

/// A copy waiting for its batch: the lock, the term whose speaker granted
/// or renewed it, and where the acknowledgement goes.
pub(crate) struct PendingCopy {
    pub(crate) lock: Lock,
    pub(crate) term: u64,
    pub(crate) acked: oneshot::Sender<bool>,
}

/// One queue of copies per other member.
pub(crate) struct Copier {
    pub(crate) queues: BTreeMap<NodeId, Queue<PendingCopy>>,
}

impl Copier {
    /// Queues for every member of `peers` but `me`.
    pub(crate) fn new(peers: &BTreeMap<NodeId, String>, me: NodeId) -> Self {
        Copier {
            queues: peers
                .keys()
                .filter(|id| **id != me)
                .map(|id| (*id, Queue::new()))
                .collect(),
        }
    }
}
