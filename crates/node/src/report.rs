//! What a member tells a rebuilding speaker: its clients' locks and its own
//! grants, in bincode (a million locks must cross in well under the
//! rebuild timeout; JSON took longer than that).

use std::time::Duration;

use locktable::{Fence, LockId, LockInTransit, NodeId};
use serde::{Deserialize, Serialize};

/// A member's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The reporting node.
    pub(crate) node: NodeId,
    /// How long the reporting process has been up.
    pub(crate) uptime_ms: u64,
    /// Whether this process is the node's first (its data directory was
    /// new): such a node has forgotten nothing.
    pub(crate) first_start: bool,
    /// The reporting node's `--max-lease`, in milliseconds: a strict hold
    /// and the restart rule use the longest lease any member may have
    /// granted or counted.
    pub(crate) max_lease_ms: u64,
    /// Its clients' locks (`Held`) and its own grants (`Granted`).
    pub(crate) locks: Vec<ReportLock>,
}

/// One lock of a report: times as durations (nanoseconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReportLock {
    name: String,
    id: u128,
    node: NodeId,
    holder: String,
    fence: u64,
    lease_ns: u64,
    ttl_ns: u64,
    held_ns: u64,
    data: Option<String>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl From<LockInTransit> for ReportLock {
    fn from(l: LockInTransit) -> Self {
        ReportLock {
            name: l.name,
            id: l.id.as_u128(),
            node: l.node,
            holder: l.holder,
            fence: l.fence.0,
            lease_ns: nanos(l.lease),
            ttl_ns: nanos(l.ttl),
            held_ns: nanos(l.held_for),
            data: l.data,
        }
    }
}

impl From<ReportLock> for LockInTransit {
    fn from(l: ReportLock) -> Self {
        LockInTransit {
            name: l.name,
            id: LockId::from_u128(l.id),
            node: l.node,
            holder: l.holder,
            fence: Fence(l.fence),
            lease: Duration::from_nanos(l.lease_ns),
            ttl: Duration::from_nanos(l.ttl_ns),
            held_for: Duration::from_nanos(l.held_ns),
            data: l.data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_the_codec() {
        let lock = LockInTransit {
            name: "jobs/42".into(),
            id: LockId::from_u128(7),
            node: 2,
            holder: "w".into(),
            fence: Fence(9),
            lease: Duration::from_millis(1500),
            ttl: Duration::from_nanos(123_456_789),
            held_for: Duration::from_nanos(987),
            data: None,
        };
        let report = Report {
            node: 2,
            uptime_ms: 5,
            first_start: true,
            max_lease_ms: 600_000,
            locks: vec![lock.clone().into()],
        };
        let bytes = leasehold_raft::codec::encode(&report).unwrap();
        let back: Report = leasehold_raft::codec::decode(&bytes).unwrap();
        assert_eq!((back.node, back.uptime_ms, back.first_start), (2, 5, true));
        assert_eq!(LockInTransit::from(back.locks[0].clone()), lock);
    }
}
