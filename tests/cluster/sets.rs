//! Sets of names over a real cluster: granted whole through every node with
//! consecutive fences, first come first served on every name, refused
//! whole, and kept whole by a crash of the speaker.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::followers;
use crate::support::{fence, Cluster};

/// Acquires the set `names` through `via`, with `extra` fields.
async fn acquire_set(cluster: &Cluster, via: u64, names: &[&str], extra: Value) -> (u16, Value) {
    let mut body = json!({ "names": names });
    if let Value::Object(map) = extra {
        body.as_object_mut().unwrap().extend(map);
    }
    cluster.post_settled(via, "/v1/locks/acquire", body).await
}

/// The locks of a granted set, checked whole: one per name in the order
/// asked, with consecutive fences, `lock` the first.
fn granted_whole(body: &Value, names: &[&str]) -> Vec<Value> {
    let locks = body["locks"].as_array().expect("a set's locks").clone();
    let got: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(got, names, "{body}");
    assert_eq!(body["lock"], locks[0], "{body}");
    let fences: Vec<u64> = locks.iter().map(fence).collect();
    assert!(
        fences.windows(2).all(|w| w[1] == w[0] + 1),
        "granted in one step: {fences:?}"
    );
    locks
}

fn release(lock: &Value) -> Value {
    json!({ "name": lock["name"], "id": lock["id"] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_granted_whole_through_every_node_and_refused_whole() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let mut all = Vec::new();
    for (i, via) in [speaker, f[0], f[1]].into_iter().enumerate() {
        let names = [format!("s{i}-c"), format!("s{i}-a"), format!("s{i}-b")];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (status, body) = acquire_set(&cluster, via, &names, json!({ "lease_ms": 60000 })).await;
        assert_eq!(status, 200, "via {via}: {body}");
        all.extend(granted_whole(&body, &names));
    }
    // Each lock is an ordinary lock: read and renewed by name and id
    // through any node.
    for lock in &all {
        let name = lock["name"].as_str().unwrap();
        let (status, body) = cluster.get(f[1], &format!("/v1/locks/{name}")).await;
        assert_eq!((status, &body["lock"]["id"]), (200, &lock["id"]), "{body}");
    }
    // One name held: the set without a wait is refused, naming the
    // holder, and takes none of the free names.
    let (status, body) =
        acquire_set(&cluster, f[0], &["free-1", "s0-a", "free-2"], json!({})).await;
    assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
    assert_eq!(body["lock"]["name"], json!("s0-a"), "{body}");
    for name in ["free-1", "free-2"] {
        let (status, body) = cluster.get(speaker, &format!("/v1/locks/{name}")).await;
        assert_eq!(status, 404, "{name} was not taken: {body}");
    }
    for bad in [
        json!({ "names": [] }),
        json!({ "names": ["x", "x"] }),
        json!({ "names": ["x"], "name": "y" }),
        json!({ "names": "x" }),
        json!({ "names": ["x", 1] }),
        json!({ "names": ["ok", ""] }),
        json!({ "names": (0..65).map(|i| format!("n{i}")).collect::<Vec<_>>() }),
    ] {
        let (status, body) = cluster.post(f[0], "/v1/locks/acquire", bad.clone()).await;
        assert_eq!(
            (status, &body["error"]),
            (400, &json!("bad_request")),
            "{bad}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_set_is_not_overtaken_and_two_sets_in_opposite_orders_both_go() {
    let cluster = Arc::new(Cluster::start(3).await);
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let b = cluster
        .must_acquire(speaker, "b", json!({ "lease_ms": 60000 }))
        .await;
    let spawn_set = |via: u64, names: [&'static str; 2], holder: &'static str| {
        let c = Arc::clone(&cluster);
        tokio::spawn(async move {
            acquire_set(
                &c,
                via,
                &names,
                json!({ "wait_ms": 30000, "holder": holder, "lease_ms": 60000 }),
            )
            .await
        })
    };
    let first = spawn_set(f[0], ["a", "b"], "first");
    let mut queued = Value::Null;
    for _ in 0..100 {
        let (_, body) = cluster.get(f[1], "/v1/locks/b").await;
        if body["lock"]["waiters"] == json!(1) {
            queued = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        queued["lock"]["queue"][0]["holder"],
        json!("first"),
        "{queued}"
    );
    assert_eq!(queued["lock"]["queue"][0]["with"], json!(["a"]), "{queued}");
    let second = spawn_set(f[1], ["b", "a"], "second");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // `a` is free, but the first set waits for it: a try does not
    // overtake it.
    let (status, body) = cluster.acquire(f[1], "a", json!({})).await;
    assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");

    let (status, body) = cluster
        .post(speaker, "/v1/locks/release", release(&b))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let first_locks = granted_whole(&body, &["a", "b"]);
    assert!(fence(&first_locks[0]) > fence(&b));
    for lock in &first_locks {
        let (status, body) = cluster.post(f[0], "/v1/locks/release", release(lock)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = second.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let second_locks = granted_whole(&body, &["b", "a"]);
    assert!(fence(&second_locks[0]) > fence(&first_locks[1]));
}

/// One crash of the speaker keeps every lock of a set, each with its
/// fence: the next speaker refuses each name, and the holder renews them
/// all through the nodes still up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_crash_keeps_every_lock_of_a_set() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let mut sets = Vec::new();
    for (i, via) in [speaker, f[0], f[1]].into_iter().enumerate() {
        let names = [format!("k{i}/x"), format!("k{i}/y"), format!("k{i}/z")];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (status, body) = acquire_set(&cluster, via, &names, json!({ "lease_ms": 60000 })).await;
        assert_eq!(status, 200, "{body}");
        sets.push(granted_whole(&body, &names));
    }
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let survivor = cluster
        .others(next)
        .into_iter()
        .find(|&n| n != speaker)
        .unwrap();
    for lock in sets.iter().flatten() {
        let name = lock["name"].as_str().unwrap();
        let (status, body) = cluster.acquire(survivor, name, json!({})).await;
        assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
        assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
    }
    let (status, body) = acquire_set(&cluster, next, &["k0/x", "new"], json!({})).await;
    assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
    for lock in sets.iter().flatten() {
        let renew = json!({ "name": lock["name"], "id": lock["id"] });
        let (status, body) = cluster.post(survivor, "/v1/locks/renew", renew).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
    }
}

/// Routine change, then a fault: a set held through one follower, the other
/// follower stopped with SIGTERM (it hands its records over) and started
/// again, then the speaker killed. Every lock of the set stays its
/// holder's, with its fence, and no name of it is granted to another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_then_a_speaker_crash_keeps_a_set_whole() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (holder, other) = (others[0], others[1]);
    let names = ["r-x", "r-y", "r-z"];
    let (status, body) = acquire_set(
        &cluster,
        holder,
        &names,
        json!({ "lease_ms": 20000, "holder": "w1" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let locks = granted_whole(&body, &names);
    assert_eq!(cluster.terminate(other, crate::support::PATIENCE), Some(0));
    cluster.spawn(other);
    cluster.all_follow_one().await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    for lock in &locks {
        let name = lock["name"].as_str().unwrap();
        let rival = json!({ "name": name, "holder": "w2" });
        let (status, body) = cluster.post_settled(next, "/v1/locks/acquire", rival).await;
        assert_eq!((status, &body["error"]), (409, &json!("held")), "{body}");
        let renew = json!({ "name": lock["name"], "id": lock["id"] });
        let (status, renewed) = cluster.post_settled(holder, "/v1/locks/renew", renew).await;
        assert_eq!(status, 200, "{renewed}");
        assert_eq!(renewed["lock"]["fence"], lock["fence"], "{renewed}");
    }
}
