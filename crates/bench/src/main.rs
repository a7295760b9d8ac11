//! `leasehold-bench`: the same lock workloads against leasehold, etcd,
//! Redis, PostgreSQL and a bare HTTP handler, one JSON line per run.
//! `scripts/bench` starts the systems and prints the table.

mod frames;
mod sessions;
mod sets;
mod systems;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;
use systems::System;

#[derive(Parser)]
#[command(name = "leasehold-bench", about = "Lock workloads side by side")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Leasehold,
    /// leasehold's binary transport (the target is `host:port`).
    LeaseholdFrames,
    Bare,
    Redis,
    PgAdvisory,
    Pglock,
    EtcdLeasePerLock,
    EtcdLeasePerClient,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Workload {
    /// Acquire+release cycles on names no one else uses.
    Uncontended,
    /// All clients on one name, with blocking waits.
    Contended,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the bare handler: POST /acquire and /release answer a small
    /// JSON lock at once (the floor of any HTTP lock API).
    BareServer {
        /// Where to listen.
        #[arg(long)]
        listen: String,
    },
    /// Loop acquire+release through any of several endpoints (moving on
    /// when one fails) and print the longest gap without a grant: run it
    /// while the leader is killed.
    Gap {
        /// The system (leasehold, or etcd with a lease per client).
        #[arg(long, value_enum)]
        system: Kind,
        /// The endpoints, comma-separated http://host:port.
        #[arg(long, value_delimiter = ',')]
        targets: Vec<String>,
        /// How long to loop.
        #[arg(long, default_value_t = 8)]
        seconds: u64,
        /// A label for the row.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Take `count` locks with a long lease (64 clients) and keep them:
    /// for the memory and rebuild figures of a loaded speaker.
    Fill {
        /// A leasehold endpoint.
        #[arg(long)]
        target: String,
        /// How many locks.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Names start with this.
        #[arg(long, default_value = "fill/")]
        prefix: String,
    },
    /// Acquire sets of `names` names in one call and release them, beside
    /// the same with one name, alternating rounds in one invocation: what
    /// a set costs over the wire. One JSON line per round, then the
    /// medians and their ratio.
    Sets {
        /// A leasehold endpoint.
        #[arg(long)]
        target: String,
        /// Names in a set.
        #[arg(long, default_value_t = 8)]
        names: usize,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// How long each round measures.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Rounds of each size.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// How a set is released: `set`, in one call (`locks`; a node of
        /// a build before it answers 400), or `each`, one call per lock,
        /// at once (as before set releases).
        #[arg(long, value_enum, default_value_t = sets::Release::Set)]
        release: sets::Release,
    },
    /// Renew a session of each lock count back to back beside one plain
    /// lock's renewal, through each endpoint, alternating rounds in one
    /// invocation: what a session's renewal costs over the wire. One JSON
    /// line per measurement, then the medians and their ratios.
    Sessions {
        /// Endpoints as label=http://host:port, comma-separated (the
        /// ratios are also given against the first's plain renewal).
        #[arg(long, value_delimiter = ',', required = true)]
        via: Vec<String>,
        /// Locks in a session, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,1000")]
        locks: Vec<usize>,
        /// How long each measurement renews.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Run a workload and print one JSON line.
    Run {
        /// The system.
        #[arg(long, value_enum)]
        system: Kind,
        /// Its address: http://host:port, or a redis:// or postgres URL.
        #[arg(long)]
        target: String,
        /// The workload.
        #[arg(long, value_enum, default_value = "uncontended")]
        workload: Workload,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// How long to measure.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// A label for the row.
        #[arg(long, default_value = "")]
        label: String,
        /// Uncontended names start with this (two runs at once use two
        /// prefixes, so their clients do not share names).
        #[arg(long, default_value = "bench/")]
        prefix: String,
    },
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn bare_server(listen: &str) {
    use axum::routing::post;
    use axum::Json;
    let app = axum::Router::new()
        .route(
            "/acquire",
            post(|Json(body): Json<serde_json::Value>| async move {
                Json(json!({"lock": {"name": body["name"], "id": "01J0000000000000000000000", "fence": 1, "ttl_ms": 30000}}))
            }),
        )
        .route("/release", post(|Json(body): Json<serde_json::Value>| async move { Json(json!({"lock": {"name": body["name"]}})) }));
    let listener = tokio::net::TcpListener::bind(listen).await.expect("listen");
    axum::serve(listener, app).await.expect("serve");
}

async fn run(
    system: System,
    workload: Workload,
    clients: usize,
    seconds: u64,
    label: String,
    prefix: String,
) {
    let prefix = Arc::new(prefix);
    system.prepare().await.expect("prepare");
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let system = system.clone();
        let stop = stop.clone();
        let prefix = Arc::clone(&prefix);
        tasks.push(tokio::spawn(async move {
            let mut session = system.connect().await.expect("connect");
            let mut latencies = Vec::new();
            let mut cycles = 0u64;
            let mut errors = 0u64;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = match workload {
                    Workload::Uncontended => format!("{prefix}{c}/{}", i % 64),
                    Workload::Contended => "bench/contended".to_string(),
                };
                i += 1;
                let t0 = Instant::now();
                match session
                    .acquire(
                        &name,
                        Duration::from_secs(if workload == Workload::Contended {
                            10
                        } else {
                            0
                        }),
                    )
                    .await
                {
                    Ok(Some(token)) => {
                        latencies.push(t0.elapsed().as_micros() as u64);
                        if session.release(&name, &token).await.is_ok() {
                            cycles += 1;
                        } else {
                            errors += 1;
                        }
                    }
                    Ok(None) => {
                        // Held (only when the system cannot wait): try again.
                        tokio::task::yield_now().await;
                    }
                    Err(_) => errors += 1,
                }
            }
            (cycles, errors, latencies)
        }));
    }
    // Warm up, then measure a window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let warm = started.elapsed();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut cycles = 0;
    let mut errors = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (c, e, l) = t.await.expect("client");
        cycles += c;
        errors += e;
        latencies.extend(l);
    }
    latencies.sort_unstable();
    // Cycles over the whole run, with the warm-up in the denominator too:
    // a fair, slightly pessimistic rate.
    let rate = cycles as f64 / elapsed.as_secs_f64();
    let _ = warm;
    println!(
        "{}",
        json!({
            "label": label,
            "workload": match workload { Workload::Uncontended => "uncontended", Workload::Contended => "contended" },
            "clients": clients,
            "cycles_per_s": (rate * 10.0).round() / 10.0,
            "errors": errors,
            "p50_us": percentile(&latencies, 0.50),
            "p99_us": percentile(&latencies, 0.99),
            "max_us": latencies.last().copied().unwrap_or(0),
        })
    );
}

