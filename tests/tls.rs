//! TLS over real `leasehold serve` processes: a cluster whose members speak
//! mutual TLS forms, serves and fails over; curl with the CA reaches it
//! and without it does not; plain HTTP to the TLS port is refused as JSON;
//! a peer with a certificate from another CA can neither join nor vote;
//! certificates are read again on SIGHUP.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{fence, https_client, make_certs, Cluster, PATIENCE, TOKEN};

/// `curl -s URL` with `args`: its exit code and what it printed.
fn curl(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--noproxy", "*"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_forms_serves_and_fails_over() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node-1", "node-2", "node-3"]);
    let mut cluster = Cluster::start_tls(3, certs.path(), &[]).await;
    let (speaker, term) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let lease = json!({ "lease_ms": 30000 });
    let through_speaker = cluster
        .must_acquire(speaker, "jobs/tls-speaker", lease.clone())
        .await;
    let through_follower = cluster
        .must_acquire(follower, "jobs/tls-follower", lease)
        .await;

    // curl with the CA reaches the node; without it, it cannot verify it.
    let ca = certs.path().join("ca.pem").display().to_string();
    let url = cluster.url(speaker, "/v1/cluster");
    let (code, out) = curl(&url, &["--cacert", &ca]);
    assert_eq!(code, Some(0), "curl with the CA: {out}");
    let view: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(view["leader"], json!(speaker), "{view}");
    let (code, _) = curl(&url, &[]);
    assert_ne!(code, Some(0), "curl without the CA must fail");

    // Plain HTTP to the TLS port: a JSON 400, not a hang or garbage.
    let plain = format!("http://{}/v1/cluster", cluster.addrs[&speaker]);
    let (code, out) = curl(&plain, &["-w", "\n%{http_code}"]);
    assert_eq!(code, Some(0), "{out}");
    let (body, status) = out.rsplit_once('\n').unwrap();
    assert_eq!(status, "400", "{out}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"], json!("bad_request"), "{body}");

    // The CLI, through the client library, with --tls-ca (or
    // LEASEHOLD_TLS_CA); without it a bare endpoint is plain HTTP, and the
    // node says to use https.
    let endpoints = cluster
        .addrs
        .values()
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    let leasehold = |args: &[&str], ca: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .arg(args[0])
            .args(["--endpoints", &endpoints])
            .args(&args[1..]);
        if let Some(ca) = ca {
            command.env("LEASEHOLD_TLS_CA", ca);
        }
        let out = command.output().expect("run leasehold");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, out) = leasehold(&["status"], Some(&ca));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("speaker: node {speaker}")), "{out}");
    let (code, out) = leasehold(&["lock", "jobs/tls-cli", "--", "true"], Some(&ca));
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = leasehold(&["locks"], None);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("https"), "{out}");

    // The speaker dies; the survivors elect another over TLS, and both
    // locks stay their holders' with their ids and fences.
    cluster.kill(speaker);
    let (next, next_term) = cluster.speaker_other_than(Some(speaker)).await;
    assert!(next_term > term, "a new term: {next_term} after {term}");
    for lock in [&through_speaker, &through_follower] {
        let body = json!({ "name": lock["name"], "id": lock["id"] });
        let (status, renewed) = cluster.post_settled(next, "/v1/locks/renew", body).await;
        assert_eq!(
            status, 200,
            "{} renewed after the failover: {renewed}",
            lock["name"]
        );
        assert_eq!(renewed["lock"]["id"], lock["id"]);
        assert_eq!(fence(&renewed["lock"]), fence(lock));
    }
    let (status, refused) = cluster.acquire(next, "jobs/tls-speaker", json!({})).await;
    assert_eq!(status, 409, "still held: {refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_a_certificate_from_another_ca_can_neither_join_nor_vote() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node-1", "node-2", "node-3"]);
    let foreign = tempfile::tempdir().unwrap();
    make_certs(foreign.path(), &["node-4"]);
    let mut cluster = Cluster::start_tls(3, certs.path(), &[]).await;
    let (speaker, _) = cluster.speaker().await;

    // A certificate the CA given does not vouch for is refused at start:
    // the members would refuse it.
    let file = |dir: &std::path::Path, name: &str| dir.join(name).display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--id", "4", "--listen", "127.0.0.1:1", "--join"])
        .arg(&cluster.addrs[&speaker])
        .arg("--data-dir")
        .arg(cluster.dir.path().join("refused-4"))
        .args(["--cluster-token", TOKEN])
        .args(["--tls-cert", &file(foreign.path(), "node-4.pem")])
        .args(["--tls-key", &file(foreign.path(), "node-4-key.pem")])
        .args(["--tls-ca", &file(certs.path(), "ca.pem")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("node-4.pem") && stderr.contains("refuse"),
        "{stderr}"
    );

    // Node 4 runs under a CA of its own, and asks to join.
    cluster.set_node_args(
        4,
        vec![
            "--tls-cert".into(),
            file(foreign.path(), "node-4.pem"),
            "--tls-key".into(),
            file(foreign.path(), "node-4-key.pem"),
            "--tls-ca".into(),
            file(foreign.path(), "ca.pem"),
        ],
    );
    cluster.spawn_joining(4);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        let (status, view) = cluster.get(speaker, "/v1/cluster").await;
        assert_eq!(status, 200, "{view}");
        let ids: Vec<u64> = view["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, vec![1, 2, 3], "node 4 must not be added: {view}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let log = cluster.log(4);
    assert!(
        log.contains("joining: no answer") && log.contains("certificate"),
        "node 4 is told why it cannot join: {log}"
    );

    // A vote request with the foreign certificate fails in the handshake.
    let pem = [
        std::fs::read(foreign.path().join("node-4.pem")).unwrap(),
        std::fs::read(foreign.path().join("node-4-key.pem")).unwrap(),
    ]
    .concat();
    let ca = std::fs::read(certs.path().join("ca.pem")).unwrap();
    let stranger = reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let vote = stranger
        .post(cluster.url(speaker, "/internal/raft/vote"))
        .header("x-leasehold-token", TOKEN)
        .body(Vec::new())
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(
        vote.is_err(),
        "a vote with a foreign certificate got an answer: {:?}",
        vote.map(|r| r.status())
    );

    // Without a client certificate the cluster token is not enough.
    let (status, body) = support::answer(
        cluster
            .http
            .post(cluster.url(speaker, "/internal/raft/vote"))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(10)),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("client certificate")),
        "{body}"
    );
    // The cluster goes on.
    cluster.must_acquire(speaker, "jobs/after", json!({})).await;
}

