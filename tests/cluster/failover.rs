//! Failover: a killed or paused speaker, restarts from the data
//! directories, and releases the next speaker must know of.

use std::time::Duration;

use serde_json::{json, Value};

use super::followers;
use crate::support::{fence, fence_term, Cluster};

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
async fn a_speaker_no_quorum_answers_says_so_and_grants_nothing() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let held = cluster
        .must_acquire(speaker, "quiet/held", json!({"lease_ms": 60000}))
        .await;
    // A request waiting for the held lock, at the speaker.
    let waiting = {
        let http = reqwest::Client::new();
        let url = cluster.url(speaker, "/v1/locks/acquire");
        tokio::spawn(async move {
            let answer = http
                .post(url)
                .json(&json!({"name": "quiet/held", "wait_ms": 20000}))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let silent = followers(&cluster, speaker);
    for &f in &silent {
        cluster.pause(f);
    }
    // Past the leader lease (300 ms): no quorum acknowledged it since.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, body) = cluster
        .post(speaker, "/v1/locks/acquire", json!({"name": "quiet/new"}))
        .await;
    let turned_away = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let unconfirmed = cluster
        .metric(speaker, "leasehold_unavailable_total{why=\"unconfirmed\"}")
        .await;
    for &f in &silent {
        cluster.resume(f);
    }
    let (waited_status, waited) = turned_away
        .expect("the waiting request is answered while the members are silent")
        .unwrap();
    for (status, body) in [(status, &body), (waited_status, &waited)] {
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"], "not_rebuilt", "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("has not heard from a quorum"),
            "the answer names why: {body}"
        );
    }
    assert_eq!(unconfirmed, Some(2.0), "counted by why");

    // Once its members answer again, the cluster serves, and the lock
    // held before is still held.
    cluster
        .must_acquire(speaker, "quiet/after", json!({"lease_ms": 60000}))
        .await;
    let (new, _) = cluster.speaker().await;
    let (status, body) = cluster.get(new, "/v1/locks/quiet%2Fheld").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lock"]["id"], held["id"]);
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
