//! A member that lost its disk rejoins by itself (`--rejoin`): cut short
//! by a restart, then a crash of the speaker; its old directory retired
//! only when silent.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{kill_the_speaker, rival_until, settled_voters};
use crate::support::{self, Cluster, PATIENCE, TOKEN};

/// Every node runs with `--rejoin` in its fixed flags (beside `--peers`),
/// the cluster's first start included, which it does not hinder. A member
/// loses its disk: killed, its data directory wiped, and started again
/// with the same flags. It asks the cluster to remove
/// its id's old directory, joins again under its id once the removal's
/// lease has passed, and votes; meanwhile a holder renews through a
/// survivor. Then the speaker is killed: the holder keeps its lock and no
/// rival is granted the name. Without `--rejoin` the same start is refused
/// (tests/identity.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_lost_its_disk_rejoins_by_itself_then_a_speaker_crash_keeps_the_lock() {
    let flags = [
        "--rebuild-mode",
        "strict",
        "--max-lease",
        "3000",
        "--rejoin",
    ];
    let mut cluster = Cluster::start_with(3, &flags).await;
    cluster.all_follow_one().await;
    // The speaker records every member's data directory in the log within
    // a few seconds of its start.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, lost) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(via, "disk/x", json!({ "lease_ms": 3000, "holder": "w1" }))
        .await;
    let renew = json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 3000 });
    let renewing = {
        let http = cluster.http.clone();
        let url = cluster.url(via, "/v1/locks/renew");
        tokio::spawn(async move {
            let mut answers = Vec::new();
            let until = Instant::now() + PATIENCE;
            while Instant::now() < until {
                let request = http
                    .post(&url)
                    .json(&renew)
                    .timeout(Duration::from_millis(1500));
                let (status, body) = support::answer(request).await;
                let lost = status == 409;
                answers.push((status, body));
                if lost {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            answers
        })
    };
    cluster.kill(lost);
    let _ = std::fs::remove_dir_all(cluster.data_dir(lost));
    cluster.spawn(lost);
    let start = Instant::now();
    loop {
        let log = cluster.log(lost);
        assert!(
            !log.contains("refuses this node"),
            "the node that lost its disk was refused: {log}"
        );
        let (_, view) = cluster.get(speaker, "/v1/cluster").await;
        if settled_voters(&view) == 3 && log.contains("joined the cluster") {
            assert!(log.contains("joining again under it"), "{log}");
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never voting again: {view}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (next, _) = kill_the_speaker(&mut cluster, speaker).await;
    let rival = rival_until(
        &cluster,
        next,
        "disk/x",
        Instant::now() + Duration::from_secs(4),
    )
    .await;
    assert!(
        rival.is_none(),
        "granted twice while {lock} is renewed: {rival:?}"
    );
    renewing.abort();
    let renewed = support::answer(
        cluster
            .http
            .post(cluster.url(via, "/v1/locks/renew"))
            .json(&json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 3000 }))
            .timeout(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(renewed.0, 200, "the holder lost its lock: {renewed:?}");
    assert_eq!(renewed.1["lock"]["fence"], lock["fence"]);
}

/// A node rejoining with `--rejoin` is killed after the cluster removed its
/// id's old directory and before its join is answered (the join waits out
/// the removal's lease), then started again with the same flags: its
/// directory was never named by a configuration, so it rejoins still, and
/// votes. Before, only a first start rejoined: the restarted node took
/// itself for a member of the cluster's first start and never joined
/// (found by a second reader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejoin_cut_short_by_a_restart_still_joins() {
    let flags = ["--max-lease", "6000", "--rejoin"];
    let mut cluster = Cluster::start_with(3, &flags).await;
    cluster.all_follow_one().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (speaker, _) = cluster.speaker().await;
    let lost = cluster.others(speaker)[1];
    cluster.kill(lost);
    let _ = std::fs::remove_dir_all(cluster.data_dir(lost));
    cluster.spawn(lost);
    let start = Instant::now();
    while !cluster.log(lost).contains("joining again under it") {
        assert!(start.elapsed() < PATIENCE, "{}", cluster.log(lost));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!cluster.log(lost).contains("joined the cluster"));
    // Killed while its join waits; started again as it was.
    cluster.kill(lost);
    cluster.spawn(lost);
    let start = Instant::now();
    loop {
        let log = cluster.log(lost);
        let (_, view) = cluster.get(speaker, "/v1/cluster").await;
        if settled_voters(&view) == 3 && log.contains("joined the cluster") {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never voting again: {view}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A retirement (what `serve --rejoin` asks, sent here as a member would
/// forward it) as the speaker takes it: refused while the id's process
/// still answers on its directory (two processes under one id must not
/// take the healthy one out), nothing when it comes from the directory
/// the id runs on already (a retirement arriving after the rejoin must not
/// undo it), and a removal once the old directory is silent; a lock held
/// through another member is kept through all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_removes_only_a_silent_old_directory() {
    let mut cluster = Cluster::start(3).await;
    cluster.all_follow_one().await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, old) = (others[0], others[1]);
    cluster.wait_protocol(crate::support::SPEAKS).await;
    let lock = cluster
        .must_acquire(via, "retire/x", json!({ "lease_ms": 60000 }))
        .await;
    let log = cluster.log(old);
    let store = log
        .split("store=")
        .nth(1)
        .map(|rest| rest[..32].to_string())
        .unwrap_or_else(|| panic!("no store in the log: {log}"));
    let retire = |store: &str| json!({ "retire": { "id": old, "store": store } });
    let (http, url) = (
        cluster.http.clone(),
        cluster.url(speaker, "/internal/members"),
    );
    let send = |body: Value| {
        let request = http
            .post(&url)
            .header("x-leasehold-token", TOKEN)
            .header("x-leasehold-from", "99")
            .header("x-leasehold-store", format!("{:032x}", 99))
            .header("x-leasehold-protocol", support::PROTOCOL_STAMP)
            .json(&body)
            .timeout(Duration::from_secs(30));
        support::answer(request)
    };
    let members = |view: &Value| view["members"].as_array().map_or(0, Vec::len);
    let other_store = format!("{:032x}", 0xfeed_u128);

    let (status, body) = send(retire(&other_store)).await;
    assert_eq!(status, 409, "a live member retired: {body}");
    assert_eq!(body["error"], json!("member_exists"), "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("still answers"),
        "{body}"
    );
    // A pause longer than a heartbeat's timeout, shorter than the quiet
    // window: still a live member (found by a second reader: one slow
    // heartbeat let it be removed).
    cluster.pause(old);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, body) = send(retire(&other_store)).await;
    cluster.resume(old);
    assert_eq!(status, 409, "a paused live member retired: {body}");
    let (status, body) = send(retire(&store)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(members(&body), 3, "the id runs on that directory: {body}");

    cluster.kill(old);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, body) = send(retire(&store)).await;
    assert_eq!((status, members(&body)), (200, 3), "{body}");
    let (status, body) = send(retire(&other_store)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(members(&body), 2, "the silent old directory stays: {body}");

    let (status, body) = cluster
        .post(
            via,
            "/v1/locks/renew",
            json!({ "name": "retire/x", "id": lock["id"] }),
        )
        .await;
    assert_eq!(status, 200, "the lock was lost: {body}");
    assert_eq!(body["lock"]["fence"], lock["fence"]);
}