/// Copies `ca.pem`, `node-1.pem` and `node-1-key.pem` from `from` to `to`.
fn install(from: &std::path::Path, to: &std::path::Path) {
    for name in ["ca.pem", "node-1.pem", "node-1-key.pem"] {
        std::fs::copy(from.join(name), to.join(name)).unwrap();
    }
}

/// Whether a new connection trusting only the CA in `certs` gets node 1's
/// cluster view.
async fn reaches(cluster: &Cluster, certs: &std::path::Path) -> bool {
    https_client(certs)
        .get(cluster.url(1, "/v1/cluster"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

fn hangup(cluster: &Cluster) {
    let status = Command::new("kill")
        .args(["-HUP", &cluster.pid(1).to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_read_again_on_sighup() {
    let first = tempfile::tempdir().unwrap();
    make_certs(first.path(), &["node-1"]);
    let second = tempfile::tempdir().unwrap();
    make_certs(second.path(), &["node-1"]);
    let live = tempfile::tempdir().unwrap();
    install(first.path(), live.path());
    let cluster = Cluster::start_tls(1, live.path(), &[]).await;
    assert!(reaches(&cluster, first.path()).await);
    assert!(!reaches(&cluster, second.path()).await, "not yet renewed");
    // A client whose connection stays open across the reload.
    let kept = https_client(first.path());
    let view = |client: &reqwest::Client| {
        client
            .get(cluster.url(1, "/v1/cluster"))
            .timeout(Duration::from_secs(5))
            .send()
    };
    assert_eq!(view(&kept).await.unwrap().status(), 200);

    // Renewed on disk (from another CA, so that it shows), then SIGHUP.
    install(second.path(), live.path());
    hangup(&cluster);
    let start = Instant::now();
    while !reaches(&cluster, second.path()).await {
        assert!(
            start.elapsed() < PATIENCE,
            "the new certificate never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !reaches(&cluster, first.path()).await,
        "the old one is gone"
    );
    assert!(
        view(&kept).await.is_err(),
        "a connection made under the old files is closed by the reload"
    );

    // A broken file on the next SIGHUP: the certificate in use stays.
    std::fs::write(live.path().join("node-1.pem"), "not a certificate\n").unwrap();
    hangup(&cluster);
    let start = Instant::now();
    while !cluster.log(1).contains("not reloaded") {
        assert!(start.elapsed() < PATIENCE, "log:\n{}", cluster.log(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reaches(&cluster, second.path()).await);
}
