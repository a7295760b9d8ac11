//! The requests waiting for a lock, as a listing shows them: to people
//! (`QueuedView`, in a [`crate::LockView`]) and between members
//! (`PeerQueued`, in a forwarded listing's answer); and the free names
//! requests wait for (`AwaitedView`, `PeerAwaited`).

use locktable::{Awaited, MonoTime, NodeId, Queued};
use serde::{Deserialize, Serialize};

use crate::time::format_rfc3339_ms;
use crate::{millis_ceil, millis_floor};

/// A request waiting for a lock, for people reading a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct QueuedView {
    /// Who asks; may be empty.
    #[serde(default)]
    pub holder: String,
    /// The node whose client asks.
    pub node: NodeId,
    /// When it began to wait, wall clock, RFC 3339 UTC.
    pub since: String,
    /// How long it has waited, in milliseconds.
    pub waited_ms: u64,
    /// How long it waits still, unless granted before, in milliseconds.
    pub wait_left_ms: u64,
    /// The lease it will be granted, in milliseconds.
    pub lease_ms: u64,
    /// What it asks for: `exclusive` (absent), `shared`, or `permit`.
    #[serde(default, skip_serializing_if = "is_exclusive")]
    pub mode: crate::Mode,
    /// The count of permits it asks one of, for a `permit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The other names it asks for together with this one (a set), in the
    /// order asked; absent for one name. With `--acl`, only the names the
    /// token may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with: Vec<String>,
}

fn is_exclusive(mode: &crate::Mode) -> bool {
    *mode == crate::Mode::Exclusive
}

fn is_zero(bits: &u32) -> bool {
    *bits == 0
}

impl QueuedView {
    /// `queued` as seen at `now` on the keeping node's monotonic clock,
    /// whose wall clock reads `wall_now_ms` at that moment.
    pub fn from_queued(queued: &Queued, now: MonoTime, wall_now_ms: u64) -> QueuedView {
        let waited_ms = millis_ceil(now.saturating_duration_since(queued.since));
        let (mode, permits) = crate::Mode::of(queued.kind);
        QueuedView {
            holder: queued.holder.clone(),
            node: queued.node,
            since: format_rfc3339_ms(wall_now_ms.saturating_sub(waited_ms)),
            waited_ms,
            wait_left_ms: millis_floor(queued.until.saturating_duration_since(now)),
            lease_ms: millis_floor(queued.lease),
            mode,
            permits,
            with: queued.with.clone(),
        }
    }
}

/// A name nobody holds that requests wait for (a set waiting for all its
/// names keeps the free ones for itself), as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct AwaitedView {
    /// The name.
    pub name: String,
    /// How many requests wait for it.
    pub waiters: u64,
    /// The requests waiting for it, in the order they will be served (the
    /// first 100).
    pub queue: Vec<QueuedView>,
}

/// A name nobody holds that requests wait for, as the speaker tells a
/// member that forwarded a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAwaited {
    /// The name.
    pub name: String,
    /// How many requests wait for it.
    pub waiters: u64,
    /// The first of them, in the order they will be served.
    pub queue: Vec<PeerQueued>,
}

impl PeerAwaited {
    /// `awaited` as it leaves the speaker at `now`.
    pub fn leaving(awaited: &Awaited, now: MonoTime) -> PeerAwaited {
        PeerAwaited {
            name: awaited.name.clone(),
            waiters: awaited.count as u64,
            queue: awaited
                .first
                .iter()
                .map(|q| PeerQueued::leaving(q, now))
                .collect(),
        }
    }

    /// The name as a member that sent the listing at `sent` keeps it.
    pub fn arrive(&self, sent: MonoTime) -> Awaited {
        Awaited {
            name: self.name.clone(),
            count: self.waiters as usize,
            first: self.queue.iter().map(|q| q.arrive(sent)).collect(),
        }
    }
}

/// A waiting request as the speaker tells a member that forwarded a
/// listing: its times as durations, which the member counts from its own
/// clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerQueued {
    /// Who asks.
    pub holder: String,
    /// The node whose client asks.
    pub node: NodeId,
    /// How long it had waited, in milliseconds, rounded up.
    pub waited_ms: u64,
    /// How long its wait had left, in milliseconds, rounded down.
    pub left_ms: u64,
    /// The lease it will be granted, in milliseconds.
    pub lease_ms: u64,
    /// What it asks for ([`locktable::Kind::to_bits`]; absent means
    /// exclusive, and from a speaker of an earlier build).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kind: u32,
    /// The other names of its set ([`Queued::with`]); absent for one name,
    /// and from a speaker of an earlier build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with: Vec<String>,
}

impl PeerQueued {
    /// `queued` as it leaves the speaker at `now`.
    pub fn leaving(queued: &Queued, now: MonoTime) -> PeerQueued {
        PeerQueued {
            holder: queued.holder.clone(),
            node: queued.node,
            waited_ms: millis_ceil(now.saturating_duration_since(queued.since)),
            left_ms: millis_floor(queued.until.saturating_duration_since(now)),
            lease_ms: millis_floor(queued.lease),
            kind: queued.kind.to_bits(),
            with: queued.with.clone(),
        }
    }

    /// The request as a member that sent the listing at `sent` keeps it:
    /// its wait ends no later than it did at the speaker.
    pub fn arrive(&self, sent: MonoTime) -> Queued {
        use std::time::Duration;
        Queued {
            kind: locktable::Kind::from_bits(self.kind),
            holder: self.holder.clone(),
            node: self.node,
            since: sent - Duration::from_millis(self.waited_ms),
            until: sent + Duration::from_millis(self.left_ms),
            lease: Duration::from_millis(self.lease_ms),
            with: self.with.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    fn queued() -> Queued {
        Queued {
            with: Vec::new(),
            kind: Default::default(),
            holder: "worker-2".into(),
            node: 3,
            since: at(1_000),
            until: at(31_000),
            lease: Duration::from_secs(20),
        }
    }

    #[test]
    fn a_waiting_request_is_shown_with_its_wall_clock_start_and_times_left() {
        // 2024-01-01T00:00:10Z at `at(4_000)`: it began 3 s before.
        let view = QueuedView::from_queued(&queued(), at(4_000), 1_704_067_210_000);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "holder": "worker-2", "node": 3, "since": "2024-01-01T00:00:07.000Z",
                "waited_ms": 3000, "wait_left_ms": 27000, "lease_ms": 20000
            })
        );
    }

    #[test]
    fn a_waiting_request_crosses_to_a_member_as_times_counted_from_its_send() {
        let peer = PeerQueued::leaving(&queued(), at(4_000));
        assert_eq!(
            (peer.waited_ms, peer.left_ms, peer.lease_ms),
            (3_000, 27_000, 20_000)
        );
        let back = peer.arrive(at(100_000));
        assert_eq!(back.since, at(97_000));
        assert_eq!(back.until, at(127_000));
        assert_eq!(back.holder, "worker-2");
        assert_eq!(back.node, 3);
    }
}
