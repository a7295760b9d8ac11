//! Copies on their way to the other members: one lane per member.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

/// One lane of copies per other member, opened on the first copy to it.
#[derive(Default)]
pub(crate) struct Copier {
    lanes: Mutex<BTreeMap<NodeId, Arc<CopyLane>>>,
}

impl Copier {
    /// The lane to `member` at `addr`; a new one if the member had none, or
    /// had one to another address.
    pub(crate) fn lane(&self, member: NodeId, addr: &str) -> Arc<CopyLane> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        match lanes.get(&member) {
            Some(lane) if lane.addr == addr => Arc::clone(lane),
            _ => {
                let lane = Arc::new(CopyLane {
                    addr: addr.to_string(),
                    lane: Lane::new(MAX_BATCH, IN_FLIGHT),
                });
                lanes.insert(member, Arc::clone(&lane));
                lane
            }
        }
    }
}
