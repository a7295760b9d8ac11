//! Property tests: random sequences of table operations against a simple
//! model of the seed's rules.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use locktable::{
    AcquireError, Acquired, Fence, Lock, LockError, LockId, MonoTime, RebuildFrom, Request,
    WaiterId,
};
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        name: usize,
        lease_ms: u64,
        wait_ms: u64,
    },
    Release {
        name: usize,
        pick: usize,
    },
    /// A release heard of from elsewhere, carrying the time its lease had
    /// left.
    Forget {
        name: usize,
        pick: usize,
    },
    Renew {
        name: usize,
        pick: usize,
        lease_ms: u64,
    },
    Advance {
        ms: u64,
    },
    /// Drop, then rebuild from a subset of the live locks, maybe with a
    /// lock another speaker granted apart and a released lock reported by a
    /// node that had not heard of the release.
    Failover {
        keep_mask: u8,
        rival: Option<(usize, i64)>,
        stale_release: bool,
    },
    /// Drop twice and rebuild for the first generation: nothing changes.
    StaleRebuild,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 1_000..4_000u64, prop_oneof![Just(0u64), 500..5_000u64])
            .prop_map(|(name, lease_ms, wait_ms)| Op::Acquire { name, lease_ms, wait_ms }),
        2 => (0..3usize, 0..4usize).prop_map(|(name, pick)| Op::Release { name, pick }),
        1 => (0..3usize, 0..4usize).prop_map(|(name, pick)| Op::Forget { name, pick }),
        2 => (0..3usize, 0..4usize, 1_000..4_000u64).prop_map(|(name, pick, lease_ms)| Op::Renew { name, pick, lease_ms }),
        3 => (0..3_000u64).prop_map(|ms| Op::Advance { ms }),
        1 => (any::<u8>(), proptest::option::of((0..3usize, -3_000..3_000i64)), any::<bool>())
            .prop_map(|(keep_mask, rival, stale_release)| Op::Failover { keep_mask, rival, stale_release }),
        1 => Just(Op::StaleRebuild),
    ]
}

struct Waiting {
    waiter: WaiterId,
    request: Request,
    until: MonoTime,
}

/// The seed's rules, written as plainly as possible.
#[derive(Default)]
struct Model {
    locks: BTreeMap<String, Lock>,
    queues: BTreeMap<String, VecDeque<Waiting>>,
    /// What each waiter was answered: the granted id, or None for a refusal.
    answers: HashMap<WaiterId, Option<LockId>>,
    released: HashMap<LockId, Lock>,
    next_waiter: u64,
}

impl Model {
    fn grant(&mut self, request: &Request, now: MonoTime, fence: Fence) -> Lock {
        let lease = request.lease.unwrap();
        let lock = Lock {
            session: Default::default(),
            delay: Default::default(),
            kind: Default::default(),
            name: request.name.clone(),
            id: request.id,
            node: request.node,
            holder: request.holder.clone(),
            fence,
            lease,
            acquired: now,
            expires: now + lease,
            data: None,
            data_rev: 0,
        };
        self.locks.insert(lock.name.clone(), lock.clone());
        lock
    }

    /// Frees `name` if its lease ended, handing it over; `fence` is the
    /// fence the table gives its next grant.
    fn expire(&mut self, name: &str, now: MonoTime, next_fence: &mut dyn FnMut() -> Fence) {
        if self.locks.get(name).is_some_and(|l| l.expires <= now) {
            self.locks.remove(name);
            self.hand_over(name, now, next_fence);
        }
    }

    fn hand_over(&mut self, name: &str, now: MonoTime, next_fence: &mut dyn FnMut() -> Fence) {
        let mut queue = self.queues.remove(name).unwrap_or_default();
        while let Some(w) = queue.pop_front() {
            if w.until < now {
                self.answers.insert(w.waiter, None);
                continue;
            }
            let lock = self.grant(&w.request, now, next_fence());
            self.answers.insert(w.waiter, Some(lock.id));
            break;
        }
        if !queue.is_empty() {
            self.queues.insert(name.to_string(), queue);
        }
    }

