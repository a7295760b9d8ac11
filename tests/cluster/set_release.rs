//! A set's release in one call (`POST /v1/locks/release` with `locks`)
//! over a real cluster: through a follower it frees every name at once (a
//! rival waiting for them is granted them all), a repeat is `404
//! not_held` as a single release's repeat is, a partial one lists what was
//! not held, bad sets are `400` with nothing released, and a cluster below
//! protocol 7 (whose follower releases the locks one call each) answers
//! the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::followers;
use crate::support::{Cluster, SPEAKS};

/// Takes the set `names` through `via`, with a minute's lease: its locks,
/// as the answer gave them.
async fn take_set(cluster: &Cluster, via: u64, names: &[&str]) -> Vec<Value> {
    let body = json!({ "names": names, "lease_ms": 60000, "holder": "owner" });
    let (status, body) = cluster.post_settled(via, "/v1/locks/acquire", body).await;
    assert_eq!(status, 200, "{body}");
    body["locks"].as_array().unwrap().clone()
}

/// The names of `locks`, in order.
fn names_of(locks: &Value) -> Vec<String> {
    locks
        .as_array()
        .unwrap_or_else(|| panic!("locks: {locks}"))
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect()
}

/// A set taken through the follower `via`, released there in one call
/// while a rival waits for all of it through `rival`: the answer names
/// every lock released, the rival is granted the whole set at once, a
/// repeat is `404 not_held`, and a release of the rival's set with one
/// stale lock among them releases the rest and lists the stale one.
async fn released_whole(cluster: &Arc<Cluster>, via: u64, rival: u64, prefix: &str) {
    let names: Vec<String> = ["c", "a", "b"]
        .iter()
        .map(|n| format!("{prefix}/{n}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let locks = take_set(cluster, via, &names).await;
    let waiting = {
        let cluster = Arc::clone(cluster);
        let body =
            json!({ "names": names, "wait_ms": 20000, "lease_ms": 60000, "holder": "rival" });
        tokio::spawn(async move { cluster.post(rival, "/v1/locks/acquire", body).await })
    };
    // The rival waits in every name's queue before the release.
    let started = Instant::now();
    loop {
        let (_, body) = cluster.get(via, &format!("/v1/locks/{prefix}%2Fb")).await;
        if body["lock"]["waiters"] == json!(1) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The answer's locks are sent back as they came.
    let release = json!({ "locks": locks });
    let (status, body) = cluster
        .post(via, "/v1/locks/release", release.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names_of(&body["locks"]), names, "{body}");
    assert_eq!(body["lock"], body["locks"][0], "{body}");
    assert!(body.get("not_held").is_none(), "{body}");
    for (released, taken) in body["locks"].as_array().unwrap().iter().zip(&locks) {
        assert_eq!(
            (&released["id"], &released["fence"]),
            (&taken["id"], &taken["fence"])
        );
    }
    let (status, granted) = waiting.await.unwrap();
    assert_eq!(status, 200, "the rival is granted the whole set: {granted}");
    assert_eq!(names_of(&granted["locks"]), names, "{granted}");
    for lock in granted["locks"].as_array().unwrap() {
        assert_eq!(lock["holder"], json!("rival"), "{granted}");
    }
    // A repeat finds none held: as a single release's repeat.
    let (status, body) = cluster.post(via, "/v1/locks/release", release).await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("not_held")),
        "{body}"
    );
    let single = json!({ "name": locks[0]["name"], "id": locks[0]["id"] });
    let (status, body) = cluster.post(via, "/v1/locks/release", single).await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("not_held")),
        "{body}"
    );
    // The rival's set with a stale lock (the owner's, released) first:
    // the rival's are released, the stale one listed.
    let rivals = granted["locks"].as_array().unwrap();
    let mixed = json!({ "locks": [
        { "name": locks[0]["name"], "id": locks[0]["id"] },
        { "name": rivals[1]["name"], "id": rivals[1]["id"] },
        { "name": rivals[2]["name"], "id": rivals[2]["id"] },
    ] });
    let (status, body) = cluster.post(via, "/v1/locks/release", mixed).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names_of(&body["locks"]), names[1..], "{body}");
    assert_eq!(
        body["not_held"],
        json!([{ "name": locks[0]["name"], "id": locks[0]["id"] }]),
        "{body}"
    );
    for name in &names[1..] {
        let (status, body) = cluster
            .get(rival, &format!("/v1/locks/{}", name.replace('/', "%2F")))
            .await;
        assert_eq!(status, 404, "{name} is free: {body}");
    }
    let (status, _) = cluster.get(rival, &format!("/v1/locks/{prefix}%2Fc")).await;
    assert_eq!(status, 200, "the rival's lock of the stale name is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_released_in_one_call_through_a_follower_frees_every_name() {
    let cluster = Arc::new(Cluster::start(3).await);
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    released_whole(&cluster, f[0], f[1], "one").await;
    released_whole(&cluster, speaker, f[0], "here").await;

    // Bad sets are 400 with a JSON body, and release nothing.
    let locks = take_set(&cluster, f[0], &["bad/a", "bad/b"]).await;
    let one = |i: usize| json!({ "name": locks[i]["name"], "id": locks[i]["id"] });
    let many: Vec<Value> = (0..65)
        .map(|i| json!({ "name": format!("bad/{i}"), "id": locks[0]["id"] }))
        .collect();
    for bad in [
        json!({ "locks": [] }),
        json!({ "locks": many }),
        json!({ "locks": [one(0)], "name": "bad/b" }),
        json!({ "locks": [one(0)], "id": locks[1]["id"] }),
        json!({ "locks": [one(0)], "name": "bad/b", "id": locks[1]["id"] }),
        json!({ "locks": [one(0), { "name": "bad/b" }] }),
        json!({ "locks": [one(0), { "name": "bad/b", "id": "nope" }] }),
        json!({ "locks": [one(0), ["bad/b", locks[1]["id"]]] }),
        json!({ "locks": one(0) }),
    ] {
        for via in [f[0], speaker] {
            let (status, body) = cluster.post(via, "/v1/locks/release", bad.clone()).await;
            assert_eq!(
                (status, &body["error"]),
                (400, &json!("bad_request")),
                "{bad}: {body}"
            );
            assert!(body["message"].as_str().is_some(), "{body}");
        }
    }
    for lock in &locks {
        let name = lock["name"].as_str().unwrap().replace('/', "%2F");
        let (status, body) = cluster.get(speaker, &format!("/v1/locks/{name}")).await;
        assert_eq!((status, &body["lock"]["id"]), (200, &lock["id"]), "{body}");
    }

    // A name may come twice: the same lock is released once and its
    // second item is not held; two permits of one semaphore both go.
    for via in [f[0], speaker] {
        let (status, body) = cluster
            .post(
                via,
                "/v1/locks/release",
                json!({ "locks": [one(0), one(0)] }),
            )
            .await;
        if via == f[0] {
            assert_eq!(status, 200, "{body}");
            assert_eq!(names_of(&body["locks"]), ["bad/a"], "{body}");
            assert_eq!(body["not_held"], json!([one(0)]), "{body}");
        } else {
            assert_eq!(
                (status, &body["error"]),
                (404, &json!("not_held")),
                "{body}"
            );
        }
    }
    let mut permits = Vec::new();
    for via in [f[0], f[1]] {
        let body = json!({ "name": "sem/x", "permits": 2, "lease_ms": 60000 });
        let (status, body) = cluster.post_settled(via, "/v1/locks/acquire", body).await;
        assert_eq!(status, 200, "{body}");
        permits.push(json!({ "name": "sem/x", "id": body["lock"]["id"] }));
    }
    let (status, body) = cluster
        .post(f[0], "/v1/locks/release", json!({ "locks": permits }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names_of(&body["locks"]), ["sem/x", "sem/x"], "{body}");
    let (status, _) = cluster.get(speaker, "/v1/locks/sem%2Fx").await;
    assert_eq!(status, 404, "both permits released");
}

/// A cluster below protocol 7 (its members held at 6, the version before
/// set releases): a follower releases a set one call per lock, and the
/// client sees the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_below_protocol_7_releases_a_set_the_same() {
    let below = (SPEAKS - 1).to_string();
    let cluster = Cluster::start_each(3, &[], |_| vec!["--protocol".into(), below.clone()]).await;
    cluster.wait_protocol(SPEAKS - 1).await;
    let cluster = Arc::new(cluster);
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    released_whole(&cluster, f[0], f[1], "old").await;
}
