//! Routine change followed by a fault, over real `leasehold serve`
//! processes: growth from one node then a crash, and an operator adding a
//! member that is not running yet; each change also with a session
//! holding locks (`sessions`). Each checks that nothing is granted twice
//! and that a lock its holder renews is not lost.

mod growth;
mod rejoin;
mod replacement;
mod restarts;
mod sessions;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::Cluster;

async fn wait_for_voters(cluster: &Cluster, via: u64, voters: &[u64]) {
    cluster.wait_for_voters(via, voters).await;
}

/// How many voters a cluster view names, 0 while a change is under way.
fn settled_voters(view: &Value) -> usize {
    if view["changing"] != json!(false) {
        return 0;
    }
    view["members"].as_array().map_or(0, |members| {
        members
            .iter()
            .filter(|m| m["role"] == json!("voter"))
            .count()
    })
}

/// Kills `speaker` and answers the next speaker and its rebuild's report.
async fn kill_the_speaker(cluster: &mut Cluster, speaker: u64) -> (u64, Value) {
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, view) = cluster.get(next, "/v1/cluster").await;
    (next, view["last_rebuild"].clone())
}

/// Asks `via` for `name` for holder `w2` every 200 ms until `until`:
/// answers whether it was ever granted, and the last answer.
async fn rival_until(cluster: &Cluster, via: u64, name: &str, until: Instant) -> Option<Value> {
    let body = json!({ "name": name, "holder": "w2", "lease_ms": 1000 });
    while Instant::now() < until {
        let (status, answer) = cluster.post(via, "/v1/locks/acquire", body.clone()).await;
        if status == 200 {
            return Some(answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}
