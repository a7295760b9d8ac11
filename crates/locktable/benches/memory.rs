//! Resident memory of one million held locks, measured from the process's
//! own resident set (allocator overhead included): in the speaker's table,
//! in a node's `Held`, and, for reference, in the map of id to `Lock` that
//! `Held` was before it kept its records in the table's slots.
//!
//! `cargo bench -p locktable --bench memory`
//!
//! Each figure is measured in a fresh process (this one, run again), so
//! memory one layout freed cannot be reused by the next.

use std::collections::HashMap;
use std::process::Command;

mod million;

use locktable::{Acquired, Held, LeaseRule, Lock, LockId, MonoTime, RebuildFrom, Table};
use million::{lock, request};

const N: u64 = 1_000_000;
const ONE: &str = "LOCKTABLE_MEMORY_ONE";

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("linux /proc");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Fills one layout with `N` locks and returns the resident bytes it took.
fn measure(what: &str) -> u64 {
    let now = MonoTime::from_nanos(1 << 60);
    match what {
        "table" => {
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
                        seen_all: false,
                    },
                    now,
                )
                .unwrap();
            let before = resident_bytes();
            for i in 0..N {
                let Ok(Acquired::Granted(_)) = table.acquire(request(i), now) else {
                    panic!("not granted")
                };
            }
            let after = resident_bytes();
            assert_eq!(table.len(), N as usize);
            after - before
        }
        "held" => {
            let mut held = Held::new();
            let before = resident_bytes();
            for i in 0..N {
                held.record(lock(i, now));
            }
            let after = resident_bytes();
            assert_eq!(held.len(), N as usize);
            after - before
        }
        "map" => {
            let mut map: HashMap<LockId, Lock> = HashMap::new();
            let before = resident_bytes();
            for i in 0..N {
                let l = lock(i, now);
                map.insert(l.id, l);
            }
            let after = resident_bytes();
            assert_eq!(map.len(), N as usize);
            after - before
        }
        other => panic!("no layout {other}"),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` asks benches to list themselves.
    }
    if let Ok(what) = std::env::var(ONE) {
        println!("{}", measure(&what));
        return;
    }
    let me = std::env::current_exe().expect("this bench's path");
    for (what, label) in [
        ("table", "the speaker's table"),
        ("held", "a node's Held"),
        ("map", "HashMap<LockId, Lock> (Held before, for reference)"),
    ] {
        let out = Command::new(&me).env(ONE, what).output().expect("run");
        assert!(out.status.success(), "{what}: {out:?}");
        let bytes: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("bytes");
        println!(
            "1M held locks (name 12 bytes, holder 8) in {label}: {:.1} MB resident, {} bytes per lock",
            bytes as f64 / 1e6,
            bytes / N
        );
    }
}
