//! `leasehold-bench sessions`: what a session's renewal costs over the wire
//! beside one plain lock's renewal, through each endpoint given, rounds
//! alternating in one invocation (docs/benchmarks.md, "Sessions").
//!
//! Each round, through each endpoint: one lock is taken and renewed back to
//! back for the round's seconds (`POST /v1/locks/renew`); then, for each
//! lock count, a session is opened, that many locks are taken in it through
//! the same endpoint (sets of 64 names), and the session is renewed back to
//! back (`POST /v1/sessions/renew`) for the round's seconds, then closed.
//! One client, one call at a time: the figures are latencies.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::percentile;

/// Names in each acquire call that fills a session (the API's most).
const SET: usize = 64;
/// Set calls in flight at once while filling a session.
const FILLERS: usize = 4;

/// Runs the rounds and prints one JSON line per measurement, then the
/// medians over the rounds and their ratios to the plain renewal.
pub async fn sessions(
    vias: Vec<(String, String)>,
    counts: Vec<usize>,
    seconds: u64,
    rounds: usize,
) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let seconds = Duration::from_secs(seconds);
    // (via, locks: 0 for the plain renewal, p50, p99)
    let mut rows: Vec<(String, usize, u64, u64)> = Vec::new();
    for round in 0..rounds {
        for (via, target) in &vias {
            let cases = std::iter::once(0).chain(counts.iter().copied());
            for n in cases {
                let row = match n {
                    0 => plain(&http, target, via, round, seconds).await,
                    n => session(&http, target, via, round, n, seconds).await,
                };
                println!("{row}");
                let (p50, p99) = (row["p50_us"].as_u64(), row["p99_us"].as_u64());
                rows.push((via.clone(), n, p50.unwrap_or(0), p99.unwrap_or(0)));
            }
        }
    }
    let median = |via: &str, n: usize, p99: bool| {
        let mut v: Vec<u64> = rows
            .iter()
            .filter(|r| r.0 == via && r.1 == n)
            .map(|r| if p99 { r.3 } else { r.2 })
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let ratio = |a: u64, b: u64| (a as f64 / b.max(1) as f64 * 100.0).round() / 100.0;
    for (via, _) in &vias {
        let plain = median(via, 0, false);
        let cases: Vec<Value> = counts
            .iter()
            .map(|&n| {
                let p50 = median(via, n, false);
                json!({
                    "locks": n,
                    "p50_us": p50,
                    "p99_us": median(via, n, true),
                    "ratio_to_plain": ratio(p50, plain),
                    "ratio_to_first_plain": ratio(p50, median(&vias[0].0, 0, false)),
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "label": "sessions: medians",
                "via": via,
                "plain": {"p50_us": plain, "p99_us": median(via, 0, true)},
                "session": cases,
            })
        );
    }
}

/// Posts `body` to `path` of `target`, answering the JSON of a 200.
async fn post(http: &reqwest::Client, target: &str, path: &str, body: &Value) -> Option<Value> {
    let answer = http
        .post(format!("{target}{path}"))
        .json(body)
        .send()
        .await
        .ok()?;
    if !answer.status().is_success() {
        return None;
    }
    answer.json().await.ok()
}

/// Posts a call that sets a measurement up (an acquire, an open): retried
/// for a few seconds while refused (an election on a busy machine), with
/// each refusal on stderr.
async fn setup(http: &reqwest::Client, target: &str, path: &str, body: &Value) -> Value {
    for _ in 0..50 {
        match http.post(format!("{target}{path}")).json(body).send().await {
            Ok(answer) if answer.status().is_success() => {
                if let Ok(answer) = answer.json().await {
                    return answer;
                }
            }
            Ok(answer) => {
                let status = answer.status();
                let text = answer.text().await.unwrap_or_default();
                eprintln!("{target}{path}: {status} {text}");
            }
            Err(e) => eprintln!("{target}{path}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{target}{path} refused throughout")
}

/// Calls `renew` back to back for `seconds`; answers the latencies of the
/// renewals `renew` says succeeded, and how many failed.
async fn loop_for<F, Fut>(seconds: Duration, mut renew: F) -> (Vec<u64>, u64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let (mut latencies, mut errors) = (Vec::new(), 0u64);
    let started = Instant::now();
    while started.elapsed() < seconds {
        let t0 = Instant::now();
        if renew().await {
            latencies.push(t0.elapsed().as_micros() as u64);
        } else {
            errors += 1;
        }
    }
    latencies.sort_unstable();
    (latencies, errors)
}

fn row(via: &str, round: usize, locks: usize, latencies: &[u64], errors: u64) -> Value {
    json!({
        "via": via,
        "round": round,
        "locks": locks,
        "kind": if locks == 0 { "plain" } else { "session" },
        "renewals": latencies.len(),
        "errors": errors,
        "p50_us": percentile(latencies, 0.5),
        "p99_us": percentile(latencies, 0.99),
    })
}

/// One plain lock, renewed back to back.
async fn plain(
    http: &reqwest::Client,
    target: &str,
    via: &str,
    round: usize,
    seconds: Duration,
) -> Value {
    let name = format!("sessions-bench/{via}/{round}/plain");
    let asked = json!({"name": name, "holder": "bench", "lease_ms": 30000});
    let granted = setup(http, target, "/v1/locks/acquire", &asked).await;
    let id = granted["lock"]["id"].clone();
    let renewal = json!({"name": name, "id": id});
    let (latencies, errors) = loop_for(seconds, || async {
        post(http, target, "/v1/locks/renew", &renewal)
            .await
            .is_some()
    })
    .await;
    post(http, target, "/v1/locks/release", &renewal).await;
    row(via, round, 0, &latencies, errors)
}

/// A session of `n` locks, renewed back to back.
async fn session(
    http: &reqwest::Client,
    target: &str,
    via: &str,
    round: usize,
    n: usize,
    seconds: Duration,
) -> Value {
    let open = json!({"ttl_ms": 30000, "holder": "bench"});
    let opened = setup(http, target, "/v1/sessions/open", &open).await;
    let id = opened["session"]["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let fill_started = Instant::now();
    let names: Vec<String> = (0..n)
        .map(|i| format!("sb/{via}/{round}/{n}/{i}"))
        .collect();
    let chunks: Vec<&[String]> = names.chunks(SET).collect();
    for group in chunks.chunks(FILLERS) {
        let calls = group.iter().map(|names| {
            let asked = json!({"names": names, "holder": "bench", "session": id});
            async move { setup(http, target, "/v1/locks/acquire", &asked).await }
        });
        futures::future::join_all(calls).await;
    }
    let fill_ms = fill_started.elapsed().as_millis() as u64;
    let renewal = json!({"id": id});
    let (latencies, errors) = loop_for(seconds, || async {
        // A renewal that does not reach every lock counts as failed.
        post(http, target, "/v1/sessions/renew", &renewal)
            .await
            .is_some_and(|a| a["session"]["locks"].as_u64() == Some(n as u64))
    })
    .await;
    let closed = post(http, target, "/v1/sessions/close", &renewal).await;
    let released = closed.and_then(|c| c["released"].as_u64());
    let mut row = row(via, round, n, &latencies, errors);
    row["fill_ms"] = json!(fill_ms);
    row["released"] = json!(released);
    row
}
