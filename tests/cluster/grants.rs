//! Granting: a cluster forms, grants and forwards, serves its waiters in
//! order, renews and lets an unrenewed lock expire.

use std::time::Duration;

use serde_json::{json, Value};

use super::followers;
use crate::support::{fence, fence_term, Cluster, PATIENCE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_forms_grants_and_forwards() {
    let cluster = Cluster::start(3).await;
    let (speaker, term) = cluster.speaker().await;
    let f = followers(&cluster, speaker);

    // A follower learns that the first configuration is committed with the
    // speaker's next message: until then it says `changing` (seen in CI on
    // a loaded machine), and it must stop saying so.
    let asked = std::time::Instant::now();
    let info = loop {
        let (status, info) = cluster.get(f[0], "/v1/cluster").await;
        assert_eq!(status, 200);
        if info["changing"] == json!(false) {
            break info;
        }
        assert!(asked.elapsed() < PATIENCE, "still changing: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(info["leader"], json!(speaker));
    assert_eq!(info["members"].as_array().unwrap().len(), 3);
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
    cluster.wait_protocol(crate::support::SPEAKS).await;
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
