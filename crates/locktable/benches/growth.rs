//! The longest single call while a table and a `Held` fill to a million
//! locks and beyond, under the node's allocator: a call that grows a
//! structure by copying or rehashing all of it at once holds the node's
//! worker (and Raft's heartbeats with it) that long.
//!
//! `cargo bench -p locktable --bench growth`
//!
//! Prints, for each, the five longest calls with the count of locks at
//! which each came, and the time the whole fill took.

use std::time::{Duration, Instant};

mod million;

use locktable::{Acquired, Held, LeaseRule, MonoTime, RebuildFrom, Table};
use million::{lock, request};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const N: u64 = 1_100_000;

/// Times `call(i)` for each `i` below [`N`]: the five longest, and the whole.
fn longest(what: &str, mut call: impl FnMut(u64)) {
    let mut calls: Vec<(Duration, u64)> = Vec::with_capacity(N as usize);
    let start = Instant::now();
    for i in 0..N {
        let t = Instant::now();
        call(i);
        calls.push((t.elapsed(), i));
    }
    let whole = start.elapsed();
    calls.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<String> = calls[..5]
        .iter()
        .map(|(d, i)| format!("{:.1} ms at {i}", d.as_secs_f64() * 1e3))
        .collect();
    println!(
        "{what}: whole fill {:.0} ms; longest calls: {}",
        whole.as_secs_f64() * 1e3,
        top.join(", ")
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let now = MonoTime::from_nanos(1 << 60);
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(now);
    let generation = table.generation();
    let empty = RebuildFrom {
        generation,
        epoch: 1,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: false,
    };
    table.rebuild(empty, now).expect("an empty rebuild");
    longest("table, grants", |i| {
        let Ok(Acquired::Granted(_)) = table.acquire(request(i), now) else {
            panic!("not granted")
        };
    });
    drop(table);
    let mut held = Held::new();
    longest("held, records", |i| held.record(lock(i, now)));
}
