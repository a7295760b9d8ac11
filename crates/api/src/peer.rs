//! A lock as it travels between nodes: [`locktable::LockInTransit`] in JSON.

use std::time::Duration;

use locktable::{BadLockId, Fence, LockInTransit, NodeId};
use serde::{Deserialize, Serialize};

use crate::{millis_ceil, millis_floor};

/// The serde form of [`LockInTransit`] for peer traffic: times as integer
/// milliseconds of duration, never an instant of the sender's clock.
///
/// Converting from a [`LockInTransit`] rounds conservatively: `ttl_ms` and
/// `lease_ms` **down**, `held_ms` **up**, so a receiver never thinks a lease
/// longer, or a lock younger, than the sender did. (A lock held longest wins
/// a conflict at a rebuild, so rounding the age up can only make a tie, never
/// turn a younger lock into the older.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLock {
    /// The name locked.
    pub name: String,
    /// The grant's id, a 26-character ULID.
    pub id: String,
    /// The node whose client holds the lock.
    pub node: NodeId,
    /// Who holds it; may be empty.
    #[serde(default)]
    pub holder: String,
    /// The grant's fencing token.
    pub fence: u64,
    /// The lease last granted or renewed, in milliseconds (rounded down).
    pub lease_ms: u64,
    /// Time left on the lease when sent, in milliseconds (rounded down).
    pub ttl_ms: u64,
    /// How long the lock had been held when sent, in milliseconds (rounded
    /// up).
    pub held_ms: u64,
    /// Data kept with the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// How many times the data was changed since the grant (protocol 2;
    /// absent means 0): of two records of one grant, the higher revision's
    /// data is the newer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub data_rev: u32,
    /// What the grant holds of its name (protocol 3; absent means
    /// exclusive), as [`locktable::Kind::to_bits`] numbers it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kind: u32,
    /// The grant's lock-delay in milliseconds (protocol 5; absent means
    /// none). `ttl_ms` counts the record's time left, the delay included.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub delay_ms: u64,
    /// The id of the session the lock hangs off (protocol 6; absent means
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

fn is_zero(rev: &u32) -> bool {
    *rev == 0
}

fn is_zero_ms(ms: &u64) -> bool {
    *ms == 0
}

impl From<LockInTransit> for PeerLock {
    fn from(lock: LockInTransit) -> Self {
        PeerLock {
            name: lock.name,
            id: lock.id.to_string(),
            node: lock.node,
            holder: lock.holder,
            fence: lock.fence.0,
            lease_ms: millis_floor(lock.lease),
            ttl_ms: millis_floor(lock.ttl),
            held_ms: millis_ceil(lock.held_for),
            data: lock.data,
            data_rev: lock.data_rev,
            kind: lock.kind.to_bits(),
            delay_ms: millis_floor(lock.delay),
            session: lock.session.map(|s| s.to_string()),
        }
    }
}

impl PeerLock {
    /// `lock` as a record another member keeps for the rebuilds (a copy):
    /// as [`From`] does, but with `ttl_ms` rounded **up**, since the record
    /// must end no earlier than any holder's count of the lease, which ends
    /// before the sender's.
    pub fn record_of(lock: LockInTransit) -> Self {
        let ttl_ms = millis_ceil(lock.ttl);
        PeerLock {
            ttl_ms,
            ..PeerLock::from(lock)
        }
    }
}

impl TryFrom<PeerLock> for LockInTransit {
    type Error = BadLockId;

