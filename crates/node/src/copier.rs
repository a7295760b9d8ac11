//! Copies on their way to the other members: one lane per member.

use std::collections::BTreeMap;
use std::sync::Arc;

use locktable::{Lock, MonoTime, NodeId};

use crate::lane::Lane;

/// Most copies in one batch.
const MAX_BATCH: usize = 256;
/// Most batches on their way to one member at once: one measured faster
/// than two (docs/benchmarks.md, "A sixth look").
const IN_FLIGHT: usize = 1;

/// A copy waiting for its batch: the lock, the term whose speaker granted
/// or renewed it, and when it was noted as sent plus a copy's timeout: it
/// is not sent later (`Member::copy_sent` counts on that).
pub(crate) struct PendingCopy {
    pub(crate) lock: Lock,
    pub(crate) term: u64,
    pub(crate) deadline: MonoTime,
}

/// One member's lane: its address, and its copies, each answered whether
/// the member acknowledged it.
pub(crate) struct CopyLane {
    pub(crate) addr: String,
    pub(crate) lane: Arc<Lane<PendingCopy, bool>>,
}

/// One lane of copies per other member.
pub(crate) struct Copier {
    pub(crate) lanes: BTreeMap<NodeId, CopyLane>,
}

impl Copier {
    /// Lanes to every member of `peers` but `me`.
    pub(crate) fn new(peers: &BTreeMap<NodeId, String>, me: NodeId) -> Self {
        Copier {
            lanes: peers
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, addr)| {
                    let lane = CopyLane {
                        addr: addr.clone(),
                        lane: Lane::new(MAX_BATCH, IN_FLIGHT),
                    };
                    (*id, lane)
                })
                .collect(),
        }
    }
}
