//! A lock as every answer shows it (docs/api.md, "A lock").

use locktable::{BadLockId, Fence, Kind, Lock, LockId, MonoTime, NodeId};
use serde::{Deserialize, Serialize};

use crate::time::format_rfc3339_ms;
use crate::{millis_ceil, millis_floor};

/// A lock as the API shows it:
///
/// ```json
/// {"name": "jobs/42", "id": "01J...", "node": 2, "holder": "worker-7",
///  "fence": 12884901889, "lease_ms": 30000, "ttl_ms": 29987,
///  "acquired_at": "2026-11-29T20:00:00.000Z",
///  "expires_at": "2026-11-29T20:00:30.000Z", "data": "optional"}
/// ```
///
/// `ttl_ms` (time left, as the answering node counts it, rounded down) is
/// authoritative; `acquired_at` and `expires_at` are the answering node's
/// wall clock, for people reading a listing. `data` is left out when there
/// is none; `holder` is always there, possibly empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockView {
    /// The name locked.
    pub name: String,
    /// The grant's id, a 26-character ULID; empty (and absent from the
    /// JSON) when the caller's token may read the name but not lock it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The node whose client holds the lock.
    pub node: NodeId,
    /// Who holds it; may be empty.
    #[serde(default)]
    pub holder: String,
    /// The grant's fencing token.
    pub fence: u64,
    /// The lease last granted or renewed, in milliseconds.
    pub lease_ms: u64,
    /// Time left on the lease, in milliseconds, rounded down.
    pub ttl_ms: u64,
    /// When the lock was granted, wall clock, RFC 3339 UTC.
    pub acquired_at: String,
    /// When the lease ends, wall clock, RFC 3339 UTC.
    pub expires_at: String,
    /// Data kept with the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// How many requests wait for the lock (in a listing and a get
    /// without a watch; absent when none, and in other answers).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiters: u64,
    /// The requests waiting for the lock, in the order they will be served
    /// (in a listing and a get without a watch, the first 100; absent when
    /// none, and in other answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<crate::QueuedView>,
    /// What the grant holds of its name: `exclusive` (absent), `shared`,
    /// or `permit` (one of `permits`).
    #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
    pub mode: Mode,
    /// The semaphore's count of permits, for a grant of one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The name's other holders (held shared or as permits), oldest first
    /// (in a listing and a get without a watch; absent when this one holds
    /// it alone, and in other answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<LockView>,
    /// The grant's lock-delay in milliseconds (absent when none): once its
    /// lease runs out unreleased, the name stays closed this much longer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_ms: u64,
    /// While the lease has run out and the lock-delay keeps the name
    /// closed, how much longer it does, in milliseconds, rounded up
    /// (absent otherwise; `ttl_ms` is then 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_left_ms: u64,
    /// The id of the session the lock hangs off (absent when none): it has
    /// the session's lease and ends with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a grant holds of its name, as the API names it.
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The name alone.
    #[default]
    Exclusive,
    /// A share, beside other shared holders.
    Shared,
    /// One of a semaphore's permits.
    Permit,
}

impl Mode {
    fn is_exclusive(&self) -> bool {
        *self == Mode::Exclusive
    }

    /// The mode of `kind`, and its count of permits if a semaphore's.
    pub fn of(kind: Kind) -> (Mode, Option<u32>) {
        match kind {
            Kind::Exclusive => (Mode::Exclusive, None),
            Kind::Shared => (Mode::Shared, None),
            Kind::Permit(n) => (Mode::Permit, Some(n)),
        }
    }

    /// The kind a view says: `permits` counts for a permit.
    pub fn kind(self, permits: Option<u32>) -> Kind {
        match self {
            Mode::Exclusive => Kind::Exclusive,
            Mode::Shared => Kind::Shared,
            Mode::Permit => Kind::Permit(permits.unwrap_or(1)),
        }
    }
}

