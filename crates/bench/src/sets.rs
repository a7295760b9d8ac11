//! `leasehold-bench sets`: what a set of names costs over the wire beside
//! one name, rounds alternating in one invocation (docs/benchmarks.md,
//! "Sets of names"): each client acquires a set of names of its own in one
//! call, then releases it, in one call (`locks`) or one call per lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::json;

use crate::percentile;

/// How a set's locks are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Release {
    /// All in one call (`POST /v1/locks/release` with `locks`).
    Set,
    /// One call per lock, all at once.
    Each,
}

/// The bodies that release `locks` (one name's alone, as ever).
fn release_bodies(locks: &[serde_json::Value], release: Release) -> Vec<serde_json::Value> {
    let one = |lock: &serde_json::Value| json!({"name": lock["name"], "id": lock["id"]});
    match (locks.len(), release) {
        (1, _) | (_, Release::Each) => locks.iter().map(one).collect(),
        (_, Release::Set) => vec![json!({"locks": locks.iter().map(one).collect::<Vec<_>>()})],
    }
}

/// One round of [`sets`]: `clients` clients each acquiring sets of `size`
/// names of their own (one call) and releasing them (as `release` says)
/// for `seconds`; answers the round's JSON line.
async fn sets_round(
    target: &str,
    size: usize,
    clients: usize,
    seconds: u64,
    (round, release): (usize, Release),
) -> serde_json::Value {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let stop = stop.clone();
        let target = target.to_string();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client");
            let (mut acquire_us, mut cycle_us, mut errors) = (Vec::new(), Vec::new(), 0u64);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let names: Vec<String> = (0..size)
                    .map(|n| format!("sets/{round}/{size}/{c}/{}/{n}", i % 64))
                    .collect();
                let body = match size {
                    1 => json!({"name": names[0], "lease_ms": 30000}),
                    _ => json!({"names": names, "lease_ms": 30000}),
                };
                let t0 = Instant::now();
                let answer = http
                    .post(format!("{target}/v1/locks/acquire"))
                    .json(&body)
                    .send()
                    .await;
                let Ok(answer) = answer else {
                    errors += 1;
                    continue;
                };
                let Ok(granted) = answer.json::<serde_json::Value>().await else {
                    errors += 1;
                    continue;
                };
                acquire_us.push(t0.elapsed().as_micros() as u64);
                let locks = match granted["locks"].as_array() {
                    Some(locks) => locks.clone(),
                    None => vec![granted["lock"].clone()],
                };
                let releases = release_bodies(&locks, release).into_iter().map(|body| {
                    http.post(format!("{target}/v1/locks/release"))
                        .json(&body)
                        .send()
                });
                let released = futures::future::join_all(releases).await;
                if released
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(|r| r.status().is_success()))
                {
                    cycle_us.push(t0.elapsed().as_micros() as u64);
                } else {
                    errors += 1;
                }
            }
            (acquire_us, cycle_us, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut acquire_us, mut cycle_us, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (a, c, e) = t.await.expect("client");
        acquire_us.extend(a);
        cycle_us.extend(c);
        errors += e;
    }
    acquire_us.sort_unstable();
    cycle_us.sort_unstable();
    json!({
        "names": size,
        "round": round,
        "clients": clients,
        "sets_per_s": (cycle_us.len() as f64 / seconds as f64).round(),
        "errors": errors,
        "acquire_p50_us": percentile(&acquire_us, 0.5),
        "acquire_p99_us": percentile(&acquire_us, 0.99),
        "cycle_p50_us": percentile(&cycle_us, 0.5),
    })
}

/// Sets of `size` names beside one name, rounds alternating, each set
/// released as `release` says; prints each round, then the medians of each
/// size and the ratios.
pub async fn sets(
    target: String,
    size: usize,
    clients: usize,
    seconds: u64,
    rounds: usize,
    release: Release,
) {
    let mut rows: Vec<(usize, serde_json::Value)> = Vec::new();
    for round in 0..rounds {
        for n in [1, size] {
            let row = sets_round(&target, n, clients, seconds, (round, release)).await;
            println!("{row}");
            rows.push((n, row));
        }
    }
    let median = |n: usize, key: &str| {
        let mut v: Vec<u64> = rows
            .iter()
            .filter(|(m, _)| *m == n)
            .filter_map(|(_, r)| r[key].as_f64().map(|x| x as u64))
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let ratio = |key: &str| {
        let one = median(1, key).max(1) as f64;
        (median(size, key) as f64 / one * 100.0).round() / 100.0
    };
    println!(
        "{}",
        json!({
            "label": "sets: medians",
            "release": format!("{release:?}").to_lowercase(),
            "one_name": {"acquire_p50_us": median(1, "acquire_p50_us"), "cycle_p50_us": median(1, "cycle_p50_us"), "per_s": median(1, "sets_per_s")},
            "set": {"names": size, "acquire_p50_us": median(size, "acquire_p50_us"), "cycle_p50_us": median(size, "cycle_p50_us"), "per_s": median(size, "sets_per_s")},
            "acquire_ratio": ratio("acquire_p50_us"),
            "cycle_ratio": ratio("cycle_p50_us"),
        })
    );
}