    fn time_out(&mut self, now: MonoTime) {
        for queue in self.queues.values_mut() {
            queue.retain(|w| {
                if w.until <= now {
                    self.answers.insert(w.waiter, None);
                    false
                } else {
                    true
                }
            });
        }
        self.queues.retain(|_, q| !q.is_empty());
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut now = MonoTime::from_nanos(1_000_000_000_000);
    let mut model = Model::default();
    let mut epoch = 1;
    let mut table = common::rebuilt_table(epoch, vec![], now);
    let mut next_id = 0u128;
    let mut ids_by_name: HashMap<String, Vec<LockId>> = HashMap::new();
    let mut last_fence = Fence::default();
    let mut released_locks: HashMap<LockId, Lock> = HashMap::new();
    let mut seen_answers: HashMap<WaiterId, Option<LockId>> = HashMap::new();

    for op in ops {
        // Fences the model expects are whatever the table hands out next;
        // the checks below assert they only grow.
        let mut fence_probe = || Fence(u64::MAX);
        match op {
            Op::Acquire {
                name,
                lease_ms,
                wait_ms,
            } => {
                next_id += 1;
                let request = Request {
                    session: Default::default(),
                    delay: Default::default(),
                    kind: Default::default(),
                    name: NAMES[name].into(),
                    id: LockId::from_u128(next_id),
                    node: 1 + (next_id as u64 % 3),
                    holder: String::new(),
                    lease: Some(ms(lease_ms)),
                    wait: ms(wait_ms),
                    data: None,
                };
                ids_by_name
                    .entry(request.name.clone())
                    .or_default()
                    .push(request.id);
                model.expire(&request.name, now, &mut fence_probe);
                let got = table.acquire(request.clone(), now);
                match (&got, model.locks.get(&request.name)) {
                    (Ok(Acquired::Granted(lock)), None) => {
                        prop_assert!(lock.fence > last_fence, "fences strictly increase");
                        last_fence = lock.fence;
                        model.grant(&request, now, lock.fence);
                    }
                    (Err(AcquireError::Held(h)), Some(current)) if wait_ms == 0 => {
                        prop_assert_eq!(h.id, current.id);
                    }
                    (Ok(Acquired::Waiting(w)), Some(_)) if wait_ms > 0 => {
                        prop_assert_eq!(w.0, model.next_waiter);
                        model.next_waiter += 1;
                        let until = now + ms(wait_ms);
                        model
                            .queues
                            .entry(request.name.clone())
                            .or_default()
                            .push_back(Waiting {
                                waiter: *w,
                                request,
                                until,
                            });
                    }
                    (got, expected) => {
                        prop_assert!(false, "acquire gave {got:?}, model holds {expected:?}")
                    }
                }
            }
            Op::Release { name, pick } => {
                let name = NAMES[name];
                let Some(id) = ids_by_name
                    .get(name)
                    .and_then(|ids| ids.iter().rev().nth(pick))
                    .copied()
                else {
                    continue;
                };
                model.expire(name, now, &mut fence_probe);
                let expected = model.locks.get(name).filter(|l| l.id == id).cloned();
                let got = table.release(name, id, now);
                match (got, expected) {
                    (Ok(lock), Some(held)) => {
                        prop_assert_eq!(lock.id, held.id);
                        model.locks.remove(name);
                        model.released.insert(id, held);
                        released_locks.insert(id, lock);
                        model.hand_over(name, now, &mut fence_probe);
                    }
                    (Err(LockError::NotHeld), None) => {}
                    (got, expected) => {
                        prop_assert!(false, "release gave {got:?}, model {expected:?}")
                    }
                }
            }
            Op::Forget { name, pick } => {
                let name = NAMES[name];
                let Some(id) = ids_by_name
                    .get(name)
                    .and_then(|ids| ids.iter().rev().nth(pick))
                    .copied()
                else {
                    continue;
                };
                // Only a lock still live here: the table does not end a
                // lease before forgetting it.
                model.expire(name, now, &mut fence_probe);
                let Some(held) = model.locks.get(name).filter(|l| l.id == id).cloned() else {
                    continue;
                };
                let left = held.expires.saturating_duration_since(now);
                table.forget(name, id, left, now);
                model.locks.remove(name);
                for w in model.queues.remove(name).unwrap_or_default() {
                    model.answers.insert(w.waiter, None);
                }
                model.released.insert(id, held.clone());
                released_locks.insert(id, held);
            }
            Op::Renew {
                name,
                pick,
                lease_ms,
            } => {
                let name = NAMES[name];
                let Some(id) = ids_by_name
                    .get(name)
                    .and_then(|ids| ids.iter().rev().nth(pick))
                    .copied()
                else {
                    continue;
                };
                model.expire(name, now, &mut fence_probe);
                let got = table.renew(name, id, Some(ms(lease_ms)), 2, now);
                match (got, model.locks.get_mut(name).filter(|l| l.id == id)) {
                    (Ok(lock), Some(held)) => {
                        held.expires = now + ms(lease_ms);
                        prop_assert_eq!(lock.expires, held.expires);
                        prop_assert_eq!(lock.fence, held.fence, "a renewal keeps the fence");
                    }
                    (Err(LockError::NotHeld), None) => {}
                    (got, expected) => {
                        prop_assert!(false, "renew gave {got:?}, model {expected:?}")
                    }
                }
            }
            Op::Advance { ms: step } => {
                now = now + ms(step);
                table.poll(now);
                for name in NAMES {
                    model.expire(name, now, &mut fence_probe);
                }
                model.time_out(now);
                // A released id is kept until its lease would have ended
                // plus a second, and dropped within a second after that.
                let kept = |margin: u64| {
                    model
                        .released
                        .values()
                        .filter(|l| l.expires + ms(margin) > now)
                        .count()
                };
                prop_assert!(
                    table.forgotten_ids() >= kept(1_000),
                    "a released id is kept while a record of it may live"
                );
                prop_assert!(
                    table.forgotten_ids() <= kept(2_000),
                    "a released id is dropped within a second of its time"
                );
            }
            Op::Failover {
                keep_mask,
                rival,
                stale_release,
            } => {
                let table_before = table.list("", 100, now).unwrap();
                table.drop_table(now);
                for w in model.queues.values().flatten() {
                    model.answers.insert(w.waiter, None);
                }
                model.queues.clear();
                // What the nodes report is what the table held (checked
                // equal to the model below), with the fences it gave.
                let live: Vec<Lock> = table_before.clone();
                let mut reports: Vec<Lock> = live
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| keep_mask & (1 << i) != 0)
                    .map(|(_, l)| l.clone())
                    .collect();
                if stale_release {
                    // A node that had not heard of the release still holds
                    // its record, which ends no later than the lease did.
                    reports.extend(released_locks.values().cloned());
                }
                if let Some((name, offset_ms)) = rival {
                    next_id += 1;
                    let acquired = if offset_ms < 0 {
                        now - ms(offset_ms.unsigned_abs())
                    } else {
                        now + ms(offset_ms as u64)
                    };
                    ids_by_name
                        .entry(NAMES[name].into())
                        .or_default()
                        .push(LockId::from_u128(next_id));
                    reports.push(Lock {
                        session: Default::default(),
                        delay: Default::default(),
                        kind: Default::default(),
                        name: NAMES[name].into(),
                        id: LockId::from_u128(next_id),
                        node: 3,
                        holder: String::new(),
                        fence: Fence::new(epoch, 1 << 20),
                        lease: ms(4_000),
                        acquired,
                        expires: now + ms(4_000),
                        data: None,
                        data_rev: 0,
                    });
                }
                // The model: per name, the live, unreleased report held
                // longest; of two from one term (one speaker's table), the
                // later grant.
                let mut expected: BTreeMap<String, Lock> = BTreeMap::new();
                for r in &reports {
                    if !r.is_live(now) || model.released.contains_key(&r.id) {
                        continue;
                    }
                    let better = expected.get(&r.name).is_none_or(|c| {
                        if r.fence.epoch() == c.fence.epoch() {
                            r.fence > c.fence
                        } else {
                            (r.acquired, r.fence, r.id) < (c.acquired, c.fence, c.id)
                        }
                    });
                    if better {
                        expected.insert(r.name.clone(), r.clone());
                    }
                }
                epoch += 1;
                let max_reported = reports.iter().map(|l| l.fence).max().unwrap_or_default();
                let out = table
                    .rebuild(
                        RebuildFrom {
                            generation: table.generation(),
                            epoch,
                            locks: reports.clone(),
                            hold_new_grants_until: None,
                            seen_all: false,
                        },
                        now,
                    )
                    .unwrap();
                for lost in &out.lost {
                    prop_assert!(
                        expected.get(&lost.name).is_some_and(|k| k.id != lost.id),
                        "only a loser is returned"
                    );
                    // A loser is forgotten as a release is, and other
                    // records of it may still be reported later.
                    model.released.insert(lost.id, lost.clone());
                    released_locks.insert(lost.id, lost.clone());
                }
                last_fence = last_fence.max(max_reported);
                model.locks = expected;
            }
            Op::StaleRebuild => {
                let before = table.list("", 100, now);
                let generation = table.generation();
                table.drop_table(now);
                let ghost = Lock {
                    session: Default::default(),
                    delay: Default::default(),
                    kind: Default::default(),
                    name: "ghost".into(),
                    id: LockId::from_u128(u128::MAX),
                    node: 1,
                    holder: String::new(),
                    fence: Fence(1),
                    lease: ms(1000),
                    acquired: now,
                    expires: now + ms(1000),
                    data: None,
                    data_rev: 0,
                };
                let stale = table.rebuild(
                    RebuildFrom {
                        generation,
                        epoch: epoch + 1,
                        locks: vec![ghost],
                        hold_new_grants_until: None,
                        seen_all: false,
                    },
                    now,
                );
                prop_assert!(
                    stale.is_err(),
                    "a rebuild for a generation that moved on is refused"
                );
                prop_assert!(!table.is_rebuilt());
                prop_assert!(table.is_empty(), "and changes nothing");
                // Put the table back as it was, through a proper rebuild.
                for w in model.queues.values().flatten() {
                    model.answers.insert(w.waiter, None);
                }
                model.queues.clear();
                epoch += 1;
                table
                    .rebuild(
                        RebuildFrom {
                            generation: table.generation(),
                            epoch,
                            locks: before.unwrap_or_default(),
                            hold_new_grants_until: None,
                            seen_all: false,
                        },
                        now,
                    )
                    .unwrap();
            }
        }

        // Waiters: the table answered exactly whom the model answered, the
        // same way, which is first come, first served.
        for answer in table.take_answers() {
            let granted = match &answer.result {
                Ok(lock) => {
                    prop_assert!(lock.fence > last_fence, "fences strictly increase");
                    last_fence = lock.fence;
                    if let Some(mine) = model.locks.get_mut(&lock.name).filter(|l| l.id == lock.id)
                    {
                        mine.fence = lock.fence;
                    }
                    Some(lock.id)
                }
                Err(_) => None,
            };
            prop_assert!(
                seen_answers.insert(answer.waiter, granted).is_none(),
                "one answer per waiter"
            );
        }
        for (waiter, granted) in model.answers.drain() {
            prop_assert_eq!(
                seen_answers.get(&waiter),
                Some(&granted),
                "waiter {:?}",
                waiter
            );
        }
        // The table holds what the model holds: one unexpired holder a name.
        for name in NAMES {
            let got = table.get(name, now).unwrap().map(|l| l.id);
            let want = model
                .locks
                .get(name)
                .filter(|l| l.is_live(now))
                .map(|l| l.id);
            prop_assert_eq!(got, want, "holder of {}", name);
            if let Some(id) = got {
                prop_assert!(
                    !model.released.contains_key(&id),
                    "a released id never returns"
                );
            }
        }
        let granted_ids: HashSet<LockId> = table.granted(now).iter().map(|l| l.id).collect();
        for id in model.released.keys() {
            prop_assert!(
                !granted_ids.contains(id),
                "a released id is not reported as granted"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_table_follows_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
