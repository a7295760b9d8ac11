//! What the table's tests share: times, requests, rebuilt tables.

#![allow(dead_code)]

use std::time::Duration;

use locktable::{
    AcquireError, Acquired, Fence, LeaseRule, Lock, LockId, MonoTime, RebuildFrom, Request, Table,
};

pub const SEC: Duration = Duration::from_secs(1);

pub fn t(secs: u64) -> MonoTime {
    MonoTime::from_nanos(1_000_000_000_000) + Duration::from_secs(secs)
}

pub fn req(name: &str, id: u128, node: u64) -> Request {
    Request {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: name.into(),
        id: LockId::from_u128(id),
        node,
        holder: format!("client-{id}"),
        lease: Some(10 * SEC),
        wait: Duration::ZERO,
        data: None,
    }
}

pub fn waiting(mut r: Request, wait: Duration) -> Request {
    r.wait = wait;
    r
}

pub fn rebuilt_table(epoch: u64, locks: Vec<Lock>, now: MonoTime) -> Table {
    rebuilt_table_as(epoch, locks, now, false)
}

/// A table rebuilt for `epoch` from `locks`, by a read that saw every
/// answered grant or not.
pub fn rebuilt_table_as(epoch: u64, locks: Vec<Lock>, now: MonoTime, seen_all: bool) -> Table {
    rebuilt_from(epoch, locks, now, None, seen_all)
}

/// A table rebuilt for `epoch` from `locks` by a strict read that missed
/// members: new grants held back until `until`.
pub fn held_back_table(epoch: u64, locks: Vec<Lock>, now: MonoTime, until: MonoTime) -> Table {
    rebuilt_from(epoch, locks, now, Some(until), false)
}

fn rebuilt_from(
    epoch: u64,
    locks: Vec<Lock>,
    now: MonoTime,
    hold_new_grants_until: Option<MonoTime>,
    seen_all: bool,
) -> Table {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(now);
    table
        .rebuild(
            RebuildFrom {
                generation: table.generation(),
                epoch,
                locks,
                hold_new_grants_until,
                seen_all,
            },
            now,
        )
        .unwrap();
    table
}

/// An empty table under `rule`, rebuilt at `t(0)`.
pub fn rebuilt_under(rule: LeaseRule) -> Table {
    let mut table = Table::new(rule);
    table.drop_table(t(0));
    let generation = table.generation();
    let from = RebuildFrom {
        generation,
        epoch: 1,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: true,
    };
    table.rebuild(from, t(0)).unwrap();
    table
}

pub fn granted(result: Result<Acquired, AcquireError>) -> Lock {
    match result {
        Ok(Acquired::Granted(lock)) => lock,
        other => panic!("expected a grant, got {other:?}"),
    }
}

pub fn held_lock(
    name: &str,
    id: u128,
    node: u64,
    acquired: MonoTime,
    expires: MonoTime,
    fence: u64,
) -> Lock {
    Lock {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: name.into(),
        id: LockId::from_u128(id),
        node,
        holder: String::new(),
        fence: Fence(fence),
        lease: expires.saturating_duration_since(acquired),
        acquired,
        expires,
        data: None,
        data_rev: 0,
    }
}
