//! What a simulated client asks of the cluster, over the public HTTP API.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cluster;
use crate::net::call;

/// How long a simulated client waits for one answer.
pub const CALL: Duration = Duration::from_secs(2);

/// `GET /v1/cluster` of node `id`, if it answered.
pub async fn cluster_view(id: u64) -> Option<Value> {
    match call(&cluster::addr(id), Method::GET, "/v1/cluster", None, CALL).await {
        Ok((StatusCode::OK, view)) => Some(view),
        _ => None,
    }
}

/// The node that speaks and has rebuilt, as node `asked` names it and it
/// confirms.
pub async fn speaker(asked: u64) -> Option<u64> {
    let leader = cluster_view(asked).await?["leader"].as_u64()?;
    let there = cluster_view(leader).await?;
    (there["rebuilt"] == json!(true) && there["leader"] == json!(leader)).then_some(leader)
}

/// Waits until node `asked` names a speaker that has rebuilt.
pub async fn wait_for_speaker(asked: u64) -> u64 {
    loop {
        if let Some(s) = speaker(asked).await {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes `name` (a lease of a second) through node `node`, asking every
/// 50 ms until it is granted or the simulated time is `until`: when the
/// grant was answered, in simulated time.
pub async fn grant_through(node: u64, name: &str, until: Duration) -> Option<Duration> {
    while crate::history::now() < until {
        let body = json!({"name": name, "lease_ms": 1000});
        let answer = call(
            &cluster::addr(node),
            Method::POST,
            "/v1/locks/acquire",
            Some(body),
            CALL,
        )
        .await;
        if let Ok((StatusCode::OK, _)) = answer {
            return Some(crate::history::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