fn system_of(kind: Kind, target: String) -> System {
    match kind {
        Kind::Leasehold => System::Leasehold { endpoint: target },
        Kind::LeaseholdFrames => System::LeaseholdFrames { addr: target },
        Kind::Bare => System::Bare { endpoint: target },
        Kind::Redis => System::Redis { url: target },
        Kind::PgAdvisory => System::PgAdvisory { url: target },
        Kind::Pglock => System::Pglock { url: target },
        Kind::EtcdLeasePerLock => System::Etcd {
            endpoint: target,
            per_lock: true,
        },
        Kind::EtcdLeasePerClient => System::Etcd {
            endpoint: target,
            per_lock: false,
        },
    }
}

/// The longest time without a grant while looping through `targets`.
async fn gap(kind: Kind, targets: Vec<String>, seconds: u64, label: String) {
    const NAME: &str = "bench/failover";
    let stop = Instant::now() + Duration::from_secs(seconds);
    let mut at = 0usize;
    let mut session: Option<systems::Session> = None;
    let mut last = Instant::now();
    let mut longest = Duration::ZERO;
    let mut grants = 0u64;
    // A grant not yet released, and when its lease ends anyway.
    let mut unreleased: Option<(systems::Token, Instant)> = None;
    while Instant::now() < stop {
        let Some(s) = session.as_mut() else {
            let system = system_of(kind, targets[at % targets.len()].clone());
            session = tokio::time::timeout(Duration::from_millis(500), system.connect())
                .await
                .ok()
                .and_then(Result::ok);
            if session.is_none() {
                at += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            continue;
        };
        let ok = if let Some((token, lease_end)) = &unreleased {
            // Release as a careful client does: through another endpoint
            // if this one fails, until it is answered or the lease has run
            // out anyway.
            let released = tokio::time::timeout(Duration::from_millis(500), s.release(NAME, token))
                .await
                .is_ok_and(|r| r.is_ok());
            if released || Instant::now() >= *lease_end {
                unreleased = None;
            }
            released
        } else {
            match tokio::time::timeout(Duration::from_millis(500), s.acquire(NAME, Duration::ZERO))
                .await
            {
                Ok(Ok(Some(token))) => {
                    let now = Instant::now();
                    longest = longest.max(now - last);
                    last = now;
                    grants += 1;
                    unreleased = Some((token, now + systems::LEASE));
                    true
                }
                // Unavailable, or held by a grant whose release was lost.
                _ => false,
            }
        };
        if !ok {
            session = None;
            at += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // A system that never came back is a gap to the end.
    longest = longest.max(last.elapsed());
    println!(
        "{}",
        json!({"label": label, "longest_gap_ms": longest.as_millis() as u64, "grants": grants})
    );
}

/// Takes `count` distinct locks with a 10-minute lease.
async fn fill(target: String, count: u64, prefix: String) {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let next = next.clone();
        let target = target.clone();
        let prefix = prefix.clone();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client");
            let mut failed = std::collections::BTreeMap::<String, u64>::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return failed;
                }
                let body =
                    json!({"name": format!("{prefix}{i:08}"), "holder": "bench", "lease_ms": 600_000});
                let why = match http
                    .post(format!("{target}/v1/locks/acquire"))
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => continue,
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        let message: String =
                            body["message"].as_str().unwrap_or("").chars().take(100).collect();
                        format!("{status} {}: {message}", body["error"].as_str().unwrap_or("?"))
                    }
                    Err(e) if e.is_timeout() => "timed out".to_string(),
                    Err(e) if e.is_connect() => "could not connect".to_string(),
                    Err(_) => "no answer".to_string(),
                };
                *failed.entry(why).or_default() += 1;
            }
        }));
    }
    // Why each acquire that failed did, counted.
    let mut why = std::collections::BTreeMap::<String, u64>::new();
    for t in tasks {
        for (reason, n) in t.await.expect("filler") {
            *why.entry(reason).or_default() += n;
        }
    }
    let failed: u64 = why.values().sum();
    println!(
        "{}",
        json!({"label": "fill", "locks": count, "failed": failed, "why": why, "seconds": started.elapsed().as_secs()})
    );
}

#[tokio::main]
async fn main() {
    match Cli::parse().command {
        Command::BareServer { listen } => bare_server(&listen).await,
        Command::Run {
            system,
            target,
            workload,
            clients,
            seconds,
            label,
            prefix,
        } => {
            let system = system_of(system, target);
            run(system, workload, clients, seconds, label, prefix).await
        }
        Command::Gap {
            system,
            targets,
            seconds,
            label,
        } => gap(system, targets, seconds, label).await,
        Command::Fill {
            target,
            count,
            prefix,
        } => fill(target, count, prefix).await,
        Command::Sets {
            target,
            names,
            clients,
            seconds,
            rounds,
            release,
        } => sets::sets(target, names, clients, seconds, rounds, release).await,
        Command::Sessions {
            via,
            locks,
            seconds,
            rounds,
        } => {
            let vias = via
                .iter()
                .map(|v| match v.split_once('=') {
                    Some((label, url)) => (label.to_owned(), url.to_owned()),
                    None => (v.clone(), v.clone()),
                })
                .collect();
            sessions::sessions(vias, locks, seconds, rounds).await
        }
    }
}
