//! Data directory identity over real `leasehold serve` processes: a member
//! whose directory was wiped, or swapped for one from another cluster, is
//! refused with a clear message instead of rejoining having forgotten its
//! votes, and the cluster goes on serving.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{Cluster, PATIENCE, TOKEN};

/// Restarts node `id` and expects it to refuse to run: a non-zero exit and
/// `expected` in its log.
fn expect_refused(cluster: &mut Cluster, id: u64, expected: &str) {
    cluster.spawn(id);
    let code = cluster.wait_exit(id, PATIENCE);
    let log = cluster.log(id);
    assert!(
        matches!(code, Some(c) if c != 0),
        "node {id} should exit non-zero, exited {code:?}; log:\n{log}"
    );
    assert!(
        log.contains(expected),
        "node {id}'s log should say {expected:?}; log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_data_directory_is_refused_and_the_cluster_goes_on() {
    let mut cluster = Cluster::start(3).await;
    let held = cluster
        .must_acquire(1, "jobs/1", json!({"holder": "a"}))
        .await;

    // A peer request with the token but without a stamp is refused as JSON.
    let (status, body) = support::answer(
        cluster
            .http
            .post(cluster.url(1, "/internal/identity"))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "bad_request", "{body}");

    // A follower, and then the member that bootstraps the cluster (which
    // used to initialize a second cluster from an empty directory).
    for id in [3, 1] {
        cluster.kill(id);
        std::fs::remove_dir_all(cluster.data_dir(id)).unwrap();
        expect_refused(&mut cluster, id, "wiped or replaced");
        if id == 3 {
            let other = cluster
                .must_acquire(2, "jobs/2", json!({"holder": "b"}))
                .await;
            assert_ne!(other["id"], held["id"]);
            let (status, body) = cluster.get(2, "/v1/locks/jobs%2F1").await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["lock"]["id"], held["id"], "the lock held survives");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_from_another_cluster_is_refused() {
    let mut cluster = Cluster::start(3).await;

    // A one-node cluster whose only member is also node 3.
    let stray_dir = cluster.dir.path().join("stray");
    let stray_addr = support::free_addr();
    let mut stray = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--id", "3", "--listen", &stray_addr])
        .args(["--peers", &format!("3={stray_addr}")])
        .arg("--data-dir")
        .arg(&stray_dir)
        .args(["--cluster-token", TOKEN])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let start = std::time::Instant::now();
    loop {
        let (status, c) = support::answer(
            http.get(format!("http://{stray_addr}/v1/cluster"))
                .timeout(Duration::from_secs(5)),
        )
        .await;
        if status == 200 && c["rebuilt"] == json!(true) {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "the stray cluster never formed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stray.kill();
    let _ = stray.wait();

    cluster.kill(3);
    std::fs::remove_dir_all(cluster.data_dir(3)).unwrap();
    std::fs::rename(&stray_dir, cluster.data_dir(3)).unwrap();
    expect_refused(&mut cluster, 3, "belong to another cluster");
    cluster.must_acquire(1, "jobs/1", json!({})).await;
}

/// A wiped member started while every other member is down cannot be told
/// at start; it is told, and stops, once they come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_started_alone_stops_once_the_others_are_back() {
    let mut cluster = Cluster::start(3).await;
    for id in [1, 2, 3] {
        cluster.kill(id);
    }
    std::fs::remove_dir_all(cluster.data_dir(3)).unwrap();
    cluster.spawn(3);
    let (status, _) = loop {
        let answer = cluster.get(3, "/v1/cluster").await;
        if answer.0 != 0 {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200, "alone, node 3 cannot tell and starts");
    cluster.spawn(1);
    cluster.spawn(2);
    let code = cluster.wait_exit(3, PATIENCE);
    let log = cluster.log(3);
    assert!(
        matches!(code, Some(c) if c != 0),
        "node 3 should exit non-zero, exited {code:?}; log:\n{log}"
    );
    assert!(log.contains("wiped or replaced"), "log:\n{log}");
    let (speaker, _) = cluster.speaker().await;
    assert!(speaker == 1 || speaker == 2);
}
