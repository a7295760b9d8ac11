//! The speaker removing itself: its runner stops it as soon as it hears it
//! was removed, as `leasehold up` and `leasehold serve` do, and the
//! operator's request is answered as a success once the change has
//! committed, never cut short by that stop.

use std::time::{Duration, Instant};

use leasehold_node::{NodeConfig, RunningNode};
use leasehold_raft::RaftTimings;
use serde_json::{json, Value};

use crate::common::listeners;

const TOKEN: &str = "removal-test";

/// Far from an election with one link slow.
const TIMINGS: RaftTimings = RaftTimings {
    heartbeat_ms: 50,
    election_min_ms: 1_500,
    election_max_ms: 3_000,
};
/// The speaker's link to one follower: the change's second step cannot
/// commit without that follower, while the other takes leadership over
/// the fast link when the speaker stops.
const LINK_DELAY_MS: u64 = 1_000;

async fn call(http: &reqwest::Client, method: &str, url: String, body: Value) -> (u16, Value) {
    let response = http
        .request(method.parse().unwrap(), url)
        .header("x-leasehold-token", TOKEN)
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(json!(text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_speaker_removing_itself_answers_once_the_change_committed_though_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, peers) = listeners(3).await;
    let mut nodes: Vec<Option<RunningNode>> = Vec::new();
    for (listener, id) in listeners.into_iter().zip(1..) {
        let config = NodeConfig::new(id, peers.clone(), dir.path().join(format!("n{id}")), TOKEN)
            .with_timings(TIMINGS)
            .with_chaos(true);
        nodes.push(Some(leasehold_node::start(config, listener).await.unwrap()));
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let speaker = loop {
        let leading = nodes
            .iter()
            .zip(1u64..)
            .find(|(n, _)| n.as_ref().unwrap().node().leading_term().is_some());
        if let Some((_, id)) = leading {
            let url = format!("http://{}/v1/locks/acquire", peers[&id]);
            let (status, _) = call(&http, "POST", url, json!({"name": "warm-up"})).await;
            if status == 200 {
                break id;
            }
        }
        assert!(Instant::now() < deadline, "no speaker within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Its runner: stopped the moment it hears of its removal.
    let running = nodes[speaker as usize - 1].take().unwrap();
    let runner = tokio::spawn(async move {
        running.removed().await;
        running.shutdown().await;
    });
    let far = (1..=3u64).find(|id| *id != speaker).unwrap();
    let slow = json!({ "delay_to": { far.to_string(): LINK_DELAY_MS } });
    let url = format!("http://{}/internal/chaos", peers[&speaker]);
    let (status, body) = call(&http, "POST", url, slow).await;
    assert_eq!(status, 200, "{body}");

    // The slow link's acknowledgements can fall behind the speaker's
    // "answered lately" on a loaded machine, and the removal is refused as
    // losing the quorum: the operator's answer is to ask again.
    let url = format!("http://{}/v1/cluster/members/{speaker}", peers[&speaker]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, body) = call(&http, "DELETE", url.clone(), json!({})).await;
        if status != 409 || body["error"] != "would_lose_quorum" || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 200, "the speaker removing itself: {body}");
    tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("the removed speaker stops")
        .unwrap();

    let left: Vec<u64> = (1..=3).filter(|id| *id != speaker).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let url = format!("http://{}/v1/cluster", peers[&left[0]]);
        let (status, cluster) = call(&http, "GET", url, json!({})).await;
        let voters: Vec<u64> = cluster["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "voter")
            .filter_map(|m| m["id"].as_u64())
            .collect();
        if status == 200 && voters == left {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the others never settled on {left:?}: {status} {cluster}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