impl LockView {
    /// `lock` as seen at `now` on the keeping node's monotonic clock, whose
    /// wall clock reads `wall_now_ms` (Unix milliseconds) at that moment.
    ///
    /// `ttl_ms` is the holder's lease left, [`Lock::lease_left`], rounded
    /// down; `expires_at` is `wall_now_ms + ttl_ms` and `acquired_at` is
    /// `wall_now_ms` less the time held, rounded up.
    pub fn from_lock(lock: &Lock, now: MonoTime, wall_now_ms: u64) -> LockView {
        let (mode, permits) = Mode::of(lock.kind);
        let view = Self::build(
            &lock.name,
            lock.id,
            lock.node,
            &lock.holder,
            lock.fence,
            millis_floor(lock.lease),
            millis_floor(lock.lease_left(now)),
            millis_ceil(lock.held_for(now)),
            lock.data.as_deref(),
            wall_now_ms,
        );
        let delay_left_ms = if lock.is_lapsed(now) {
            millis_ceil(lock.ttl(now))
        } else {
            0
        };
        LockView {
            mode,
            permits,
            lock_delay_ms: millis_floor(lock.delay),
            delay_left_ms,
            session: lock.session.map(|s| s.to_string()),
            ..view
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        name: &str,
        id: LockId,
        node: NodeId,
        holder: &str,
        fence: Fence,
        lease_ms: u64,
        ttl_ms: u64,
        held_ms: u64,
        data: Option<&str>,
        wall_now_ms: u64,
    ) -> LockView {
        LockView {
            name: name.to_owned(),
            id: id.to_string(),
            node,
            holder: holder.to_owned(),
            fence: fence.0,
            lease_ms,
            ttl_ms,
            acquired_at: format_rfc3339_ms(wall_now_ms.saturating_sub(held_ms)),
            expires_at: format_rfc3339_ms(wall_now_ms.saturating_add(ttl_ms)),
            data: data.map(str::to_owned),
            waiters: 0,
            queue: Vec::new(),
            mode: Mode::Exclusive,
            permits: None,
            others: Vec::new(),
            lock_delay_ms: 0,
            delay_left_ms: 0,
            session: None,
        }
    }

    /// The grant's id, parsed.
    pub fn lock_id(&self) -> Result<LockId, BadLockId> {
        self.id.parse()
    }

    /// The grant's fencing token.
    pub fn fence(&self) -> Fence {
        Fence(self.fence)
    }

    /// What the grant holds of its name.
    pub fn kind(&self) -> Kind {
        self.mode.kind(self.permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const API_DOC_EXAMPLE: &str = r#"{"name": "jobs/42", "id": "01J...", "node": 2, "holder": "worker-7",
 "fence": 12884901889, "lease_ms": 30000, "ttl_ms": 29987,
 "acquired_at": "2026-11-29T20:00:00.000Z", "expires_at": "2026-11-29T20:00:30.000Z",
 "data": "optional"}"#;

    fn sample(data: Option<&str>) -> (Lock, MonoTime) {
        let now = MonoTime::from_nanos(1_000_000_000_000);
        let lock = Lock {
            session: Default::default(),
            delay: Default::default(),
            kind: Default::default(),
            name: "jobs/42".into(),
            id: LockId::from_parts(1_795_982_400_000, 42),
            node: 2,
            holder: "worker-7".into(),
            fence: Fence::new(3, 1),
            lease: Duration::from_secs(30),
            acquired: now - Duration::from_micros(12_500),
            expires: now + Duration::from_micros(29_987_600),
            data: data.map(Into::into),
            data_rev: 0,
        };
        (lock, now)
    }

    #[test]
    fn field_names_match_the_spec_example() {
        let spec: serde_json::Value = serde_json::from_str(API_DOC_EXAMPLE).unwrap();
        let mut spec_keys: Vec<_> = spec.as_object().unwrap().keys().cloned().collect();
        let (lock, now) = sample(Some("optional"));
        let ours =
            serde_json::to_value(LockView::from_lock(&lock, now, 1_795_982_400_013)).unwrap();
        let mut our_keys: Vec<_> = ours.as_object().unwrap().keys().cloned().collect();
        spec_keys.sort();
        our_keys.sort();
        assert_eq!(our_keys, spec_keys);
        // And the example reads back as a LockView.
        let back: LockView = serde_json::from_value(spec).unwrap();
        assert_eq!(back.fence, 12_884_901_889);
        assert_eq!(back.data.as_deref(), Some("optional"));
    }

    #[test]
    fn from_lock_values() {
        let (lock, now) = sample(None);
        let wall = 1_795_982_400_013;
        let view = LockView::from_lock(&lock, now, wall);
        assert_eq!(view.id, lock.id.to_string());
        assert_eq!(view.lock_id(), Ok(lock.id));
        assert_eq!(view.fence(), Fence::new(3, 1));
        assert_eq!(view.lease_ms, 30_000);
        assert_eq!(view.ttl_ms, 29_987); // 29 987.6 rounded down
        assert_eq!(view.acquired_at, "2026-11-29T20:00:00.000Z"); // 13 - ceil(12.5)
        assert_eq!(view.expires_at, "2026-11-29T20:00:30.000Z");
        let json = serde_json::to_value(&view).unwrap();
        assert!(json.get("data").is_none(), "data left out when none");
        assert_eq!(json["holder"], "worker-7");
        assert_eq!(json["id"].as_str().unwrap().len(), 26);
        assert_eq!(serde_json::from_value::<LockView>(json).unwrap(), view);
    }

    #[test]
    fn empty_holder_is_present() {
        let (mut lock, now) = sample(Some("d"));
        lock.holder.clear();
        let view = LockView::from_lock(&lock, now, 5_000);
        assert_eq!(serde_json::to_value(&view).unwrap()["holder"], "");
        // Held longer than the wall clock has run: acquired_at saturates.
        assert_eq!(view.acquired_at, "1970-01-01T00:00:04.987Z");
        assert_eq!(
            LockView::from_lock(&lock, now, 0).acquired_at,
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn a_lock_delay_is_shown_apart_from_the_lease_left() {
        let (mut lock, now) = sample(None);
        lock.delay = Duration::from_secs(5);
        lock.expires = now + Duration::from_millis(7_000);
        let view = LockView::from_lock(&lock, now, 0);
        assert_eq!(view.ttl_ms, 2_000, "the holder's lease, without the delay");
        assert_eq!(view.lock_delay_ms, 5_000);
        assert_eq!(view.delay_left_ms, 0, "the lease still runs");
        let later = now + Duration::from_millis(3_500);
        let view = LockView::from_lock(&lock, later, 0);
        assert_eq!(view.ttl_ms, 0);
        assert_eq!(view.delay_left_ms, 3_500, "the name is closed this long");
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["lock_delay_ms"], 5_000);
        let (plain, now) = sample(None);
        let json = serde_json::to_value(LockView::from_lock(&plain, now, 0)).unwrap();
        assert!(json.get("lock_delay_ms").is_none() && json.get("delay_left_ms").is_none());
    }
}
