//! Requests at their edges: the cluster token on internal routes, bad
//! input, long polls, many and large calls through a follower.

use std::time::Duration;

use serde_json::{json, Value};

use super::followers;
use crate::support::{fence, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_need_the_cluster_token() {
    let cluster = Cluster::start(3).await;
    let http = &cluster.http;
    for (method, path) in [
        ("GET", "/internal/held"),
        ("POST", "/internal/held"),
        ("POST", "/internal/forward/acquire"),
        ("POST", "/internal/raft/vote"),
        ("PUT", "/internal/no/such/route"),
        ("DELETE", "/internal"),
    ] {
        for token in [None, Some("wrong-token")] {
            let mut request = http.request(method.parse().unwrap(), cluster.url(1, path));
            if let Some(t) = token {
                request = request.header("x-leasehold-token", t);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 401, "{method} {path} {token:?}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"], json!("unauthorized"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_json_error_and_held_locks_survive() {
    let cluster = Cluster::start(3).await;
    let held = cluster
        .must_acquire(2, "precious", json!({"lease_ms": 60000}))
        .await;
    let long = "x".repeat(513);
    let bodies: Vec<String> = vec![
        "not json".into(),
        "{".into(),
        "[]".into(),
        "{}".into(),
        r#"{"name": ""}"#.into(),
        json!({"name": long}).to_string(),
        json!({"name": "a", "holder": "h".repeat(257)}).to_string(),
        json!({"name": "a", "data": "d".repeat(4097)}).to_string(),
        r#"{"name": 5}"#.into(),
        r#"{"name": "a", "lease_ms": -1}"#.into(),
        r#"{"name": "a", "lease_ms": 1.5}"#.into(),
        r#"{"name": "a", "lease_ms": "10"}"#.into(),
        r#"{"name": "a", "lease_ms": 18446744073709551616}"#.into(),
        r#"{"name": "a", "wait_ms": -5}"#.into(),
    ];
    for via in cluster.live() {
        for body in &bodies {
            let (status, answer) = cluster
                .post_raw(via, "/v1/locks/acquire", body.clone())
                .await;
            assert!(
                (400..500).contains(&status),
                "{body} via {via}: {status} {answer}"
            );
            assert_eq!(answer["error"], json!("bad_request"), "{body}");
            assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        for (path, body) in [
            (
                "/v1/locks/release",
                json!({"name": "precious", "id": "not-an-id"}),
            ),
            ("/v1/locks/release", json!({"name": "precious"})),
            ("/v1/locks/renew", json!({"name": "precious", "id": 7})),
        ] {
            let (status, answer) = cluster.post(via, path, body.clone()).await;
            assert_eq!(status, 400, "{path} {body}: {answer}");
        }
        let (status, answer) = cluster
            .post_raw(via, "/v1/locks/acquire", "x".repeat(1 << 20))
            .await;
        assert_eq!(status, 413, "{answer}");
        assert_eq!(answer["error"], json!("too_large"));
        let (status, _) = cluster.get(via, "/v1/locks?limit=-1").await;
        assert_eq!(status, 400);
    }
    let (status, body) = cluster.get(1, "/v1/locks/precious").await;
    assert_eq!(status, 200);
    assert_eq!(
        body["lock"]["id"], held["id"],
        "nothing already held is lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_can_wait_for_the_lock_to_change() {
    let cluster = std::sync::Arc::new(Cluster::start(3).await);
    let lock = cluster
        .must_acquire(2, "watched", json!({"lease_ms": 60000}))
        .await;
    let f = fence(&lock);

    // Unchanged: the watch answers with the lock as it is when the wait ends.
    let start = std::time::Instant::now();
    let (status, body) = cluster
        .get(3, &format!("/v1/locks/watched?wait_ms=500&after_fence={f}"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["lock"]["id"], lock["id"]);
    assert!(start.elapsed() >= Duration::from_millis(400));

    // A change (release, then another's grant) ends the wait at once.
    for via in [1u64, 3] {
        let c = std::sync::Arc::clone(&cluster);
        // First the held lock's fence; then, with no lock, fence 0.
        let after = if via == 1 { f } else { 0 };
        let path = format!("/v1/locks/watched?wait_ms=20000&after_fence={after}");
        let watcher = tokio::spawn(async move { c.get(via, &path).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!watcher.is_finished());
        if via == 1 {
            let (status, _) = cluster
                .post(
                    2,
                    "/v1/locks/release",
                    json!({"name": "watched", "id": lock["id"]}),
                )
                .await;
            assert_eq!(status, 200);
            let (status, body) = watcher.await.unwrap();
            assert_eq!(status, 404, "released: no lock now: {body}");
        } else {
            let next = cluster.must_acquire(1, "watched", json!({})).await;
            let (status, body) = watcher.await.unwrap();
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["lock"]["id"], next["id"]);
        }
    }
    let (status, _) = cluster.get(1, "/v1/locks/watched?wait_ms=-1").await;
    assert_eq!(status, 400);
}

/// Many clients of one follower at once: their calls reach the speaker in
/// batches, and each gets its own answer (a grant, `409 held`, a release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_through_a_follower_each_get_their_answer() {
    let cluster = std::sync::Arc::new(Cluster::start(3).await);
    let (speaker, _) = cluster.speaker().await;
    let via = followers(&cluster, speaker)[0];
    let names: Vec<String> = (0..20).map(|i| format!("batch/{i}")).collect();

    let mut calls = tokio::task::JoinSet::new();
    for name in names.clone().into_iter().chain(names.clone()) {
        let cluster = std::sync::Arc::clone(&cluster);
        calls.spawn(async move { cluster.acquire(via, &name, json!({})).await });
    }
    let mut granted = Vec::new();
    let mut held = 0;
    while let Some(answer) = calls.join_next().await {
        let (status, body) = answer.unwrap();
        match status {
            200 => granted.push(body["lock"].clone()),
            409 => held += 1,
            _ => panic!("unexpected answer {status}: {body}"),
        }
    }
    assert_eq!(granted.len(), 20, "one grant per name");
    assert_eq!(held, 20, "the second asker of each name is refused");
    let mut granted_names: Vec<String> = granted
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    granted_names.sort();
    granted_names.dedup();
    assert_eq!(granted_names.len(), 20);

    for lock in granted {
        let cluster = std::sync::Arc::clone(&cluster);
        calls.spawn(async move {
            let body = json!({"name": lock["name"], "id": lock["id"]});
            cluster.post(via, "/v1/locks/release", body).await
        });
    }
    while let Some(answer) = calls.join_next().await {
        let (status, body) = answer.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    for name in &names {
        let (status, body) = cluster
            .get(speaker, &format!("/v1/locks/{}", name.replace('/', "%2F")))
            .await;
        assert_eq!(status, 404, "{name} still held: {body}");
    }
}

/// Calls with large data through a follower come in batches whose JSON is
/// far over what a member reads: each is cut by its size, so every call is
/// answered as it would be alone (before, the whole batch was refused 413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_calls_batched_through_a_follower_are_all_granted() {
    let cluster = std::sync::Arc::new(Cluster::start(3).await);
    let (speaker, _) = cluster.speaker().await;
    let via = followers(&cluster, speaker)[0];
    // Quotes escape to two bytes each: about 8 KB of JSON per call.
    let data = "\"".repeat(leasehold_api_max_data());
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..96 {
        let cluster = std::sync::Arc::clone(&cluster);
        let data = data.clone();
        calls.spawn(async move {
            let body = json!({ "name": format!("big/{i}"), "data": data });
            cluster.post(via, "/v1/locks/acquire", body).await
        });
    }
    let mut granted = 0;
    while let Some(answer) = calls.join_next().await {
        let (status, body) = answer.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["lock"]["data"].as_str().map(str::len),
            Some(data.len())
        );
        granted += 1;
    }
    assert_eq!(granted, 96);
}

/// The most data a lock keeps (`MAX_DATA_BYTES` of the API).
fn leasehold_api_max_data() -> usize {
    4096
}

/// A watch through a follower that waited 3 s for a lock to be granted
/// answers the speaker's time left, less the call's own time, not less
/// the wait: a 10 s grant shows more than 9 s left, never more than 10 s,
/// and held for well under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_through_a_follower_answers_the_time_left_not_less_the_wait() {
    let cluster = std::sync::Arc::new(Cluster::start(3).await);
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let watching = {
        let cluster = std::sync::Arc::clone(&cluster);
        tokio::spawn(async move {
            cluster
                .get(follower, "/v1/locks/watched?wait_ms=20000&after_fence=0")
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let granted = cluster
        .must_acquire(
            speaker,
            "watched",
            json!({"lease_ms": 10000, "holder": "w"}),
        )
        .await;
    let (status, seen) = watching.await.unwrap();
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["lock"]["fence"], granted["fence"], "{seen}");
    let ttl = seen["lock"]["ttl_ms"].as_u64().unwrap();
    assert!(
        (9000..=10000).contains(&ttl),
        "a lock granted a moment ago shows {ttl} ms left: {seen}"
    );
    // Its start as the follower tells it: the grant's, not 3 s before.
    let ms_of_day = |at: &Value| -> i64 {
        let time = at.as_str().unwrap().split('T').nth(1).unwrap();
        let time = time.trim_end_matches('Z');
        let mut parts = time.split(':');
        let h: i64 = parts.next().unwrap().parse().unwrap();
        let m: i64 = parts.next().unwrap().parse().unwrap();
        let s: f64 = parts.next().unwrap().parse().unwrap();
        (h * 3600 + m * 60) * 1000 + (s * 1000.0) as i64
    };
    let early = ms_of_day(&granted["acquired_at"]) - ms_of_day(&seen["lock"]["acquired_at"]);
    assert!(
        early.abs() < 1000,
        "acquired_at {early} ms before the grant's: {seen} vs {granted}"
    );
}
