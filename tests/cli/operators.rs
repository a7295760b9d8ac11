//! What operators run: `status` after a failure and beside a cut-off
//! speaker, `serve --config`, `get`, `unlock`, `elect --observe/--wait`,
//! `member --timeout`, a `lock` whose endpoints cannot be reached saying so.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{leasehold, run};
use crate::support::{self, Cluster, PATIENCE};

/// `status` right after the speaker is killed, the dead node listed
/// first: it answers from whichever node answers first, well within the
/// client's timeouts, and never names a dead speaker without saying that
/// it does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_answers_at_once_after_the_speaker_dies() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let mut order = vec![speaker];
    order.extend(cluster.others(speaker));
    cluster.kill(speaker);
    let start = Instant::now();
    loop {
        let started = Instant::now();
        let out = run(leasehold(&cluster, &order, &["status"]));
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            took < Duration::from_secs(8),
            "status took {took:?} (each node is given a second)"
        );
        assert!(
            stdout.contains(&format!("{speaker}  ")),
            "the dead node is listed: {stdout}"
        );
        match out.status.code() {
            // Until the survivors elect another, no speaker serves: said,
            // and exit 69, as `etcdctl endpoint health` fails.
            Some(69) => assert!(
                stderr.contains("did not answer") || stderr.contains("no speaker"),
                "{stderr}"
            ),
            Some(0) => {
                assert!(
                    !stdout.contains(&format!("speaker: node {speaker} ")),
                    "a dead speaker is never shown serving: {stdout}"
                );
                break;
            }
            other => panic!("status exited {other:?}: {stdout}{stderr}"),
        }
        assert!(start.elapsed() < PATIENCE, "never a serving speaker");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A speaker cut off from the other members still answers clients, and
