//! Any sequence of table operations keeps the table's promises: the
//! holders of a name may all be held together (one exclusive, readers, or
//! permits of one count), and never more than its permits once this term
//! granted one of them; fences that only grow, released ids that never
//! return, stale rebuilds that change nothing, and no panic. Names `n0`
//! are exclusive, `n1` readers and writers, `n2` a semaphore of two, `n3`
//! permits of a count the input picks (so counts that do not match meet).
#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use locktable::{
    Acquired, Fence, Kind, LeaseRule, Lock, LockId, MonoTime, RebuildFrom, Request, Table,
};

#[derive(Arbitrary, Debug)]
enum Op {
    Acquire {
        name: u8,
        lease_ms: u16,
        wait_ms: u16,
        kind: u8,
    },
    Release {
        name: u8,
        pick: u8,
    },
    Renew {
        name: u8,
        pick: u8,
        lease_ms: u16,
    },
    Advance {
        ms: u16,
    },
    Cancel {
        name: u8,
        waiter: u8,
    },
    Forget {
        name: u8,
        pick: u8,
    },
    Drop,
    Rebuild {
        keep: u8,
        stale: bool,
        seen_all: bool,
    },
}

fuzz_target!(|ops: Vec<Op>| {
    let rule = LeaseRule {
        default: Duration::from_millis(500),
        max: Duration::from_secs(5),
    };
    let mut table = Table::new(rule);
    let mut now = MonoTime::from_nanos(1 << 50);
    let mut epoch = 1;
    table.drop_table(now);
    let _ = table.rebuild(
        RebuildFrom {
            generation: table.generation(),
            epoch,
            locks: vec![],
            hold_new_grants_until: None,
            seen_all: false,
        },
        now,
    );
    let mut ids: Vec<(String, LockId)> = Vec::new();
    let mut released: HashSet<LockId> = HashSet::new();
    // Ids ever granted: only those can be released or forgotten for real
    // (a waiting request's id is known to no one but the table).
    let mut granted: HashSet<LockId> = HashSet::new();
    let mut last_fence = Fence(0);
    let mut next = 0u128;
    let name = |n: u8| format!("n{}", n % 4);
    let pick = |ids: &[(String, LockId)], n: &str, p: u8| {
        let mine: Vec<LockId> = ids
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, id)| *id)
            .collect();
        (!mine.is_empty()).then(|| mine[p as usize % mine.len()])
    };
    for op in ops.into_iter().take(200) {
        match op {
            Op::Acquire {
                name: n,
                lease_ms,
                wait_ms,
                kind: k,
            } => {
                let kind = match n % 4 {
                    0 => Kind::Exclusive,
                    1 if k % 2 == 0 => Kind::Shared,
                    1 => Kind::Exclusive,
                    2 => Kind::Permit(2),
                    _ => Kind::Permit(u32::from(k % 3) + 1),
                };
                next += 1;
                let id = LockId::from_u128(next);
                ids.push((name(n), id));
                // Now and then a lock-delay (up to 2.5 s): the table keeps
                // the name closed after a lapse, never granting inside it.
                let delay = if k % 5 == 0 {
                    Duration::from_millis(u64::from(k) * 10)
                } else {
                    Duration::ZERO
                };
                let request = Request {
                    delay,
                    kind,
                    name: name(n),
                    id,
                    node: 1,
                    holder: String::new(),
                    lease: Some(Duration::from_millis(lease_ms.into())),
                    wait: Duration::from_millis(wait_ms.into()),
                    data: None,
                    session: None,
                };
                if let Ok(Acquired::Granted(lock)) = table.acquire(request, now) {
                    assert!(lock.fence > last_fence);
                    last_fence = lock.fence;
                    granted.insert(lock.id);
                }
            }
            Op::Release { name: n, pick: p } => {
                if let Some(id) = pick(&ids, &name(n), p) {
                    if table.release(&name(n), id, now).is_ok() {
                        released.insert(id);
                    }
                }
            }
            Op::Renew {
                name: n,
                pick: p,
                lease_ms,
            } => {
                if let Some(id) = pick(&ids, &name(n), p) {
                    let _ = table.renew(
                        &name(n),
                        id,
                        Some(Duration::from_millis(lease_ms.into())),
                        2,
                        now,
                    );
                }
            }
            Op::Advance { ms } => {
                now = now + Duration::from_millis(ms.into());
                table.poll(now);
            }
            Op::Cancel { name: n, waiter } => {
                table.cancel(&name(n), locktable::WaiterId(waiter.into()), now);
            }
            Op::Forget { name: n, pick: p } => {
                if let Some(id) = pick(&ids, &name(n), p).filter(|id| granted.contains(id)) {
                    // The time its lease has left is not known here: the
                    // longest lease, as a node says for an old sender.
                    table.forget(&name(n), id, rule.max, now);
                    released.insert(id);
                }
            }
            Op::Drop => table.drop_table(now),
            Op::Rebuild {
                keep,
                stale,
                seen_all,
            } => {
                let reports: Vec<Lock> = table
                    .granted(now)
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| keep & (1 << (i % 8)) != 0)
                    .map(|(_, l)| l)
                    .collect();
                let generation = if stale {
                    table.generation().wrapping_sub(1)
                } else {
                    table.generation()
                };
                let before: Vec<LockId> = table
                    .list("", 100, now)
                    .map(|v| v.iter().map(|l| l.id).collect())
                    .unwrap_or_default();
                epoch += 1;
                let result = table.rebuild(
                    RebuildFrom {
                        generation,
                        epoch,
                        locks: reports,
                        hold_new_grants_until: None,
                        seen_all,
                    },
                    now,
                );
                if result.is_err() {
                    let after: Vec<LockId> = table
                        .list("", 100, now)
                        .map(|v| v.iter().map(|l| l.id).collect())
                        .unwrap_or_default();
                    assert_eq!(before, after, "a refused rebuild changed the table");
                }
            }
        }
        for answer in table.take_answers() {
            if let Ok(lock) = answer.result {
                assert!(lock.fence > last_fence);
                last_fence = lock.fence;
                granted.insert(lock.id);
            }
        }
        if let Ok(listing) = table.listing("", 100, now) {
            let mut names = HashSet::new();
            for (lock, others) in listing.locks.iter().zip(&listing.also) {
                assert!(
                    names.insert(lock.name.clone()),
                    "{} listed twice",
                    lock.name
                );
                let holders: Vec<&Lock> = std::iter::once(lock).chain(others).collect();
                for h in &holders {
                    assert!(!released.contains(&h.id), "a released id came back");
                    if holders.len() > 1 {
                        assert!(
                            h.kind.compatible(lock.kind),
                            "{} held as {:?}",
                            lock.name,
                            holders
                        );
                    }
                }
                // A grant of this term was made only while it fit.
                if holders.iter().any(|h| h.fence.epoch() == epoch) {
                    assert!(
                        holders.len() <= lock.kind.limit() as usize,
                        "{} over its permits: {:?}",
                        lock.name,
                        holders
                    );
                }
            }
        }
    }
});
