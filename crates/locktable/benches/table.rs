//! Criterion benchmarks of the grant path and of a rebuild.
//!
//! `cargo bench -p locktable --bench table`
#![allow(missing_docs)] // criterion_group! makes an undocumented pub fn.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use locktable::{
    session_name, Acquired, AcquiredSet, Fence, Held, Kind, LeaseRule, Lock, LockId, MonoTime,
    RebuildFrom, Request, Table,
};

fn now() -> MonoTime {
    MonoTime::from_nanos(1 << 60)
}

fn request(name: String, id: u128) -> Request {
    Request {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name,
        id: LockId::from_u128(id),
        node: 1,
        holder: "worker-7".into(),
        lease: Some(Duration::from_secs(30)),
        wait: Duration::ZERO,
        data: None,
    }
}

fn rebuilt(locks: Vec<Lock>) -> Table {
    let mut table = Table::new(LeaseRule {
        default: Duration::from_secs(30),
        max: Duration::from_secs(3600),
    });
    table.drop_table(now());
    let generation = table.generation();
    table
        .rebuild(
            RebuildFrom {
                generation,
                epoch: 1,
                locks,
                hold_new_grants_until: None,
                seen_all: false,
            },
            now(),
        )
        .unwrap();
    table
}

fn lock(i: u64, node: u64) -> Lock {
    Lock {
        session: Default::default(),
        delay: Default::default(),
        kind: Default::default(),
        name: format!("jobs/{i}"),
        id: LockId::from_u128(u128::from(i)),
        node,
        holder: "worker-7".into(),
        fence: Fence(i),
        lease: Duration::from_secs(30),
        acquired: now(),
        expires: now() + Duration::from_secs(3600),
        data: None,
        data_rev: 0,
    }
}

fn acquire_release(c: &mut Criterion) {
    cycle(
        c,
        "acquire+release a free lock (100k held)",
        Kind::Exclusive,
        0,
        Duration::ZERO,
    );
}

/// The other kinds' cycle, each on a name two others already hold that
/// way: what a reader or a permit costs beside the exclusive lock's.
fn acquire_release_kinds(c: &mut Criterion) {
    cycle(
        c,
        "acquire+release a shared lock beside 2 readers (100k held)",
        Kind::Shared,
        2,
        Duration::ZERO,
    );
    cycle(
        c,
        "acquire+release a permit of 4 beside 2 holders (100k held)",
        Kind::Permit(4),
        2,
        Duration::ZERO,
    );
    cycle(
        c,
        "acquire+release a lock with a 5 s lock-delay (100k held)",
        Kind::Exclusive,
        0,
        Duration::from_secs(5),
    );
}

/// Acquires and releases `name` as `kind` (with `delay`) in a table
/// already holding 100k other locks, as a busy speaker's would, and
/// `beside` other holders of the name.
fn cycle(c: &mut Criterion, label: &str, kind: Kind, beside: u128, delay: Duration) {
    let mut table = rebuilt((0..100_000).map(|i| lock(i, 1)).collect());
    let name = "jobs/free".to_string();
    let mut id = 1u128 << 100;
    // The clock moves 20 µs a cycle (50k cycles/s, a busy speaker), so the
    // released ids kept from rebuilds reach their steady state of one
    // 30 s lease's worth (1.5M) and are pruned as they would be.
    let mut clock = now();
    for other in 0..beside {
        let held = Request {
            kind,
            lease: Some(Duration::from_secs(3000)),
            ..request(name.clone(), (1u128 << 90) + other)
        };
        let Ok(Acquired::Granted(_)) = table.acquire(held, clock) else {
            panic!("the holders beside are granted")
        };
    }
    c.bench_function(label, |b| {
        b.iter(|| {
            id += 1;
            clock = clock + Duration::from_micros(20);
            let asked = Request {
                kind,
                delay,
                ..request(name.clone(), id)
            };
            let Ok(Acquired::Granted(lock)) = table.acquire(asked, clock) else {
                panic!("free lock not granted")
            };
            black_box(table.release(&name, lock.id, clock).unwrap());
        })
    });
}

/// A lock taken in a session and released, in a table holding 100k other
/// locks: the session's cycle beside the exclusive lock's
/// (`acquire_release`). The session is opened once, with a lease the run
/// does not outlast.
fn acquire_release_in_session(c: &mut Criterion) {
    let mut table = rebuilt((0..100_000).map(|i| lock(i, 1)).collect());
    let mut clock = now();
    let session_id = 3u128 << 100;
    let opened = Request {
        lease: Some(Duration::from_secs(3600)),
        ..request(session_name(LockId::from_u128(session_id)), session_id)
    };
    let Ok(Acquired::Granted(session)) = table.acquire(opened, clock) else {
        panic!("session opened")
    };
    let name = "jobs/free".to_string();
    let mut id = 1u128 << 100;
    c.bench_function("acquire+release a lock in a session (100k held)", |b| {
        b.iter(|| {
            id += 1;
            clock = clock + Duration::from_micros(20);
            let asked = Request {
                session: Some(session.id),
                lease: None,
                ..request(name.clone(), id)
            };
            let Ok(Acquired::Granted(lock)) = table.acquire(asked, clock) else {
                panic!("free lock not granted in the session")
            };
            black_box(table.release(&name, lock.id, clock).unwrap());
        })
    });
}

