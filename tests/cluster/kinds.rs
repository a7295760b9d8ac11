//! Shared locks and semaphores over a real cluster: who holds together,
//! who waits behind whom, what a kind that does not fit is told, and what
//! a crash of the speaker keeps.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::followers;
use crate::support::{fence, Cluster};

/// Every holder of `name` as `via` shows it: the lock and its `others`.
async fn holders(cluster: &Cluster, via: u64, name: &str) -> Vec<Value> {
    let (status, body) = cluster.get(via, &format!("/v1/locks/{name}")).await;
    assert_eq!(status, 200, "{body}");
    let lock = &body["lock"];
    let mut all = vec![lock.clone()];
    if let Some(others) = lock["others"].as_array() {
        all.extend(others.iter().cloned());
    }
    all
}

fn fences(locks: &[Value]) -> Vec<u64> {
    let mut f: Vec<u64> = locks.iter().map(fence).collect();
    f.sort_unstable();
    f
}

fn release(lock: &Value) -> Value {
    json!({ "name": lock["name"], "id": lock["id"] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_together_and_a_writer_waits_for_them_through_every_node() {
    let cluster = Arc::new(Cluster::start(3).await);
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let reader = json!({ "shared": true, "lease_ms": 60000 });
    let r1 = cluster.must_acquire(speaker, "doc", reader.clone()).await;
    let r2 = cluster.must_acquire(f[0], "doc", reader.clone()).await;
    assert_eq!(
        (&r1["mode"], &r2["mode"]),
        (&json!("shared"), &json!("shared"))
    );
    assert!(fence(&r2) > fence(&r1));

    // A writer waits for both readers, through a follower.
    let writer = {
        let c = Arc::clone(&cluster);
        let via = f[1];
        tokio::spawn(async move {
            c.acquire(via, "doc", json!({ "wait_ms": 30000, "holder": "writer" }))
                .await
        })
    };
    let mut queued = Value::Null;
    for _ in 0..100 {
        let (_, body) = cluster.get(f[0], "/v1/locks/doc").await;
        if body["lock"]["waiters"] == json!(1) {
            queued = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        queued["lock"]["queue"][0]["holder"],
        json!("writer"),
        "{queued}"
    );
    assert_eq!(
        queued["lock"]["others"].as_array().map(Vec::len),
        Some(1),
        "the get shows both readers: {queued}"
    );
    // A reader after the waiting writer does not overtake it.
    let (status, body) = cluster
        .post(
            f[0],
            "/v1/locks/acquire",
            json!({ "name": "doc", "shared": true }),
        )
        .await;
    assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
    // The listing shows the mode and every holder.
    let (_, listing) = cluster.get(f[1], "/v1/locks?prefix=doc").await;
    let listed = &listing["locks"][0];
    assert_eq!(listed["mode"], json!("shared"), "{listing}");
    assert_eq!(
        listed["others"].as_array().map(Vec::len),
        Some(1),
        "{listing}"
    );

    for (via, lock) in [(speaker, &r1), (f[0], &r2)] {
        let (status, body) = cluster.post(via, "/v1/locks/release", release(lock)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = writer.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body["lock"]["mode"].is_null(),
        "a writer is exclusive: {body}"
    );
    assert!(fence(&body["lock"]) > fence(&r2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_grants_its_permits_and_refuses_what_does_not_fit() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let permit = json!({ "permits": 2, "lease_ms": 60000 });
    let p1 = cluster.must_acquire(f[0], "pool", permit.clone()).await;
    let p2 = cluster.must_acquire(f[1], "pool", permit.clone()).await;
    assert_eq!((&p1["mode"], &p1["permits"]), (&json!("permit"), &json!(2)));
    let (status, body) = cluster
        .post(
            speaker,
            "/v1/locks/acquire",
            json!({ "name": "pool", "permits": 2 }),
        )
        .await;
    assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
    for (via, kind) in [
        (speaker, json!({ "name": "pool", "permits": 3 })),
        (
            f[0],
            json!({ "name": "pool", "shared": true, "wait_ms": 5000 }),
        ),
        (f[1], json!({ "name": "pool", "wait_ms": 5000 })),
    ] {
        let (status, body) = cluster.post(via, "/v1/locks/acquire", kind).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &json!("kind_mismatch")),
            "refused at once, not queued: {body}"
        );
    }
    for bad in [
        json!({ "name": "x", "permits": 0 }),
        json!({ "name": "x", "permits": 1_000_001 }),
        json!({ "name": "x", "permits": "2" }),
        json!({ "name": "x", "permits": 2, "shared": true }),
        json!({ "name": "x", "shared": "yes" }),
    ] {
        let (status, body) = cluster.post(f[0], "/v1/locks/acquire", bad.clone()).await;
        assert_eq!(
            (status, &body["error"]),
            (400, &json!("bad_request")),
            "{bad}: {body}"
        );
    }
    assert_eq!(
        fences(&holders(&cluster, f[0], "pool").await),
        fences(&[p1.clone(), p2])
    );
    let (status, _) = cluster.post(f[0], "/v1/locks/release", release(&p1)).await;
    assert_eq!(status, 200);
    let p3 = cluster.must_acquire(speaker, "pool", permit).await;
    assert!(fence(&p3) > fence(&p1));
}

/// One crash of the speaker loses no reader and no permit: the next
/// speaker rebuilds every holder of each name from the members, and
/// still refuses a writer and a permit past the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_crash_keeps_every_reader_and_permit() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let mut readers = Vec::new();
    let mut permits = Vec::new();
    for via in [speaker, f[0], f[1]] {
        let reader = json!({ "shared": true, "lease_ms": 60000 });
        readers.push(cluster.must_acquire(via, "doc", reader).await);
        let permit = json!({ "permits": 3, "lease_ms": 60000 });
        permits.push(cluster.must_acquire(via, "pool", permit).await);
    }
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let survivor = cluster
        .others(next)
        .into_iter()
        .find(|&n| n != speaker)
        .unwrap();
    for via in [next, survivor] {
        let (status, body) = cluster
            .post(
                via,
                "/v1/locks/acquire",
                json!({ "name": "doc", "wait_ms": 0 }),
            )
            .await;
        assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
        let (status, body) = cluster
            .post(
                via,
                "/v1/locks/acquire",
                json!({ "name": "pool", "permits": 3 }),
            )
            .await;
        assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
    }
    assert_eq!(
        fences(&holders(&cluster, next, "doc").await),
        fences(&readers)
    );
    assert_eq!(
        fences(&holders(&cluster, survivor, "pool").await),
        fences(&permits)
    );
    // Their holders renew them through the nodes still up.
    for lock in readers.iter().chain(&permits) {
        let renew = json!({ "name": lock["name"], "id": lock["id"] });
        let (status, body) = cluster.post(survivor, "/v1/locks/renew", renew).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
    }
}