    /// Fails only when `id` is not a lock id.
    fn try_from(lock: PeerLock) -> Result<Self, BadLockId> {
        Ok(LockInTransit {
            session: lock.session.as_deref().map(str::parse).transpose()?,
            delay: Duration::from_millis(lock.delay_ms),
            kind: locktable::Kind::from_bits(lock.kind),
            id: lock.id.parse()?,
            name: lock.name,
            node: lock.node,
            holder: lock.holder,
            fence: Fence(lock.fence),
            lease: Duration::from_millis(lock.lease_ms),
            ttl: Duration::from_millis(lock.ttl_ms),
            held_for: Duration::from_millis(lock.held_ms),
            data: lock.data,
            data_rev: lock.data_rev,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locktable::LockId;

    fn transit(ttl: Duration, held: Duration) -> LockInTransit {
        LockInTransit {
            session: Default::default(),
            delay: Default::default(),
            kind: Default::default(),
            name: "a/b".into(),
            id: LockId::from_parts(1_700_000_000_000, 0xABCDEF),
            node: 3,
            holder: "h".into(),
            fence: Fence::new(7, 9),
            lease: Duration::from_secs(30),
            ttl,
            held_for: held,
            data: Some("x".into()),
            data_rev: 0,
        }
    }

    #[test]
    fn a_lock_delay_crosses_with_the_record() {
        let mut t = transit(Duration::from_millis(12_345), Duration::from_millis(678));
        t.delay = Duration::from_millis(4_000);
        let peer = PeerLock::record_of(t.clone());
        assert_eq!(peer.delay_ms, 4_000);
        let back = LockInTransit::try_from(peer).unwrap();
        assert_eq!(back.delay, t.delay);
        let plain = transit(Duration::from_millis(1), Duration::ZERO);
        let json = serde_json::to_value(PeerLock::from(plain)).unwrap();
        assert!(json.get("delay_ms").is_none(), "absent when none: {json}");
    }

    #[test]
    fn a_session_crosses_with_the_record() {
        let mut t = transit(Duration::from_millis(5), Duration::ZERO);
        t.session = Some(LockId::from_u128(77));
        let peer = PeerLock::record_of(t.clone());
        assert_eq!(peer.session.as_deref(), Some("0000000000000000000000002D"));
        assert_eq!(
            LockInTransit::try_from(peer.clone()).unwrap().session,
            t.session
        );
        let bad = PeerLock {
            session: Some("nope".into()),
            ..peer
        };
        assert_eq!(LockInTransit::try_from(bad), Err(BadLockId));
    }

    #[test]
    fn whole_milliseconds_round_trip_exactly() {
        let t = transit(Duration::from_millis(12_345), Duration::from_millis(678));
        let peer = PeerLock::from(t.clone());
        let json = serde_json::to_string(&peer).unwrap();
        let back: PeerLock = serde_json::from_str(&json).unwrap();
        assert_eq!(back, peer);
        assert_eq!(LockInTransit::try_from(back), Ok(t));
    }

    #[test]
    fn rounding_is_conservative() {
        let t = transit(
            Duration::from_micros(12_345_999),
            Duration::from_micros(678_001),
        );
        let peer = PeerLock::from(t.clone());
        assert_eq!(peer.ttl_ms, 12_345);
        assert_eq!(peer.held_ms, 679);
        let back = LockInTransit::try_from(peer).unwrap();
        assert!(back.ttl <= t.ttl);
        assert!(back.held_for >= t.held_for);
    }

    #[test]
    fn a_record_kept_for_rebuilds_rounds_its_time_left_up() {
        let t = transit(Duration::from_micros(12_345_001), Duration::ZERO);
        let record = PeerLock::record_of(t.clone());
        assert_eq!(record.ttl_ms, 12_346);
        assert!(LockInTransit::try_from(record).unwrap().ttl >= t.ttl);
        let whole = transit(Duration::from_millis(7), Duration::ZERO);
        assert_eq!(PeerLock::record_of(whole).ttl_ms, 7);
    }

    #[test]
    fn bad_id_is_refused() {
        let mut peer = PeerLock::from(transit(Duration::ZERO, Duration::ZERO));
        peer.id = "not-an-id".into();
        assert_eq!(LockInTransit::try_from(peer), Err(BadLockId));
    }

    #[test]
    fn shape() {
        let peer = PeerLock::from(transit(Duration::from_millis(1), Duration::from_millis(2)));
        let json = serde_json::to_value(&peer).unwrap();
        let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["data", "fence", "held_ms", "holder", "id", "lease_ms", "name", "node", "ttl_ms"]
        );
    }
}