/// says it speaks in its old term: `status` never shows it, whichever
/// endpoint answers first, but the speaker of the highest term a quorum
/// backs; `-o json` says the same in one document. With a quorum down,
/// no speaker serves: exit 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_speaker_a_quorum_backs_never_a_cut_off_one() {
    let mut cluster = Cluster::start_with(3, &["--chaos"]).await;
    let (old, _) = cluster.speaker().await;
    let others = cluster.others(old);
    cluster.set_plan(old, json!({"drop_to": others})).await;
    for id in &others {
        cluster.set_plan(*id, json!({"drop_to": [old]})).await;
    }
    let (new, _) = cluster.speaker_other_than(Some(old)).await;
    let mut order = vec![old];
    order.extend(others.iter().copied());
    for _ in 0..5 {
        let out = run(leasehold(&cluster, &order, &["status"]));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        assert!(
            stdout.starts_with(&format!("speaker: node {new} ")),
            "the backed speaker, not the cut-off node {old}: {stdout}"
        );
    }
    let out = run(leasehold(&cluster, &order, &["status", "-o", "json"]));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["serving"], json!(true), "{doc}");
    assert_eq!(doc["speaker"], json!(new), "{doc}");
    assert_eq!(doc["view"]["node"], json!(new), "{doc}");
    // A quorum down: no speaker serves.
    for id in others {
        cluster.kill(id);
    }
    let out = run(leasehold(&cluster, &order, &["status"]));
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `serve --config FILE`: its keys are the flags' names; a flag wins over
/// its `LEASEHOLD_*` variable, which wins over the file, which wins over
/// the default; an unknown key is refused with its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_a_config_file_under_the_environment_and_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let addr = support::free_addr();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "max-lease = 4000\nmax-leese = 5000\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("max-leese"), "{stderr}");

    let file = dir.path().join("node.toml");
    std::fs::write(
        &file,
        format!(
            "id = 1\nlisten = \"{addr}\"\npeers = [\"1={addr}\"]\ncluster_token = \"t\"\n\
             max-lease = 4000\ndefault-lease = 3000\n"
        ),
    )
    .unwrap();
    let mut node = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--max-lease", "4800"])
        .env("LEASEHOLD_MAX_LEASE", "4400")
        .env("LEASEHOLD_DEFAULT_LEASE", "2000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let acquire = |name: &'static str, lease: Option<u64>| {
        let http = http.clone();
        let url = format!("http://{addr}/v1/locks/acquire");
        async move {
            let mut body = serde_json::json!({ "name": name });
            if let Some(lease) = lease {
                body["lease_ms"] = lease.into();
            }
            let start = Instant::now();
            loop {
                if let Ok(r) = http.post(&url).json(&body).send().await {
                    if r.status() == 200 {
                        let v: serde_json::Value = r.json().await.unwrap();
                        return v["lock"]["lease_ms"].as_u64().unwrap();
                    }
                }
                assert!(start.elapsed() < support::PATIENCE, "never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let default = acquire("cfg/default", None).await;
    let longest = acquire("cfg/long", Some(60_000)).await;
    let _ = node.kill();
    let _ = node.wait();
    assert_eq!(default, 2000, "the environment wins over the file");
    assert_eq!(longest, 4800, "the flag wins over the environment");
}

/// Reads lines from `child`'s stdout until one contains `wanted`.
fn read_until(child: &mut std::process::Child, wanted: &str) -> String {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(wanted) {
            return seen;
        }
    }
    panic!("no line with {wanted:?} in:\n{seen}");
}

/// The commands people know from etcdctl and consul: `get`, `unlock`,
/// `elect --observe` and `elect --wait`, with exit codes for what went
/// wrong, and a lease the cluster shortened said out loud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_unlock_observe_and_wait_as_operators_use_them() {
    let cluster = Cluster::start_with(3, &["--max-lease", "5000", "--default-lease", "5000"]).await;
    let all = [1, 2, 3];

    let out = run(leasehold(
        &cluster,
        &all,
        &["lock", "cli/clamp", "--lease", "9000", "--", "true"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("granted a 5000 ms lease"), "{stderr}");
    for bad in [
        vec!["lock", "cli/x", "--lease", "1", "--", "true"],
        vec!["lock", "cli/x", "--endpoints", "::bad::", "--", "true"],
    ] {
        let out = run(leasehold(&cluster, &all, &bad));
        assert_eq!(
            out.status.code(),
            Some(64),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // An operator frees a lock someone holds.
    let mut holder = leasehold(
        &cluster,
        &all,
        &["lock", "cli/op", "--holder", "h1", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    let out = loop {
        let out = run(leasehold(&cluster, &all, &["get", "cli/op"]));
        if out.status.code() == Some(0) {
            break out;
        }
        assert!(start.elapsed() < support::PATIENCE, "never held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(String::from_utf8_lossy(&out.stdout).contains("h1"));
    let out = run(leasehold(&cluster, &all, &["unlock", "cli/op"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("released cli/op"));
    assert_eq!(
        holder.wait().unwrap().code(),
        Some(75),
        "its holder learns it lost the lock"
    );
    let out = run(leasehold(&cluster, &all, &["get", "cli/op"]));
    assert_eq!(out.status.code(), Some(1));
    let out = run(leasehold(&cluster, &all, &["unlock", "cli/none"]));
    assert_eq!(out.status.code(), Some(1));

    // A leader; an observer sees it; a second candidate gives up after
    // its wait.
    let mut leader = leasehold(
        &cluster,
        &all,
        &["elect", "cli/e", "--value", "first", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut observer = leasehold(&cluster, &all, &["elect", "cli/e", "--observe"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    read_until(&mut observer, "leader: first");
    let out = run(leasehold(
        &cluster,
        &all,
        &[
            "elect", "cli/e", "--value", "second", "--wait", "500", "--", "true",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(73),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SIGTERM: the leader stops its command and resigns.
    let pid = leader.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let _ = leader.wait();
    let _ = observer.kill();
    let _ = observer.wait();
}

/// `member` honours `--timeout` and names why no node could make the
/// change.
#[test]
fn member_gives_up_within_its_timeout_naming_the_cause() {
    let dead = support::free_addr();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "member",
            "remove",
            "3",
            "--timeout",
            "2s",
            "--endpoints",
            &dead,
        ])
        .args(["--cluster-token", "t"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
    assert!(stderr.contains("within 2s"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// A `lock` whose endpoints cannot be reached does not wait in silence: once
/// no node has served it for the client's retry window (10 s) it says so
/// on stderr, and goes on waiting for its lock.
#[test]
fn lock_says_so_when_no_node_answers_while_it_waits() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["lock", "cli/nowhere", "--", "true"])
        .env("LEASEHOLD_ENDPOINTS", &endpoint)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = super::Stderr::watch(&mut waiting);
    stderr.wait_for(
        "leasehold: warning: no node could serve the call",
        Duration::from_secs(60),
    );
    let said = stderr.text();
    assert!(said.contains("not sent"), "says why: {said}");
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "still waiting for its lock"
    );
    let _ = waiting.kill();
    let _ = waiting.wait();
}
