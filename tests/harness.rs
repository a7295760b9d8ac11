//! The failover playground as a harness uses it: `leasehold up` runs a
//! local cluster of child processes, `leasehold chaos` kills, restarts,
//! pauses, partitions and heals it, and the failover history says what
//! each failover cost. Over real processes, as docs/harness.md shows.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PATIENCE: Duration = Duration::from_secs(30);

/// A base port with the next two free too.
fn three_free_ports() -> u16 {
    support::free_ports(3)
}

/// `leasehold chaos ARGS` against the `up` in `dir`: its output, or why not.
fn chaos(dir: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("chaos")
        .args(args)
        .env("LEASEHOLD_UP", dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => Ok(text),
        _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

struct Up {
    child: std::process::Child,
    addrs: Vec<String>,
    http: reqwest::Client,
}

impl Drop for Up {
    /// SIGTERM, as a harness stops `up` (it stops its nodes), then a kill
    /// after 10 s; the nodes die with `up` either way.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Up {
    async fn get(&self, node: u64, path: &str) -> Option<Value> {
        let url = format!("http://{}{path}", self.addrs[node as usize - 1]);
        let answer = self
            .http
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        answer.json().await.ok()
    }

    /// Waits for a rebuilt speaker other than `not`.
    async fn speaker(&self, not: Option<u64>) -> u64 {
        let start = Instant::now();
        loop {
            for id in 1..=3 {
                if Some(id) == not {
                    continue;
                }
                if let Some(c) = self.get(id, "/v1/cluster").await {
                    if c["leader"] == json!(id) && c["rebuilt"] == json!(true) {
                        return id;
                    }
                }
            }
            assert!(start.elapsed() < PATIENCE, "no speaker but {not:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `check` holds of node `id`'s `/v1/cluster`.
    async fn wait_view(&self, id: u64, what: &str, check: impl Fn(&Value) -> bool) {
        let start = Instant::now();
        loop {
            if let Some(view) = self.get(id, "/v1/cluster").await {
                if check(&view) {
                    return;
                }
            }
            assert!(start.elapsed() < PATIENCE, "node {id} never {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn member_state(view: &Value, id: u64) -> Value {
    view["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["id"] == json!(id)))
        .map(|m| m["state"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_breaks_a_local_cluster_and_reads_what_each_failover_cost() {
    let dir = tempfile::tempdir().unwrap();
    let up_dir = dir.path().join("up");
    let base = three_free_ports();
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["up", "--nodes", "3", "--base-port", &base.to_string()])
        .arg("--data-dir")
        .arg(&up_dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = Up {
        child,
        addrs: (0..3).map(|i| format!("127.0.0.1:{}", base + i)).collect(),
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
    };
    let first = up.speaker(None).await;

    // Kill the speaker: another takes over, and its history says what the
    // failover cost.
    let killed = chaos(&up_dir, &["kill-speaker"]).unwrap();
    assert!(killed.contains(&format!("killed node {first}")), "{killed}");
    let second = up.speaker(Some(first)).await;
    let status = chaos(&up_dir, &["status"]).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with(&format!("{first} ")) && l.contains("killed")),
        "{status}"
    );
    let start = Instant::now();
    let report = loop {
        let history = up
            .get(second, "/v1/cluster/history")
            .await
            .unwrap_or_default();
        let found = history["rebuilds"].as_array().and_then(|r| {
            r.iter()
                .find(|e| {
                    e["members_missing"]
                        .as_array()
                        .is_some_and(|m| m.contains(&json!(first)))
                })
                .cloned()
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no rebuild missing {first}: {history}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        report["took_ms"].as_u64().is_some() && report["at"].is_string(),
        "{report}"
    );

    // Restart it; it serves again.
    chaos(&up_dir, &["restart", &first.to_string()]).unwrap();
    up.wait_view(second, "saw the restarted node answer", |v| {
        member_state(v, first) == json!("follower")
    })
    .await;

    // Cut the speaker off from one follower, then heal.
    let cut = (1..=3).find(|n| *n != second).unwrap();
    chaos(
        &up_dir,
        &["partition", &second.to_string(), &cut.to_string()],
    )
    .unwrap();
    up.wait_view(second, "saw the partition", |v| {
        member_state(v, cut) == json!("unreachable")
    })
    .await;
    let status = chaos(&up_dir, &["status"]).unwrap();
    let row = |id: u64| {
        status
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for node {id}:\n{status}"))
            .to_string()
    };
    assert!(
        row(second).contains(&format!("running    cut off from {cut}")),
        "{status}"
    );
    assert!(
        row(cut).contains(&format!("cut off from {second}")),
        "{status}"
    );
    assert!(
        status.contains(&format!("speaker: node {second}")),
        "{status}"
    );
    chaos(&up_dir, &["heal"]).unwrap();
    up.wait_view(second, "saw the link healed", |v| {
        member_state(v, cut) == json!("follower")
    })
    .await;
    chaos(&up_dir, &["slow", "1", "2", "20"]).unwrap();
    chaos(&up_dir, &["heal"]).unwrap();

    // Pause the speaker: the others elect another; resumed, it follows.
    chaos(&up_dir, &["pause", &second.to_string()]).unwrap();
    let third = up.speaker(Some(second)).await;
    let status = chaos(&up_dir, &["status"]).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with(&format!("{second} ")) && l.contains("paused")),
        "{status}"
    );
    chaos(&up_dir, &["resume", &second.to_string()]).unwrap();
    up.wait_view(second, "followed the new speaker", |v| {
        v["leader"] == json!(third)
    })
    .await;

    // Bad input is refused, and says why.
    let refused = chaos(&up_dir, &["kill", "9"]).unwrap_err();
    assert!(refused.contains("no node 9"), "{refused}");

    // SIGTERM stops `up` and every node it started.
    let mut up = up;
    let pid = up.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = up.child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < PATIENCE, "up did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");
    for addr in &up.addrs {
        assert!(
            std::net::TcpListener::bind(addr.as_str()).is_ok(),
            "{addr} still taken"
        );
    }
}

/// `up --base-port 0` puts each node on a port the system chose (named in
/// up.json), passes what follows `--` to every node's `serve`, and the
/// client faults of `chaos` act on one node's client calls only: `refuse`
/// answers them 503 unserved until `heal`, `lag` holds each answer back,
/// `lose-answer` serves the next call and never answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_chooses_ports_passes_serve_arguments_and_chaos_breaks_client_calls() {
    let dir = tempfile::tempdir().unwrap();
    let up_dir = dir.path().join("up");
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["up", "--nodes", "3", "--base-port", "0", "--data-dir"])
        .arg(&up_dir)
        .args(["--", "--default-lease", "7s"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let state: Value = loop {
        if let Some(state) = std::fs::read_to_string(up_dir.join("up.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            break state;
        }
        assert!(start.elapsed() < PATIENCE, "no up.json");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let addrs: Vec<String> = (1..=3)
        .map(|id| {
            state["nodes"][id.to_string()]["addr"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let ports: std::collections::BTreeSet<&str> = addrs
        .iter()
        .map(|a| a.rsplit(':').next().unwrap())
        .collect();
    assert_eq!(ports.len(), 3, "three ports: {addrs:?}");
    assert!(!ports.contains("0"), "{addrs:?}");
    let up = Up {
        child,
        addrs,
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
    };
    let speaker = up.speaker(None).await;
    let node = speaker % 3 + 1; // a follower
    let url = |path: &str| format!("http://{}{path}", up.addrs[node as usize - 1]);
    let acquire = |name: &str| {
        up.http
            .post(url("/v1/locks/acquire"))
            .json(&json!({"name": name, "holder": "harness"}))
            .timeout(Duration::from_secs(5))
            .send()
    };

    // The serve argument: a lease asked for by no one is 7 s long.
    let granted: Value = acquire("first").await.unwrap().json().await.unwrap();
    assert_eq!(granted["lock"]["lease_ms"], json!(7000), "{granted}");

    chaos(&up_dir, &["refuse", &node.to_string()]).unwrap();
    let refused = acquire("refused").await.unwrap();
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], json!("no_leader"), "{body}");
    assert!(up
        .get(node, "/v1/locks/refused")
        .await
        .is_some_and(|v| v["error"] == json!("no_leader")));
    assert!(
        up.get(speaker, "/v1/locks/refused")
            .await
            .is_some_and(|v| v["error"] == json!("not_held")),
        "not served"
    );
    assert!(chaos(&up_dir, &["status"])
        .unwrap()
        .contains("refuses clients"));
    chaos(&up_dir, &["heal"]).unwrap();

    chaos(&up_dir, &["lag", &node.to_string(), "800ms"]).unwrap();
    let sent = Instant::now();
    assert_eq!(acquire("lagged").await.unwrap().status(), 200);
    assert!(
        sent.elapsed() >= Duration::from_millis(800),
        "{:?}",
        sent.elapsed()
    );
    chaos(&up_dir, &["lag", &node.to_string(), "0"]).unwrap();

    chaos(&up_dir, &["lose-answer", &node.to_string()]).unwrap();
    let lost = up
        .http
        .post(url("/v1/locks/acquire"))
        .json(&json!({"name": "unanswered", "holder": "harness"}))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(lost.is_err_and(|e| e.is_timeout()), "no answer");
    // It was served, and only the one answer was lost.
    let held: Value = up
        .http
        .get(url("/v1/locks/unanswered"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(held["lock"]["holder"], json!("harness"), "{held}");
    assert_eq!(acquire("answered").await.unwrap().status(), 200);
}

/// A harness that kills `up` outright (`kill -9`: a test runner's timeout,
/// a crashed script) leaves no node behind: each dies with `up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_die_with_up_when_it_is_killed() {
    let cluster = crate::support::up::UpCluster::start(&json!({ "nodes": 3 })).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for addr in cluster.addrs.values() {
        let alive = http.get(format!("http://{addr}/healthz")).send().await;
        assert!(alive.is_ok_and(|a| a.status() == 200), "{addr} serves");
    }
    cluster.kill_up();
    let start = Instant::now();
    for addr in cluster.addrs.values() {
        loop {
            let answer = http
                .get(format!("http://{addr}/healthz"))
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if answer.is_err() {
                break;
            }
            assert!(start.elapsed() < PATIENCE, "node {addr} outlived up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
