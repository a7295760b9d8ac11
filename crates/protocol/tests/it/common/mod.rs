//! What the protocol's tests share: a member of three on a fake clock.

#![allow(dead_code)]

use std::time::Duration;

use leasehold_protocol::{
    Guard, Leader, Member, MemberConfig, MemberRead, RebuildInput, RebuildMode,
};
use locktable::{Acquired, Fence, LeaseRule, Lock, LockId, LockInTransit, MonoTime, Request};

pub const LEADER_LEASE: Duration = Duration::from_millis(1_000);
pub const LEASE: Duration = Duration::from_secs(10);
pub const MAX_LEASE: Duration = Duration::from_secs(60);
pub const REBUILD_TIMEOUT: Duration = Duration::from_millis(500);

pub fn at(ms: u64) -> MonoTime {
    MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
}

pub fn member(id: u64, mode: RebuildMode) -> Member {
    Member::new(MemberConfig {
        id,
        members: vec![1, 2, 3],
        copy_to: vec![1, 2, 3],
        copies: 2,
        lease: LeaseRule {
            default: LEASE,
            max: MAX_LEASE,
        },
        rebuild_mode: mode,
        leader_lease: LEADER_LEASE,
        rebuild_timeout: REBUILD_TIMEOUT,
        sabotage: leasehold_protocol::Sabotage::NONE,
    })
}

pub fn leading(term: u64, acked: MonoTime) -> Guard {
    Guard {
        leader: Some(Leader {
            term,
            quorum_acked_at: Some(acked),
        }),
        resumed_at: None,
    }
}

/// Member `id` rebuilt as the speaker of `term` at `now`, with `missing`
/// members not read and `locks` read.
pub fn speaker(id: u64, term: u64, now: MonoTime, missing: Vec<u64>, mode: RebuildMode) -> Member {
    let mut m = member(id, mode);
    m.drop_table(Some(term), now);
    let reads = [1, 2, 3]
        .into_iter()
        .filter(|r| !missing.contains(r))
        .map(|r| (r, Vec::new()))
        .collect();
    rebuild_reading(&mut m, term, reads, missing, now);
    m
}

/// Rebuilds `m`, its table dropped for `term`, as the speaker of `term`
/// at `now`: each member of `reads` read with its report (every one with
/// `--copies 2` and the longest lease), `missing` not read.
pub fn rebuild_reading(
    m: &mut Member,
    term: u64,
    reads: Vec<(u64, Vec<Lock>)>,
    missing: Vec<u64>,
    now: MonoTime,
) {
    let reads = reads
        .into_iter()
        .map(|(member, locks)| MemberRead {
            member,
            max_lease: MAX_LEASE,
            copies: 2,
            uptime: None,
            locks,
            departed: Vec::new(),
        })
        .collect();
    let input = RebuildInput {
        term,
        generation: m.generation(),
        reads,
        missing,
        took: Duration::ZERO,
    };
    m.rebuild(input, &leading(term, now), now).expect("rebuilt");
}

/// `request`, willing to wait five seconds for the name.
pub fn wait_for(name: &str, id: u128, node: u64) -> Request {
    Request {
        wait: Duration::from_secs(5),
        ..request(name, id, node)
    }
}

pub fn request(name: &str, id: u128, node: u64) -> Request {
    Request {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: name.into(),
        id: LockId::from_u128(id),
        node,
        holder: "h".into(),
        lease: None,
        wait: Duration::ZERO,
        data: None,
    }
}

pub fn granted(
    m: &mut Member,
    name: &str,
    id: u128,
    node: u64,
    guard: &Guard,
    now: MonoTime,
) -> Lock {
    match m.acquire(request(name, id, node), guard, now) {
        Ok((Acquired::Granted(lock), _)) => lock,
        other => panic!("not granted: {other:?}"),
    }
}

pub fn in_transit(id: u128, epoch: u64, ttl: Duration) -> LockInTransit {
    LockInTransit {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: "jobs/1".into(),
        id: LockId::from_u128(id),
        node: 2,
        holder: "h".into(),
        fence: Fence::new(epoch, 1),
        lease: ttl,
        ttl,
        held_for: Duration::ZERO,
        data: None,
        data_rev: 0,
    }
}

/// A renewal of `name` under `id` for a client of `node`, with `record`.
pub fn renewal(
    name: &str,
    id: LockId,
    node: u64,
    record: Option<Lock>,
) -> leasehold_protocol::Renewal<'_> {
    leasehold_protocol::Renewal {
        name,
        id,
        lease: None,
        node,
        record,
        data: None,
    }
}

/// Member 2's record of lock `id` (of term 1, lease `ttl`), renewed through
/// the speaker by a call sent at 0 and answered at 1 ms.
pub fn held_through_speaker(m: &mut Member, id: u128, ttl: Duration) -> Lock {
    let call = leasehold_protocol::Forwarded {
        sent: at(0),
        read_before: 0,
    };
    m.renewed_through_speaker(call, in_transit(id, 1, ttl), at(1))
        .unwrap()
}

/// `request` granted by `m` speaking for `term` at `now`.
pub fn grant_for(m: &mut Member, request: Request, term: u64, now: MonoTime) -> Lock {
    match m.acquire(request, &leading(term, now), now) {
        Ok((Acquired::Granted(lock), _)) => lock,
        other => panic!("not granted: {other:?}"),
    }
}

/// A call forwarded at `ms`, before any newer speaker read its node.
pub fn call(ms: u64) -> leasehold_protocol::Forwarded {
    leasehold_protocol::Forwarded {
        sent: at(ms),
        read_before: 0,
    }
}
