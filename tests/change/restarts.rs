//! Restarts, clean or not, and timings changed by a rolling restart, each
//! followed by a crash or a partition of the speaker.

use std::time::{Duration, Instant};

use serde_json::json;

use super::kill_the_speaker;
use crate::support::{self, Cluster, PATIENCE};

/// Strict mode with the short leases it advises (`--max-lease 3000`; at
/// 2000 a renewal every 300 ms left 100 ms beside the failover bound of
/// these timings, and a loaded machine ran past it): a member restarts (a
/// rolling restart, say), then the speaker is killed while a holder renews
/// every 300 ms through a survivor. The restarted
/// member has every record it took since it started, so the next speaker
/// neither waits out its whole rebuild timeout for the dead speaker (the
/// lease would run out meanwhile) nor holds new grants back for a whole
/// lease: the holder keeps its lock, and the hold covers only leases from
/// before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_then_a_speaker_crash_keeps_a_renewing_holders_lock() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "3000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, restarted) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(via, "short/x", json!({ "lease_ms": 3000, "holder": "w1" }))
        .await;
    let renew = json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 3000 });
    cluster.kill(restarted);
    cluster.spawn(restarted);
    // Renew through `via` every 300 ms from here on, noting every answer.
    let cluster = std::sync::Arc::new(tokio::sync::Mutex::new(cluster));
    let renewing = {
        let cluster = std::sync::Arc::clone(&cluster);
        let renew = renew.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until {
                let (status, body) = {
                    let cluster = cluster.lock().await;
                    let request = cluster
                        .http
                        .post(cluster.url(via, "/v1/locks/renew"))
                        .json(&renew)
                        .timeout(Duration::from_millis(1500));
                    support::answer(request).await
                };
                answers.push((status, body));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(900)).await;
    cluster.lock().await.kill(speaker);
    let answers = renewing.await.unwrap();
    let cluster = cluster.lock().await;
    for (status, body) in &answers {
        assert!(
            *status == 200 || *status == 503 || *status == 0,
            "a renewal refused for good: {status} {body}"
        );
        if *status == 200 {
            assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
        }
    }
    let last = answers.last().unwrap();
    assert_eq!(last.0, 200, "the holder lost its lock: {answers:?}");
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, view) = cluster.get(next, "/v1/cluster").await;
    let report = &view["last_rebuild"];
    assert!(
        report["took_ms"].as_u64().unwrap() < 1500,
        "the rebuild waited for the dead speaker: {report}"
    );
    assert!(
        report["held_back_ms"].as_u64().unwrap() < 3000,
        "only leases from before the restart are held back: {report}"
    );
}

