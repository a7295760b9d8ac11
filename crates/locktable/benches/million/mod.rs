//! The million locks the memory and growth benchmarks fill with.

use std::time::Duration;

use locktable::{Lock, LockId, MonoTime, Request};

/// The `i`th request: a name and id of its own.
pub fn request(i: u64) -> Request {
    Request {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: format!("jobs/{i:07}"),
        id: LockId::from_parts(1_764_000_000_000 + i, u128::from(i) * 0x9E37_79B9),
        node: 1 + i % 5,
        holder: "worker-7".into(),
        lease: Some(Duration::from_secs(30)),
        wait: Duration::ZERO,
        data: None,
    }
}

/// The lock a node records for `request(i)` granted at `now`.
pub fn lock(i: u64, now: MonoTime) -> Lock {
    let r = request(i);
    Lock {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: r.name,
        id: r.id,
        node: r.node,
        holder: r.holder,
        fence: locktable::Fence::new(1, i + 1),
        lease: Duration::from_secs(30),
        acquired: now,
        expires: now + Duration::from_secs(30),
        data: None,
        data_rev: 0,
    }
}
