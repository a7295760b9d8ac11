//! Membership at runtime, over real `leasehold serve` processes: nodes
//! join with `--join`, members are removed with `leasehold member remove`
//! (the speaker too), and a lock held throughout is neither lost nor given
//! to another.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Cluster, PATIENCE, PROTOCOL_STAMP, TOKEN};

/// Waits until node `via` shows `voters` as the voters, no change under way.
async fn wait_for_voters(cluster: &Cluster, via: u64, voters: &[u64]) -> Value {
    cluster.wait_for_voters(via, voters).await
}

/// `leasehold member ARGS` against `endpoints`: exit code, stdout, stderr.
fn member(endpoints: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("member")
        .args(args)
        .args(["--endpoints", endpoints])
        .env("LEASEHOLD_CLUSTER_TOKEN", TOKEN)
        .output()
        .expect("run leasehold member");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Renews `lock` through `via` until the cluster serves it (a speaker
/// change answers 503 meanwhile).
async fn renew(cluster: &Cluster, via: u64, lock: &Value) -> (u16, Value) {
    let body = json!({ "name": lock["name"], "id": lock["id"] });
    cluster.post_settled(via, "/v1/locks/renew", body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_the_speaker_is_removed_without_losing_a_lock() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let lock = cluster
        .must_acquire(
            speaker,
            "jobs/kept",
            json!({ "lease_ms": 30_000, "holder": "w1" }),
        )
        .await;

    // Two new nodes, each started with --join only.
    cluster.spawn_joining(4);
    wait_for_voters(&cluster, speaker, &[1, 2, 3, 4]).await;
    cluster.spawn_joining(5);
    let view = wait_for_voters(&cluster, speaker, &[1, 2, 3, 4, 5]).await;
    assert!(
        view["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["lag"].is_u64()),
        "the speaker says how far each member lags: {view}"
    );
    // A member that joined serves clients like any other.
    let other = cluster
        .must_acquire(5, "jobs/through-a-new-node", json!({}))
        .await;
    assert_eq!(other["node"], json!(5));
    // Restarted with neither --peers nor --join, it finds its members in
    // its data directory.
    cluster.restart_bare(5);
    wait_for_voters(&cluster, 5, &[1, 2, 3, 4, 5]).await;
    let again = cluster
        .must_acquire(5, "jobs/after-a-restart", json!({}))
        .await;
    assert_eq!(again["node"], json!(5));

    // The speaker is removed through another node; it hands over and exits.
    let via = if speaker == 1 { 2 } else { 1 };
    let endpoints = cluster.addrs[&via].clone();
    let (code, out, err) = member(&endpoints, &["remove", &speaker.to_string()]);
    assert_eq!(code, Some(0), "member remove: {out}\n{err}");
    assert!(!out.contains(&format!("  {speaker}  ")), "{out}");
    assert_eq!(
        cluster.wait_exit(speaker, PATIENCE),
        Some(0),
        "a removed node stops by itself"
    );
    let left: Vec<u64> = (1..=5).filter(|id| *id != speaker).collect();
    wait_for_voters(&cluster, via, &left).await;
    // Restarted from its data directory, the removed node finds itself
    // gone from its latest configuration, and stops again.
    cluster.restart_bare(speaker);
    assert_eq!(
        cluster.wait_exit(speaker, PATIENCE),
        Some(0),
        "a removed node restarted stops by itself"
    );

    // The lock its holder renews through a remaining node is still its own.
    let (status, renewed) = renew(&cluster, via, &lock).await;
    assert_eq!(
        status, 200,
        "renewal after the speaker's removal: {renewed}"
    );
    assert_eq!(renewed["lock"]["id"], lock["id"]);
    assert_eq!(renewed["lock"]["fence"], lock["fence"]);
    let (status, refused) = cluster
        .acquire(left[0], "jobs/kept", json!({ "holder": "w2" }))
        .await;
    assert_eq!(status, 409, "held by its holder still: {refused}");
}

/// `POST /v1/cluster/members` through `via`, with `token` if given.
async fn post(cluster: &Cluster, via: u64, body: Value, token: Option<&str>) -> (u16, Value) {
    let mut request = cluster
        .http
        .post(cluster.url(via, "/v1/cluster/members"))
        .json(&body)
        .timeout(Duration::from_secs(60));
    if let Some(token) = token {
        request = request.header("x-leasehold-token", token);
    }
    support::answer(request).await
}

/// A removal notice `body`, as the speaker sends it, to `to`.
async fn removal_notice(cluster: &Cluster, to: u64, body: Value) -> (u16, Value) {
    let notice = cluster
        .http
        .post(cluster.url(to, "/internal/removed"))
        .header("x-leasehold-token", TOKEN)
        .header("x-leasehold-from", "99")
        .header("x-leasehold-store", format!("{:032x}", 99))
        .header("x-leasehold-protocol", PROTOCOL_STAMP)
        .json(&body)
        .timeout(Duration::from_secs(5));
    support::answer(notice).await
}

/// `DELETE /v1/cluster/members/{id}` through `via`, with the token.
async fn delete(cluster: &Cluster, via: u64, id: &str) -> (u16, Value) {
    let request = cluster
        .http
        .delete(cluster.url(via, &format!("/v1/cluster/members/{id}")))
        .header("x-leasehold-token", TOKEN)
        .timeout(Duration::from_secs(60));
    support::answer(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_are_refused_with_clear_errors() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let add = |id: u64, addr: &str| json!({ "id": id, "addr": addr });
    let (status, body) = post(&cluster, follower, add(9, "127.0.0.1:9"), None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("unauthorized"))
    );
    let (status, body) = post(&cluster, follower, add(9, "127.0.0.1:9"), Some("wrong")).await;
    assert_eq!(
        (status, body["error"].clone()),
        (401, json!("unauthorized"))
    );
    for bad in [
        json!({ "id": 0, "addr": "127.0.0.1:9" }),
        json!({ "id": 9 }),
        json!({ "id": "9", "addr": "127.0.0.1:9" }),
        json!({ "id": 9, "addr": "no-port" }),
        json!({ "id": -1, "addr": "127.0.0.1:9" }),
    ] {
        let (status, body) = post(&cluster, follower, bad.clone(), Some(TOKEN)).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], json!("bad_request"), "{bad}: {body}");
    }
    let taken = cluster.addrs[&speaker].clone();
    let (status, body) = post(&cluster, follower, add(speaker, "127.0.0.1:9"), Some(TOKEN)).await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("member_exists")),
        "{body}"
    );
    let (status, body) = post(&cluster, follower, add(9, &taken), Some(TOKEN)).await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("member_exists")),
        "{body}"
    );
    let (status, body) = delete(&cluster, follower, "7").await;
    assert_eq!(
        (status, body["error"].clone()),
        (404, json!("unknown_member")),
        "{body}"
    );
    let (status, body) = delete(&cluster, follower, "x").await;
    assert_eq!(status, 400, "{body}");
    // A removal notice for another node (one that had this address, say)
    // does not stop this one.
    let (status, body) = removal_notice(&cluster, follower, json!({ "id": 7, "term": 1 })).await;
    assert_eq!(status, 400, "a notice for node 7: {body}");
    let served = cluster
        .must_acquire(follower, "jobs/still-served", json!({}))
        .await;
    assert_eq!(served["node"], json!(follower));

    // With one member down, removing another would leave two voters of
    // which one answers: refused, and nothing changes.
    let down = cluster.others(speaker)[1];
    cluster.kill(down);
    // Down, as the speaker counts it: no answer for two election timeouts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, body) = delete(&cluster, speaker, &follower.to_string()).await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("would_lose_quorum")),
        "{body}"
    );
    wait_for_voters(&cluster, speaker, &[1, 2, 3]).await;

    // The CLI says so too, with a non-zero exit.
    let endpoints = cluster.addrs[&speaker].clone();
    let (code, _, err) = member(&endpoints, &["remove", &follower.to_string()]);
    assert_ne!(code, Some(0));
    assert!(err.contains("would_lose_quorum"), "{err}");
    let (code, _, err) = member(&endpoints, &["add", "0", "127.0.0.1:9"]);
    assert_eq!(code, Some(64), "bad usage: {err}");
    // The dead member may be removed: two voters that answer remain.
    let (code, out, err) = member(&endpoints, &["remove", &down.to_string()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let left: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != down).collect();
    wait_for_voters(&cluster, speaker, &left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_replaced_by_a_new_one_and_the_locks_stay() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let [holder_node, dead] = [cluster.others(speaker)[0], cluster.others(speaker)[1]];
    let through_follower = cluster
        .must_acquire(
            holder_node,
            "jobs/via-follower",
            json!({ "lease_ms": 30_000 }),
        )
        .await;
    let through_speaker = cluster
        .must_acquire(speaker, "jobs/via-speaker", json!({ "lease_ms": 30_000 }))
        .await;

    // A machine dies for good: it is removed, and a new one joins.
    cluster.kill(dead);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let endpoints = cluster.addrs[&holder_node].clone();
    let (code, out, err) = member(&endpoints, &["remove", &dead.to_string()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    cluster.spawn_joining(4);
    let mut voters = vec![speaker, holder_node, 4];
    voters.sort_unstable();
    wait_for_voters(&cluster, speaker, &voters).await;

    // Both locks are still their holders', and renew where they were taken.
    for (via, lock) in [
        (holder_node, &through_follower),
        (speaker, &through_speaker),
    ] {
        let (status, renewed) = renew(&cluster, via, lock).await;
        assert_eq!(status, 200, "renewal of {}: {renewed}", lock["name"]);
        assert_eq!(renewed["lock"]["fence"], lock["fence"]);
        let (status, refused) = cluster
            .acquire(4, lock["name"].as_str().unwrap(), json!({}))
            .await;
        assert_eq!(status, 409, "held still: {refused}");
    }
    // The new member takes locks for its own clients.
    let mine = cluster
        .must_acquire(4, "jobs/via-new-node", json!({}))
        .await;
    assert_eq!(mine["node"], json!(4));

    // Within a lease of the removal, the next speaker's rebuild still
    // accounts for the removed node (read, or missing), whichever member
    // speaks: node 4, which joined after it left, learns of it from the
    // others' reports.
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, view) = cluster.get(next, "/v1/cluster").await;
    let report = &view["last_rebuild"];
    let named = |key: &str| {
        report[key]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == &json!(dead))
    };
    assert!(
        named("members_read") || named("members_missing"),
        "node {next}'s rebuild forgot the departed node {dead}: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_shrinks_from_five_to_three_a_lease_apart_the_speaker_last() {
    const LEASE: Duration = Duration::from_millis(6000);
    let lease = LEASE.as_millis().to_string();
    let flags = ["--max-lease", &lease, "--default-lease", &lease];
    let mut cluster = Cluster::start_with(5, &flags).await;
    let (speaker, _) = cluster.speaker().await;
    let holder_node = cluster.others(speaker)[0];
    let lock = cluster
        .must_acquire(holder_node, "jobs/through-the-shrink", json!({}))
        .await;
    let endpoints = cluster.addrs[&holder_node].clone();
    let mut voters: Vec<u64> = (1..=5).collect();
    // Two followers other than the holder's node, then the speaker: one
    // removal at a time, a lease apart, as docs/operations.md says.
    let mut gone: Vec<u64> = cluster
        .others(speaker)
        .into_iter()
        .filter(|id| *id != holder_node)
        .take(1)
        .collect();
    gone.push(speaker);
    for (step, id) in gone.into_iter().enumerate() {
        if step > 0 {
            // A lease's wait, the holder renewing meanwhile.
            let until = Instant::now() + LEASE + Duration::from_millis(500);
            while Instant::now() < until {
                tokio::time::sleep(LEASE / 4).await;
                let (status, renewed) = renew(&cluster, holder_node, &lock).await;
                assert_eq!(status, 200, "renewal while waiting: {renewed}");
            }
        }
        let (status, renewed) = renew(&cluster, holder_node, &lock).await;
        assert_eq!(status, 200, "renewal before removing {id}: {renewed}");
        let (code, out, err) = member(&endpoints, &["remove", &id.to_string()]);
        assert_eq!(code, Some(0), "remove {id}: {out}\n{err}");
        assert_eq!(cluster.wait_exit(id, PATIENCE), Some(0), "{id} stops");
        voters.retain(|v| *v != id);
        wait_for_voters(&cluster, holder_node, &voters).await;
        let (status, renewed) = renew(&cluster, holder_node, &lock).await;
        assert_eq!(status, 200, "renewal after removing {id}: {renewed}");
        assert_eq!(renewed["lock"]["fence"], lock["fence"]);
    }
    assert_eq!(voters.len(), 3);
    let other = voters.iter().copied().find(|v| *v != holder_node).unwrap();
    let (status, refused) = cluster
        .acquire(other, "jobs/through-the-shrink", json!({}))
        .await;
    assert_eq!(status, 409, "still its holder's: {refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_that_joined_is_refused_when_it_joins_again_without_removal() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    cluster.spawn_joining(4);
    wait_for_voters(&cluster, speaker, &[1, 2, 3, 4]).await;
    // Its disk is wiped and it asks again through a follower that may
    // never have heard from it: the log says which directory node 4 is on.
    let follower = (1..=3).find(|n| *n != speaker).unwrap();
    cluster.rejoin_wiped_through(4, &[follower]);
    let code = cluster.wait_exit(4, PATIENCE);
    assert!(
        matches!(code, Some(c) if c != 0),
        "a wiped member joining again must stop: {code:?}\n{}",
        cluster.log(4)
    );
    assert!(
        cluster.log(4).contains("wiped or replaced"),
        "{}",
        cluster.log(4)
    );
    wait_for_voters(&cluster, speaker, &[1, 2, 3, 4]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_again_under_its_id_ignores_the_notice_of_its_old_removal() {
    let lease = ["--max-lease", "3000", "--default-lease", "3000"];
    let mut cluster = Cluster::start_with(3, &lease).await;
    let (speaker, term) = cluster.speaker().await;
    let back = cluster.others(speaker)[0];
    let (status, body) = delete(&cluster, speaker, &back.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        cluster.wait_exit(back, PATIENCE),
        Some(0),
        "a removed node stops by itself"
    );
    // For a longest lease after it left, a rebuild still reads its old
    // incarnation: the id is not added again meanwhile.
    let addr = cluster.addrs[&back].clone();
    let again = json!({ "id": back, "addr": addr });
    let (status, body) = post(&cluster, speaker, again, Some(TOKEN)).await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("change_in_progress")),
        "{body}"
    );
    // Its machine is rebuilt and added again under the same id and
    // address; it asks until the window has passed.
    cluster.rejoin_wiped(back);
    wait_for_voters(&cluster, speaker, &[1, 2, 3]).await;

    // The notice of the old removal arrives late (the speaker retries it
    // while the node is down): the node was added since, and serves on.
    let old = json!({ "id": back, "term": term, "config": 1, "config_term": 1 });
    let (status, body) = removal_notice(&cluster, back, old).await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("member_exists")),
        "{body}"
    );
    let served = cluster
        .must_acquire(back, "jobs/after-rejoining", json!({}))
        .await;
    assert_eq!(served["node"], json!(back));
    let (_, view) = cluster.get(back, "/v1/cluster").await;
    assert_eq!(view["leader"], json!(speaker), "{view}");
}

/// The members a cluster was formed with are named in the log with their
/// data directories too (the speaker writes what it saw of each), so a
/// member that joins later, and never heard from one of them, still
/// refuses another directory under that id: a wiped member coming back
/// there would otherwise be admitted and could vote a second time in a
/// term it forgot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_joins_knows_every_members_directory_from_the_log() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let quiet = cluster.others(speaker)[0];
    // The speaker names each member's directory in the log within a few
    // seconds of taking office (every 2 s it looks for one unnamed).
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Node 4 joins while `quiet` is stopped: it hears of `quiet` from the
    // log only.
    cluster.pause(quiet);
    cluster.spawn_joining(4);
    wait_for_voters(&cluster, speaker, &[1, 2, 3, 4]).await;
    let (status, body, refused) = {
        let response = cluster
            .http
            .post(cluster.url(4, "/internal/identity"))
            .header("x-leasehold-token", TOKEN)
            .header("x-leasehold-from", quiet.to_string())
            .header("x-leasehold-store", format!("{:032x}", 0x5eed_u128))
            .header("x-leasehold-protocol", PROTOCOL_STAMP)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("node 4 answers");
        let refused = response
            .headers()
            .get("x-leasehold-refused")
            .map(|v| v.to_str().unwrap().to_string());
        let status = response.status().as_u16();
        (status, response.text().await.unwrap(), refused)
    };
    cluster.resume(quiet);
    assert_eq!(
        status, 409,
        "another directory under node {quiet}'s id is refused: {body}"
    );
    assert_eq!(refused.as_deref(), Some("store"), "{body}");
    wait_for_voters(&cluster, 4, &[1, 2, 3, 4]).await;
}
