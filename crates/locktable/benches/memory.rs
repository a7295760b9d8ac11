//! Resident memory of one million held locks, measured from the process's
//! own resident set (allocator overhead included).
//!
//! `cargo bench -p locktable --bench memory`

use std::time::Duration;

use locktable::{Acquired, LeaseRule, LockId, MonoTime, RebuildFrom, Request, Table};

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("linux /proc");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` asks benches to list themselves.
    }
    const N: u64 = 1_000_000;
    let now = MonoTime::from_nanos(1 << 60);
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(now);
    let generation = table.generation();
    table
        .rebuild(
            RebuildFrom {
                generation,
                epoch: 1,
                locks: vec![],
                hold_new_grants_until: None,
            },
            now,
        )
        .unwrap();
    let before = resident_bytes();
    for i in 0..N {
        let request = Request {
            name: format!("jobs/{i:07}"),
            id: LockId::from_parts(1_764_000_000_000 + i, u128::from(i) * 0x9E37_79B9),
            node: 1 + i % 5,
            holder: "worker-7".into(),
            lease: Some(Duration::from_secs(30)),
            wait: Duration::ZERO,
            data: None,
        };
        let Ok(Acquired::Granted(_)) = table.acquire(request, now) else {
            panic!("not granted")
        };
    }
    let after = resident_bytes();
    assert_eq!(table.len(), N as usize);
    println!(
        "1M held locks (name 12 bytes, holder 8): {:.1} MB resident, {} bytes per lock",
        (after - before) as f64 / 1e6,
        (after - before) / N
    );
}
