//! A real cluster of `leasehold serve` processes: forming, granting,
//! forwarding, waiting, failover, pauses, restarts, auth and bad input.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{fence, fence_term, Cluster};

fn followers(cluster: &Cluster, speaker: u64) -> Vec<u64> {
    cluster.others(speaker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_forms_grants_and_forwards() {
    let cluster = Cluster::start(3).await;
    let (speaker, term) = cluster.speaker().await;
    let f = followers(&cluster, speaker);

    let (status, info) = cluster.get(f[0], "/v1/cluster").await;
    assert_eq!(status, 200);
    assert_eq!(info["leader"], json!(speaker));
    assert_eq!(info["members"].as_array().unwrap().len(), 3);
    assert_eq!(info["changing"], json!(false));
    for m in info["members"].as_array().unwrap() {
        assert_eq!(m["role"], "voter", "{info}");
        assert_eq!(m["lag"], Value::Null, "only the speaker knows lags: {info}");
    }
    // The speaker says how far behind each member is.
    let (_, info) = cluster.get(speaker, "/v1/cluster").await;
    for m in info["members"].as_array().unwrap() {
        assert_eq!(m["role"], "voter", "{info}");
        assert!(m["lag"].is_u64(), "{info}");
        if m["id"] == json!(speaker) {
            assert_eq!(
                (m["state"].as_str(), m["lag"].as_u64()),
                (Some("leader"), Some(0))
            );
        }
    }

    // Every view says whose it is; a follower asked for the speaker's
    // answers the speaker's, through itself.
    assert_eq!(info["view"], json!("speaker"), "{info}");
    let (_, own) = cluster.get(f[0], "/v1/cluster").await;
    assert_eq!(
        (own["node"].clone(), own["view"].clone()),
        (json!(f[0]), json!("own"))
    );
    assert!(own["at_ms"].as_u64().unwrap() > 1_700_000_000_000, "{own}");
    let (status, through) = cluster.get(f[0], "/v1/cluster?view=speaker").await;
    assert_eq!(status, 200, "{through}");
    assert_eq!(
        (&through["node"], &through["view"], &through["through"]),
        (&json!(speaker), &json!("speaker"), &json!(f[0])),
        "{through}"
    );
    assert!(
        through["members"][0]["lag"].is_u64(),
        "the speaker's members: {through}"
    );
    let (status, history) = cluster.get(f[0], "/v1/cluster/history?view=speaker").await;
    assert_eq!(
        (status, &history["node"]),
        (200, &json!(speaker)),
        "{history}"
    );
    assert!(
        !history["rebuilds"].as_array().unwrap().is_empty(),
        "{history}"
    );
    assert_eq!(history["view"], json!("speaker"), "{history}");
    let (status, _) = cluster.get(f[0], "/v1/cluster?view=speaker&_=17").await;
    assert_eq!(status, 200, "a cache buster is skipped");
    let (status, bad) = cluster.get(f[0], "/v1/cluster?view=leader").await;
    assert_eq!(
        (status, &bad["error"]),
        (400, &json!("bad_request")),
        "{bad}"
    );

    // A lock taken through a follower names that follower.
    let lock = cluster
        .must_acquire(
            f[0],
            "jobs/42",
            json!({"holder": "worker-7", "lease_ms": 20000, "data": "d"}),
        )
        .await;
    assert_eq!(lock["node"], json!(f[0]));
    assert_eq!(lock["holder"], json!("worker-7"));
    assert_eq!(lock["data"], json!("d"));
    assert_eq!(fence_term(&lock), term);
    assert!(lock["ttl_ms"].as_u64().unwrap() <= 20000);

    // Held: 409 with the current holder, through any node.
    for via in [speaker, f[1]] {
        let (status, body) = cluster.acquire(via, "jobs/42", json!({})).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"], json!("held"));
        assert_eq!(body["lock"]["id"], lock["id"]);
    }

    // Get through every node, the name percent-encoded as one segment.
    for via in cluster.live() {
        let (status, body) = cluster.get(via, "/v1/locks/jobs%2F42").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["id"], lock["id"]);
    }
    let (status, body) = cluster.get(f[1], "/v1/locks?prefix=jobs/&limit=10").await;
    assert_eq!(status, 200);
    assert_eq!(body["locks"].as_array().unwrap().len(), 1);

    // Release by id through another node; a stale id is 404.
    let (status, _) = cluster
        .post(
            f[1],
            "/v1/locks/release",
            json!({"name": "jobs/42", "id": lock["id"]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = cluster
        .post(
            speaker,
            "/v1/locks/release",
            json!({"name": "jobs/42", "id": lock["id"]}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], json!("not_held"));
    let (status, _) = cluster.get(speaker, "/v1/locks/jobs%2F42").await;
    assert_eq!(status, 404);

    // Fences strictly increase.
    let mut last = fence(&lock);
    for i in 0..5 {
        let via = cluster.live()[i % 3];
        let next = cluster
            .must_acquire(via, &format!("n/{i}"), json!({}))
            .await;
        assert!(fence(&next) > last);
        last = fence(&next);
    }
}

/// A node on one worker thread (`--threads 1`) blocks no task on another:
/// it grants through the speaker (a copy to a follower on the way) and
/// through a follower, and hands over when the speaker is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_one_worker_thread_grant_forward_and_fail_over() {
    let mut cluster = Cluster::start_with(3, &["--threads", "1"]).await;
    let (speaker, term) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let lease = json!({"holder": "w", "lease_ms": 30_000});
    let direct = cluster
        .must_acquire(speaker, "threads/direct", lease.clone())
        .await;
    let forwarded = cluster.must_acquire(f[0], "threads/forwarded", lease).await;
    assert_eq!(fence_term(&direct), term);
    assert_eq!(fence_term(&forwarded), term);
    cluster.kill(speaker);
    let (next, next_term) = cluster.speaker_other_than(Some(speaker)).await;
    assert!(next_term > term);
    let renew = json!({"name": direct["name"], "id": direct["id"], "lease_ms": 30_000});
    let (status, body) = cluster.post_settled(next, "/v1/locks/renew", renew).await;
    assert_eq!(status, 200, "the copy kept the lock: {body}");
    assert_eq!(body["lock"]["id"], direct["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_first_come_first_served() {
    let cluster = std::sync::Arc::new(Cluster::start(3).await);
    let first = cluster
        .must_acquire(1, "fifo", json!({"lease_ms": 60000}))
        .await;
    let mut waiters = Vec::new();
    for (i, via) in [2u64, 3, 1, 2].into_iter().enumerate() {
        let c = std::sync::Arc::clone(&cluster);
        waiters.push(tokio::spawn(async move {
            let (status, body) = c
                .acquire(
                    via,
                    "fifo",
                    json!({"wait_ms": 30000, "holder": format!("w{i}")}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
            let lock = body["lock"].clone();
            // Hold briefly, then pass it on.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (status, _) = c
                .post(
                    via,
                    "/v1/locks/release",
                    json!({"name": "fifo", "id": lock["id"]}),
                )
                .await;
            assert_eq!(status, 200);
            (i, fence(&lock))
        }));
        // Arrive in order.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A listing says how many wait, through the speaker and a follower,
    // and how many locks there are beyond its limit (through a follower
    // once the members agreed protocol 2, a few seconds after the start).
    cluster.wait_protocol(2).await;
    cluster
        .must_acquire(2, "fifo-other", json!({"lease_ms": 60000}))
        .await;
    for via in [1u64, 2, 3] {
        let (status, listed) = cluster.get(via, "/v1/locks?prefix=fifo&limit=1").await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["locks"][0]["name"], json!("fifo"), "{listed}");
        assert_eq!(
            listed["locks"][0]["waiters"],
            json!(4),
            "via {via}: {listed}"
        );
        assert_eq!(listed["total"], json!(2), "via {via}: {listed}");
    }
    let (status, _) = cluster
        .post(
            1,
            "/v1/locks/release",
            json!({"name": "fifo", "id": first["id"]}),
        )
        .await;
    assert_eq!(status, 200);
    let mut served = Vec::new();
    for w in waiters {
        served.push(w.await.unwrap());
    }
    served.sort_by_key(|(_, f)| *f);
    let order: Vec<usize> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, vec![0, 1, 2, 3], "granted in arrival order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_restarts_the_lease_and_an_unrenewed_lock_expires() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let lock = cluster
        .must_acquire(f[0], "lease", json!({"lease_ms": 1500}))
        .await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Renewed through another node, which then keeps the record.
        let (status, body) = cluster
            .post_settled(
                f[1],
                "/v1/locks/renew",
                json!({"name": "lease", "id": lock["id"]}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["node"], json!(f[1]));
        assert_eq!(body["lock"]["fence"], lock["fence"]);
    }
    let (status, _) = cluster.acquire(speaker, "lease", json!({})).await;
    assert_eq!(
        status, 409,
        "still held after more than a lease, through renewals"
    );
    let (status, body) = cluster
        .post(
            f[1],
            "/v1/locks/renew",
            json!({"name": "lease", "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    // Stop renewing: it lapses on the speaker's clock.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let next = cluster.must_acquire(speaker, "lease", json!({})).await;
    assert!(fence(&next) > fence(&lock));
    let (status, _) = cluster
        .post(
            f[0],
            "/v1/locks/renew",
            json!({"name": "lease", "id": lock["id"]}),
        )
        .await;
    assert_eq!(status, 404, "the lapsed lock is not held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_an_expired_lock_at_its_lease_end() {
    let cluster = Cluster::start(3).await;
    let lock = cluster
        .must_acquire(2, "expiring", json!({"lease_ms": 1000}))
        .await;
    let start = std::time::Instant::now();
    let (status, body) = cluster
        .acquire(3, "expiring", json!({"wait_ms": 20000}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(fence(&body["lock"]) > fence(&lock));
    // A wait that ends with the lock held answers 409.
    let (status, body) = cluster
        .acquire(1, "expiring", json!({"wait_ms": 300}))
        .await;
    assert_eq!(status, 409, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_speaker_keeps_locks_held_through_survivors() {
    let mut cluster = Cluster::start(3).await;
    let (old, old_term) = cluster.speaker().await;
    let f = followers(&cluster, old);
    let a = cluster
        .must_acquire(f[0], "keep/a", json!({"lease_ms": 60000}))
        .await;
    let b = cluster
        .must_acquire(f[1], "keep/b", json!({"lease_ms": 60000}))
        .await;
    let before = fence(&a).max(fence(&b));

    cluster.kill(old);
    let (new, new_term) = cluster.speaker_other_than(Some(old)).await;
    assert_ne!(new, old);
    assert!(new_term > old_term);

    for (lock, name) in [(&a, "keep/a"), (&b, "keep/b")] {
        let (status, body) = cluster
            .get(new, &format!("/v1/locks/{}", name.replace('/', "%2F")))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["id"], lock["id"], "same grant, same id");
        let (status, _) = cluster.acquire(new, name, json!({})).await;
        assert_eq!(status, 409, "still refused to others");
    }
    let fresh = cluster.must_acquire(new, "keep/c", json!({})).await;
    assert!(fence(&fresh) > before, "fences after exceed fences before");
    assert_eq!(fence_term(&fresh), new_term);

    let (_, info) = cluster.get(new, "/v1/cluster").await;
    let report = &info["last_rebuild"];
    assert_eq!(report["term"], json!(new_term));
    assert!(
        report["members_missing"]
            .as_array()
            .unwrap()
            .contains(&json!(old)),
        "{report}"
    );
    assert!(report["locks"].as_u64().unwrap() >= 2);

    // The holder renews through its own node as before.
    let (status, body) = cluster
        .post_settled(
            f[0],
            "/v1/locks/renew",
            json!({"name": "keep/a", "id": a["id"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_speaker_grants_nothing_when_it_wakes() {
    let cluster = Cluster::start(3).await;
    let (old, old_term) = cluster.speaker().await;
    cluster
        .must_acquire(old, "pause/held", json!({"lease_ms": 60000}))
        .await;

    cluster.pause(old);
    let (new, new_term) = cluster.speaker_other_than(Some(old)).await;
    assert!(new_term > old_term);
    let taken = cluster
        .must_acquire(new, "pause/new", json!({"lease_ms": 60000}))
        .await;

    // Thaw and at once ask the old speaker for locks: whatever it answers,
    // it never grants from its own (old) term.
    cluster.resume(old);
    let mut answers = Vec::new();
    for i in 0..20 {
        let (status, body) = cluster
            .post(
                old,
                "/v1/locks/acquire",
                json!({"name": format!("pause/x{i}")}),
            )
            .await;
        answers.push((status, body));
    }
    let (status, body) = cluster
        .post(old, "/v1/locks/acquire", json!({"name": "pause/new"}))
        .await;
    assert_ne!(
        status, 200,
        "a lock held through the new speaker is not granted again: {body}"
    );
    for (status, body) in answers {
        if status == 200 {
            assert!(
                fence_term(&body["lock"]) > old_term,
                "granted in the old term after a pause: {body}"
            );
        } else {
            assert!(status == 503 || status == 0, "{status} {body}");
        }
    }
    let (status, body) = cluster.get(new, "/v1/locks/pause%2Fnew").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lock"]["id"], taken["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_restart_from_their_data_dirs() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = followers(&cluster, speaker)[0];
    cluster.kill(follower);
    cluster.spawn(follower);
    let lock = cluster.must_acquire(follower, "restart/a", json!({})).await;
    assert_eq!(lock["node"], json!(follower));

    let (_, term_before) = cluster.speaker().await;
    for id in cluster.live() {
        cluster.kill(id);
    }
    for id in 1..=3 {
        cluster.spawn(id);
    }
    let (_, term_after) = cluster.speaker().await;
    assert!(
        term_after > term_before,
        "a restarted cluster elects in a new term"
    );
    let next = cluster.must_acquire(1, "restart/b", json!({})).await;
    assert!(fence(&next) > fence(&lock));
}

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
async fn a_five_node_cluster_survives_its_speaker() {
    let mut cluster = Cluster::start(5).await;
    let (old, _) = cluster.speaker().await;
    let f = followers(&cluster, old);
    let mut locks = Vec::new();
    for (i, via) in f.iter().enumerate() {
        locks.push((
            format!("five/{i}"),
            cluster
                .must_acquire(*via, &format!("five/{i}"), json!({"lease_ms": 60000}))
                .await,
        ));
    }
    cluster.kill(old);
    let (new, _) = cluster.speaker_other_than(Some(old)).await;
    for (name, lock) in &locks {
        let (status, body) = cluster
            .get(new, &format!("/v1/locks/{}", name.replace('/', "%2F")))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["id"], lock["id"]);
    }
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

/// Released locks stay released when the speaker dies: no member may report
/// one to the next speaker, whichever nodes its holder went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_locks_stay_released_after_the_speaker_dies() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let lease = json!({"lease_ms": 60000});
    let release = |lock: &Value| json!({"name": lock["name"], "id": lock["id"]});
    let renew = release;

    // Taken and released through the speaker.
    let home = cluster
        .must_acquire(speaker, "gone/home", lease.clone())
        .await;
    // Taken through the speaker, renewed through a follower (which now
    // keeps a record of it), renewed through the speaker again, released
    // through the speaker.
    let moved = cluster
        .must_acquire(speaker, "gone/moved", lease.clone())
        .await;
    // Taken and released through a follower.
    let away = cluster.must_acquire(f[0], "gone/away", lease.clone()).await;
    for (via, body) in [(f[0], renew(&moved)), (speaker, renew(&moved))] {
        let (status, answer) = cluster.post(via, "/v1/locks/renew", body).await;
        assert_eq!(status, 200, "{answer}");
    }
    for (via, lock) in [(speaker, &home), (speaker, &moved), (f[0], &away)] {
        let (status, answer) = cluster.post(via, "/v1/locks/release", release(lock)).await;
        assert_eq!(status, 200, "{answer}");
    }
    // Releases reach the other members in the background.
    tokio::time::sleep(Duration::from_millis(500)).await;

    cluster.kill(speaker);
    let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
    for name in ["gone/home", "gone/moved", "gone/away"] {
        let (status, body) = cluster.acquire(new, name, json!({})).await;
        assert_eq!(status, 200, "{name} came back after its release: {body}");
    }
}

/// A release the lock's node missed while it was cut off from the speaker
/// reaches it once it can be reached again: when that node then speaks, its
/// rebuild does not bring the released lock back, and the name's next
/// holder (through a third node) keeps it instead of being told it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_missed_by_the_locks_node_reaches_it_later() {
    let mut cluster = Cluster::start_with(3, &["--chaos"]).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let (holder_node, other) = (f[0], f[1]);
    let lease = json!({"lease_ms": 60000});
    let body = |lock: &Value| json!({"name": lock["name"], "id": lock["id"]});

    // Taken through F: F keeps a record of it.
    let first = cluster
        .must_acquire(holder_node, "comeback", lease.clone())
        .await;
    // The speaker cannot reach F; the lock is released through G, and G's
    // client takes the name next.
    cluster
        .set_plan(speaker, json!({"drop_to": [holder_node]}))
        .await;
    let (status, answer) = cluster.post(other, "/v1/locks/release", body(&first)).await;
    assert_eq!(status, 200, "{answer}");
    let second = cluster.must_acquire(other, "comeback", lease.clone()).await;
    assert_ne!(second["id"], first["id"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The partition heals; the speaker stays up a few seconds more, then
    // dies. G cannot reach F, so F (which missed the release when it was
    // made) becomes the next speaker and rebuilds from its own record.
    cluster.set_plan(speaker, json!({})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster
        .set_plan(other, json!({"drop_to": [holder_node]}))
        .await;
    cluster.kill(speaker);
    let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
    assert_eq!(new, holder_node, "the test expects F to speak next");
    cluster.set_plan(other, json!({})).await;

    let (status, now) = cluster.get(new, "/v1/locks/comeback").await;
    assert_eq!(status, 200, "{now}");
    assert_eq!(
        now["lock"]["id"], second["id"],
        "the released lock came back at the rebuild"
    );
    let (status, answer) = cluster.post(other, "/v1/locks/renew", body(&second)).await;
    assert_eq!(
        status, 200,
        "the name's next holder was told it lost: {answer}"
    );
}

/// A release is passed on only to the nodes that hold the lock; when the
/// lock's node cannot be reached, the release goes to every other member
/// too, so the next speaker knows of it even if the lock's node never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_locks_node_never_hears_of_reaches_the_next_speaker() {
    let mut cluster = Cluster::start_with(3, &["--chaos"]).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let (holder_node, other) = (f[0], f[1]);
    let lease = json!({"lease_ms": 60000});
    let body = |lock: &Value| json!({"name": lock["name"], "id": lock["id"]});

    let first = cluster
        .must_acquire(holder_node, "unheard", lease.clone())
        .await;
    cluster
        .set_plan(speaker, json!({"drop_to": [holder_node]}))
        .await;
    let (status, answer) = cluster.post(other, "/v1/locks/release", body(&first)).await;
    assert_eq!(status, 200, "{answer}");
    let second = cluster.must_acquire(other, "unheard", lease.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // F never hears of the release and cannot win an election; the speaker
    // dies, and G speaks next, reading F's record of the released lock.
    cluster
        .set_plan(holder_node, json!({"drop_to": [other]}))
        .await;
    cluster.kill(speaker);
    let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
    assert_eq!(new, other, "the test expects G to speak next");

    let (status, now) = cluster.get(new, "/v1/locks/unheard").await;
    assert_eq!(status, 200, "{now}");
    assert_eq!(
        now["lock"]["id"], second["id"],
        "the released lock came back at the rebuild"
    );
    let (status, answer) = cluster.post(other, "/v1/locks/renew", body(&second)).await;
    assert_eq!(status, 200, "the name's next holder lost it: {answer}");
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