/// Timings lowered by a rolling restart (followers first, as the docs
/// say), then the old speaker and one follower are cut off from the three
/// that run the shorter timings. Those three may elect a speaker as soon as
/// their own short lease allows; the old speaker's guard counts on the
/// shortest lease any member runs with, and the successor's strict hold on
/// the longest, so a grant the old speaker makes after the cut cannot
/// overlap one of its successor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timings_lowered_by_a_rolling_restart_then_a_partition_grant_nothing_twice() {
    const MAX_LEASE: u64 = 2000;
    let long = |_| {
        [
            "--heartbeat-interval",
            "50",
            "--election-timeout-min",
            "1000",
            "--election-timeout-max",
            "2000",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut cluster = Cluster::start_each(
        5,
        &["--chaos", "--rebuild-mode", "strict", "--max-lease", "2000"],
        long,
    )
    .await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (minority, majority) = (others[0], others[1..].to_vec());
    for id in &majority {
        cluster.kill(*id);
        cluster.set_node_args(*id, Vec::new());
        cluster.spawn(*id);
        cluster.all_follow_one().await;
    }
    let (still, _) = cluster.speaker().await;
    assert_eq!(still, speaker, "restarting followers moved no leadership");
    // A lock that ends 1.8 s into the cut, after the majority can elect:
    // the old speaker could grant the name again then only if its guard
    // still ran.
    cluster
        .must_acquire(speaker, "part/x", json!({"holder": "c", "lease_ms": 1800}))
        .await;
    for id in [speaker, minority] {
        cluster.set_plan(id, json!({"drop_to": majority})).await;
    }
    for id in &majority {
        cluster
            .set_plan(*id, json!({"drop_to": [speaker, minority]}))
            .await;
    }
    let cluster = std::sync::Arc::new(cluster);
    let ask = |via: u64, holder: &'static str, for_ms: u64| {
        let cluster = std::sync::Arc::clone(&cluster);
        tokio::spawn(async move {
            let until = Instant::now() + Duration::from_millis(for_ms);
            let body = json!({"name": "part/x", "holder": holder, "lease_ms": MAX_LEASE});
            while Instant::now() < until {
                let sent = Instant::now();
                let (status, _) = cluster.post(via, "/v1/locks/acquire", body.clone()).await;
                if status == 200 {
                    return Some((sent, Instant::now()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        })
    };
    let old_side = ask(speaker, "a", 4_000);
    let new_side = ask(majority[0], "b", 12_000);
    let (a, b) = (old_side.await.unwrap(), new_side.await.unwrap());
    eprintln!("old side {a:?}, new side {b:?}");
    if let (Some((a_sent, _)), Some((_, b_answered))) = (a, b) {
        assert!(
            b_answered >= a_sent + Duration::from_millis(MAX_LEASE),
            "two holders: a through the old speaker (asked {:?} before b was answered), \
             b through the new one",
            b_answered.saturating_duration_since(a_sent)
        );
    }
    assert!(b.is_some(), "the majority never granted the name again");
}

/// A follower stopped with SIGTERM hands its records over before it goes
/// (the speaker copies them again to members that stay), so its restart
/// forgot nothing that counts: a speaker crash right after is a single
/// crash, not two. The rebuild reads every member that runs, names only
/// the dead speaker missing, holds nothing back in strict mode, and the
/// lock held through the restarted follower stays its holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_then_a_speaker_crash_costs_nothing() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let lock = cluster
        .must_acquire(
            follower,
            "clean/x",
            json!({"lease_ms": 20000, "holder": "w1"}),
        )
        .await;
    assert_eq!(cluster.terminate(follower, PATIENCE), Some(0));
    assert!(
        cluster.log(follower).contains("records handed over"),
        "{}",
        cluster.log(follower)
    );
    cluster.spawn(follower);
    cluster.all_follow_one().await;
    let (_, report) = kill_the_speaker(&mut cluster, speaker).await;
    let report = &report;
    assert_eq!(report["members_missing"], json!([speaker]), "{report}");
    assert_eq!(report["all_seen"], json!(true), "{report}");
    assert_eq!(report["held_back_ms"], json!(0), "{report}");
    let renew = json!({"name": lock["name"], "id": lock["id"]});
    let (status, renewed) = cluster
        .post_settled(follower, "/v1/locks/renew", renew)
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["lock"]["fence"], lock["fence"]);
}

/// Two followers stopped cleanly one after the other, then the speaker
/// killed: the first handed a lock held through it over (copied to the
/// second), and the second handed that copy over in turn. The copy must
/// go to a member that keeps it, not be counted on the first follower,
/// whose memory is empty since its restart: the lock stays its holder's
/// through the speaker's crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clean_restarts_then_a_speaker_crash_keep_the_lock() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (holder, other) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(
            holder,
            "clean/twice",
            json!({"lease_ms": 20000, "holder": "w1"}),
        )
        .await;
    for id in [holder, other] {
        assert_eq!(cluster.terminate(id, PATIENCE), Some(0));
        cluster.spawn(id);
        cluster.all_follow_one().await;
    }
    let (next, report) = kill_the_speaker(&mut cluster, speaker).await;
    let report = &report;
    assert_eq!(report["locks"], json!(1), "the lock was lost: {report}");
    let (status, rival) = cluster
        .post(
            next,
            "/v1/locks/acquire",
            json!({"name": "clean/twice", "holder": "w2"}),
        )
        .await;
    assert_ne!(status, 200, "granted twice: {rival}");
    let renew = json!({"name": lock["name"], "id": lock["id"]});
    let (status, renewed) = cluster.post_settled(holder, "/v1/locks/renew", renew).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["lock"]["fence"], lock["fence"]);
}