/// A set of 8 names acquired in one step and released, beside one name's
/// cycle (`acquire_release`): what the set's one step costs over its
/// names' own inserts and removals.
fn acquire_release_set(c: &mut Criterion) {
    let mut table = rebuilt((0..100_000).map(|i| lock(i, 1)).collect());
    let names: Vec<String> = (0..8).map(|n| format!("jobs/set/{n}")).collect();
    let mut id = 1u128 << 100;
    let mut clock = now();
    c.bench_function("acquire_set+release 8 free names (100k held)", |b| {
        b.iter(|| {
            clock = clock + Duration::from_micros(20);
            let asked: Vec<Request> = names
                .iter()
                .map(|name| {
                    id += 1;
                    request(name.clone(), id)
                })
                .collect();
            let Ok(locktable::AcquiredSet::Granted(locks)) = table.acquire_set(asked, clock) else {
                panic!("free set not granted")
            };
            for lock in locks {
                black_box(table.release(&lock.name, lock.id, clock).unwrap());
            }
        })
    });
}

/// A session's renewal with `n` locks hanging off it beside one plain
/// lock's renewal, in a table holding 100k other locks: what the speaker's
/// table does per session renewal (`Table::renew_session`), and what the
/// renewing node's `Held` does (`Held::renewed_session`, and the digest of
/// the session's locks it sends with the renewal and checks on the answer).
fn renew_session(c: &mut Criterion) {
    let mut clock = now();
    let mut table = rebuilt((0..100_000).map(|i| lock(i, 1)).collect());
    let plain = request("jobs/plain".into(), 1u128 << 100);
    let Ok(Acquired::Granted(plain)) = table.acquire(plain, clock) else {
        panic!("plain lock granted")
    };
    let mut group = c.benchmark_group("renew");
    group.bench_function("Table::renew of one lock (100k held)", |b| {
        b.iter(|| {
            clock = clock + Duration::from_micros(20);
            black_box(table.renew(&plain.name, plain.id, None, 1, clock).unwrap());
        })
    });
    let mut held = Held::new();
    held.record(plain.clone());
    group.bench_function("Held::renewed of one lock", |b| {
        b.iter(|| {
            clock = clock + Duration::from_micros(20);
            black_box(held.renewed(plain.id, plain.lease, clock));
        })
    });
    for n in [1u128, 1000, 10_000] {
        let session_id = (2u128 << 100) + n * 100_000;
        let opened = request(session_name(LockId::from_u128(session_id)), session_id);
        let Ok(Acquired::Granted(session)) = table.acquire(opened, clock) else {
            panic!("session opened")
        };
        let names: Vec<String> = (0..n).map(|i| format!("jobs/session/{n}/{i}")).collect();
        for (i, chunk) in names.chunks(64).enumerate() {
            let asked: Vec<Request> = chunk
                .iter()
                .zip(0u128..)
                .map(|(name, k)| Request {
                    session: Some(session.id),
                    lease: None,
                    ..request(name.clone(), session_id + 1 + (i as u128) * 64 + k)
                })
                .collect();
            let Ok(AcquiredSet::Granted(locks)) = table.acquire_set(asked, clock) else {
                panic!("session's locks granted")
            };
            black_box(locks);
        }
        group.bench_function(
            format!("Table::renew_session, a session of {n} (100k held)"),
            |b| {
                b.iter(|| {
                    clock = clock + Duration::from_micros(20);
                    let renewed = table.renew_session(session.id, None, 1, clock).unwrap();
                    assert_eq!(renewed.locks as u128, n);
                    black_box(renewed);
                })
            },
        );
        let mut held = Held::new();
        held.record(session.clone());
        for lock in table.session_locks(session.id) {
            held.record(lock);
        }
        group.bench_function(format!("Held::renewed_session, a session of {n}"), |b| {
            b.iter(|| {
                clock = clock + Duration::from_micros(20);
                black_box(held.renewed_session(session.id, session.lease, clock));
            })
        });
        group.bench_function(format!("Held::session_digest, a session of {n}"), |b| {
            b.iter(|| black_box(held.session_digest(session.id)))
        });
    }
    group.finish();
}

/// The reference in the same run: a std `HashMap` insert and remove of the
/// same name, the least a keyed table can do per cycle.
fn reference_hashmap(c: &mut Criterion) {
    let mut map: std::collections::HashMap<String, (u128, u64)> = (0..100_000u64)
        .map(|i| (format!("jobs/{i}"), (u128::from(i), i)))
        .collect();
    let name = "jobs/free".to_string();
    let mut id = 0u128;
    c.bench_function("reference: HashMap insert+remove (100k held)", |b| {
        b.iter(|| {
            id += 1;
            map.insert(name.clone(), (id, 1));
            black_box(map.remove(&name));
        })
    });
}

fn rebuild(c: &mut Criterion) {
    // One million locks held through 5 nodes: each node reports its
    // clients' 200k, and the old speaker reports all it granted.
    let mut reports: Vec<Lock> = (0..1_000_000).map(|i| lock(i, 1 + i % 5)).collect();
    reports.extend((0..1_000_000).map(|i| lock(i, 1 + i % 5)));
    let mut group = c.benchmark_group("rebuild");
    group.sample_size(10);
    group.bench_function("1M locks from 5 nodes + old speaker (2M reports)", |b| {
        b.iter_batched(
            || (Table::new(LeaseRule::default()), reports.clone()),
            |(mut table, locks)| {
                table.drop_table(now());
                let generation = table.generation();
                let out = table
                    .rebuild(
                        RebuildFrom {
                            generation,
                            epoch: 2,
                            locks,
                            hold_new_grants_until: None,
                            seen_all: false,
                        },
                        now(),
                    )
                    .unwrap();
                assert_eq!(out.locks, 1_000_000);
                table
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(
    benches,
    acquire_release,
    acquire_release_kinds,
    acquire_release_in_session,
    acquire_release_set,
    renew_session,
    reference_hashmap,
    rebuild
);
criterion_main!(benches);
