//! Upgrades and protocol versions over real processes.
//!
//! The rolling upgrade starts a 3-node cluster of an earlier commit of this
//! repository (built once in a git worktree under the target directory,
//! with a target directory of its own, kept between runs), and upgrades it
//! one node at a time to this build while holders renew their locks and
//! rivals ask for them: nothing held is lost, nothing is granted twice,
//! every stop exits 0, and the cluster agrees on this build's protocol
//! only once every member runs it. Then the speaker is killed. A second
//! walk starts from the first build that speaks sessions (protocol 6) and
//! keeps a client's session renewed throughout, its locks taken through
//! every node.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Cluster, PATIENCE};

use support::sessions::{held_everywhere, open, renew_holding, take, Keeper};
use support::SPEAKS;

/// The earlier build the upgrade starts from: the last commit before
/// protocol versions (it sends no version header: it speaks version 0).
const BASE: &str = "61717f87cab6b650b61c62b9aeceeedfba1ebf30";

/// The earlier build the upgrade with a session held starts from: a commit
/// that speaks protocol 6, sessions (its last change: the protocol tests'
/// rebuild helper).
const SESSIONS_BASE: &str = "c2ec208b53165622b4ca5f45ad356bc4f3fc0ab2";

/// The protocol version that serves sessions.
const SESSIONS: u64 = 6;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(command: &mut Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `leasehold` binary of the earlier commit `base`: checked out in a
/// git worktree under the target directory and built there with a target
/// directory of its own, once (later runs find it). One base at a time:
/// the walks run side by side, and share the repository's worktrees.
fn base_binary(base: &str) -> PathBuf {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        root().join(target)
    };
    // A target directory of its own for each earlier commit: cargo names
    // a workspace's artifacts by their paths within it, the same in every
    // worktree, so a shared one could hand one commit's build to another.
    let cache = target.join("upgrade-base").join(base);
    let (src, built) = (cache.join("src"), cache.join("target"));
    let binary = built.join("debug").join("leasehold");
    if binary.exists() {
        return binary;
    }
    if !src.join("Cargo.toml").exists() {
        let _ = std::fs::remove_dir_all(&src);
        run(
            Command::new("git")
                .arg("-C")
                .arg(root())
                .args(["worktree", "prune"]),
            "git worktree prune",
        );
        run(
            Command::new("git")
                .arg("-C")
                .arg(root())
                .args(["worktree", "add", "--detach"])
                .arg(&src)
                .arg(base),
            "check the earlier commit out (a clone with its history is needed)",
        );
    }
    run(
        Command::new(env!("CARGO"))
            .current_dir(&src)
            .args(["build", "--locked", "-p", "leasehold", "--bin", "leasehold"])
            .env("CARGO_TARGET_DIR", &built)
            .env_remove("RUSTFLAGS")
            // The gate's clippy, which would lint the earlier commit.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS"),
        "build the earlier commit",
    );
    binary
}

/// What the holders and rivals saw.
#[derive(Default)]
struct Seen {
    /// Renewals refused for good (the lock was lost).
    lost: Vec<String>,
    /// Grants to a rival of a name a holder held.
    twice: Vec<String>,
    /// Renewals that went through.
    renewed: usize,
}

/// Renews every `names` lock (as `locks` were granted) every 400 ms, and
/// asks for each as a rival every 150 ms, through every node in turn, until
/// `stop`.
fn keep_at_it(
    addrs: Vec<String>,
    locks: Vec<Value>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Seen> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut seen = Seen::default();
        let mut turn = 0usize;
        let mut last_renewal = Instant::now() - Duration::from_secs(1);
        while !stop.load(Ordering::Relaxed) {
            turn += 1;
            let addr = &addrs[turn % addrs.len()];
            let post = |path: &str, body: Value| {
                support::answer(
                    http.post(format!("http://{addr}{path}"))
                        .json(&body)
                        .timeout(Duration::from_millis(1500)),
                )
            };
            if last_renewal.elapsed() >= Duration::from_millis(400) {
                last_renewal = Instant::now();
                for lock in &locks {
                    let renew = json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 5000 });
                    let (status, body) = post("/v1/locks/renew", renew).await;
                    match status {
                        200 => {
                            seen.renewed += 1;
                            if body["lock"]["fence"] != lock["fence"] {
                                seen.lost
                                    .push(format!("{} came back as {body}", lock["name"]));
                            }
                        }
                        0 | 503 => {}
                        _ => seen.lost.push(format!(
                            "renew {} via {addr}: {status} {body}",
                            lock["name"]
                        )),
                    }
                }
            }
            for lock in &locks {
                let rival = json!({ "name": lock["name"], "holder": "rival", "lease_ms": 1000 });
                let (status, body) = post("/v1/locks/acquire", rival).await;
                if status == 200 {
                    seen.twice
                        .push(format!("{} via {addr}: {body}", lock["name"]));
                }
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        seen
    })
}

/// Stops node `id` (of the earlier build) with SIGTERM, which must exit 0,
/// and starts this build on its data directory; waits until every node
/// follows one speaker.
async fn upgrade(cluster: &mut Cluster, id: u64) {
    let code = cluster.terminate(id, PATIENCE);
    assert_eq!(code, Some(0), "node {id} (old build) did not stop cleanly");
    cluster.run_this_build(id);
    cluster.spawn(id);
    cluster.all_follow_one().await;
}

/// The speaker runs the earlier build, which cannot read a set's release
/// in one call: the upgraded follower `via` releases a set (of locks taken
/// one by one) one call per lock, with the same answers: every lock
/// released, the names free for a rival, a repeat `404 not_held`.
async fn released_through_a_newer_follower(cluster: &Cluster, via: u64) {
    let (speaker, _) = cluster.speaker().await;
    assert_ne!(speaker, via, "the earlier build speaks");
    let mut locks = Vec::new();
    for name in ["mixed/a", "mixed/b"] {
        locks.push(
            cluster
                .must_acquire(via, name, json!({ "lease_ms": 60000 }))
                .await,
        );
    }
    let release = json!({ "locks": locks });
    let (status, body) = cluster
        .post(via, "/v1/locks/release", release.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["locks"].as_array().map(Vec::len), Some(2), "{body}");
    for name in ["mixed/a", "mixed/b"] {
        let rival = cluster
            .must_acquire(speaker, name, json!({ "lease_ms": 1000 }))
            .await;
        assert_ne!(rival["fence"], locks[0]["fence"], "{rival}");
    }
    let (status, body) = cluster.post(via, "/v1/locks/release", release).await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("not_held")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_earlier_build_loses_nothing_and_grants_nothing_twice() {
    let base = tokio::task::spawn_blocking(|| base_binary(BASE))
        .await
        .unwrap();
    let mut cluster = Cluster::start_built(3, &base, &[]).await;
    let mut locks = Vec::new();
    for id in 1..=3u64 {
        let name = format!("upgrade/{id}");
        let lock = cluster
            .must_acquire(
                id,
                &name,
                json!({ "holder": format!("h{id}"), "lease_ms": 5000 }),
            )
            .await;
        locks.push(lock);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let work = keep_at_it(
        cluster.addrs.values().cloned().collect(),
        locks.clone(),
        Arc::clone(&stop),
    );
    // A follower, then the speaker, then the last follower: the speaker
    // hands over to the most caught-up voter, the highest id of equals,
    // so the upgraded follower speaks beside a member on the earlier build
    // (docs/operations.md's order, followers first, is safe as well).
    let (speaker, _) = cluster.speaker().await;
    let followers = cluster.others(speaker);
    let order = [followers[1], speaker, followers[0]];
    for (step, &id) in order.iter().enumerate() {
        upgrade(&mut cluster, id).await;
        let (_, view) = cluster.get(id, "/v1/cluster").await;
        assert_eq!(view["protocol_offered"], json!(SPEAKS), "{view}");
        if step < 2 {
            // A member still runs the earlier build: the cluster speaks
            // what it reads, whatever the upgraded ones offer, and an
            // upgraded member grants no reader (the old one would take it
            // for a writer).
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (_, view) = cluster.get(id, "/v1/cluster").await;
            assert_eq!(
                view["protocol"],
                json!(0),
                "agreed with an old member: {view}"
            );
            let reader = json!({ "name": "readers", "shared": true });
            let (status, body) = cluster.post(id, "/v1/locks/acquire", reader).await;
            assert_eq!(
                (status, &body["error"]),
                (503, &json!("upgrading")),
                "{body}"
            );
        }
        if step == 0 {
            released_through_a_newer_follower(&cluster, id).await;
        }
        let fresh = cluster
            .must_acquire(id, &format!("fresh/{step}"), json!({ "lease_ms": 1000 }))
            .await;
        assert!(fresh["fence"].as_u64().unwrap() > 0);
    }
    let view = cluster.wait_protocol(SPEAKS).await;
    for member in view["members"].as_array().unwrap() {
        assert_eq!(member["protocol"], json!(SPEAKS), "{view}");
    }
    // Once every member speaks it, readers hold together.
    let (speaker, _) = cluster.speaker().await;
    let mut readers = Vec::new();
    for id in [speaker, cluster.others(speaker)[0]] {
        let reader = json!({ "shared": true, "lease_ms": 60000 });
        readers.push(cluster.must_acquire(id, "readers", reader).await);
    }
    // A crash after the change: the next speaker reads every lock back,
    // both readers among them.
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = work.await.unwrap();
    assert!(seen.twice.is_empty(), "granted twice: {:?}", seen.twice);
    assert!(seen.lost.is_empty(), "held locks lost: {:?}", seen.lost);
    assert!(
        seen.renewed > 30,
        "the holders hardly renewed: {}",
        seen.renewed
    );
    for lock in &locks {
        let (status, view) = cluster
            .get(
                next,
                &format!(
                    "/v1/locks/{}",
                    lock["name"].as_str().unwrap().replace('/', "%2F")
                ),
            )
            .await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["lock"]["fence"], lock["fence"], "{view}");
    }
    let (status, view) = cluster.get(next, "/v1/locks/readers").await;
    assert_eq!(status, 200, "{view}");
    let mut fences: Vec<&Value> = std::iter::once(&view["lock"]["fence"])
        .chain(
            view["lock"]["others"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| &o["fence"]),
        )
        .collect();
    fences.sort_by_key(|f| f.as_u64());
    assert_eq!(
        fences,
        [&readers[0]["fence"], &readers[1]["fence"]],
        "both readers kept: {view}"
    );
    for id in cluster.live() {
        assert_eq!(cluster.terminate(id, PATIENCE), Some(0), "node {id} stop");
    }
}

/// A rolling upgrade while a client's session holds locks: a 3-node
/// cluster of the first build that serves sessions opens one (through a
/// follower) once it speaks protocol 6, and its client takes names in it
/// through every node. The client renews the session every 400 ms through
/// each node in turn (passing over one that is down), so its records move
/// from node to node throughout, while a rival asks for its names through
/// every node; the nodes are upgraded one at a time (a follower, the
/// speaker, the last follower), and once every member runs this build the
/// speaker is killed. Nothing of the session is lost (every renewal counts
/// every lock, and after the kill each lock is held with its id and
/// fence), nothing is granted twice, and every stop exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_with_a_session_held_then_a_speaker_crash_loses_none_of_its_locks() {
    const TTL: Duration = Duration::from_secs(5);
    let base = tokio::task::spawn_blocking(|| base_binary(SESSIONS_BASE))
        .await
        .unwrap();
    let mut cluster = Cluster::start_built(3, &base, &[]).await;
    cluster.wait_protocol(SESSIONS).await;
    let (speaker, _) = cluster.speaker().await;
    let followers = cluster.others(speaker);
    let session = open(&cluster, followers[0], TTL.as_millis() as u64).await;
    let mut locks = take(&cluster, followers[0], &session, &["up/a", "up/b"]).await;
    locks.extend(take(&cluster, followers[1], &session, &["up/c"]).await);
    locks.extend(take(&cluster, speaker, &session, &["up/d"]).await);
    renew_holding(&cluster, followers[0], &session, &locks).await;
    let every: Vec<String> = cluster.addrs.values().cloned().collect();
    let keeper = Keeper::start(
        &session,
        &locks,
        Duration::from_millis(400),
        every.clone(),
        every,
    );
    // Past a lease before the first step: the locks hold by the session's
    // renewals alone.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let order = [followers[1], speaker, followers[0]];
    for &id in &order {
        upgrade(&mut cluster, id).await;
        // A lease of renewals beside the member upgraded.
        tokio::time::sleep(TTL).await;
        renew_holding(&cluster, id, &session, &locks).await;
    }
    cluster.wait_protocol(SPEAKS).await;
    held_everywhere(&cluster, &locks).await;

    let (speaker, _) = cluster.speaker().await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    held_everywhere(&cluster, &locks).await;
    renew_holding(&cluster, next, &session, &locks).await;
    tokio::time::sleep(TTL).await;
    let kept = keeper.stop().await;
    assert!(kept.twice.is_empty(), "granted twice: {:?}", kept.twice);
    assert!(kept.lost.is_empty(), "the session lost: {:?}", kept.lost);
    assert!(kept.renewed > 30, "the client hardly renewed: {kept:?}");
    held_everywhere(&cluster, &locks).await;
    for id in cluster.live() {
        assert_eq!(cluster.terminate(id, PATIENCE), Some(0), "node {id} stop");
    }
}

/// A member started with `--protocol 1` holds its cluster at version 1,
/// where a lock's data cannot change and no name is held shared or as
/// permits (`503 upgrading`, and the lock is kept); offering 2, the
/// cluster agrees on 2 and a proclaim goes through but readers still wait
/// for 3; once it offers 3 readers hold together but sets of names wait
/// for 4; at 4 a set is granted but a lock-delay waits for 5; at 5 a
/// lock-delay is granted but a session waits for 6; once it offers all it
/// speaks a session is opened; and a member (or
/// a newcomer) held below that refuses to start with exit 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_held_below_its_clusters_protocol_refuses_to_start_with_exit_64() {
    let below = (SPEAKS - 1).to_string();
    let mut cluster = Cluster::start_each(3, &[], |id| {
        if id == 3 {
            vec!["--protocol".into(), "1".into()]
        } else {
            Vec::new()
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in 1..=3 {
        let (_, view) = cluster.get(id, "/v1/cluster").await;
        assert_eq!(view["protocol"], json!(1), "node 3 offers less: {view}");
    }
    let lock = cluster
        .must_acquire(1, "leader", json!({ "lease_ms": 60000, "data": "v1" }))
        .await;
    let proclaim = json!({ "name": "leader", "id": lock["id"], "data": "v2" });
    for via in 1..=3 {
        let (status, body) = cluster.post(via, "/v1/locks/renew", proclaim.clone()).await;
        assert_eq!(status, 503, "via {via}: {body}");
        assert_eq!(body["error"], json!("upgrading"), "via {via}: {body}");
        for kind in [
            json!({ "name": "readers", "shared": true }),
            json!({ "name": "readers", "permits": 2 }),
            json!({ "names": ["s1", "s2"] }),
            json!({ "name": "slow", "lock_delay_ms": 1000 }),
        ] {
            let (status, body) = cluster.post(via, "/v1/locks/acquire", kind).await;
            assert_eq!(
                (status, &body["error"]),
                (503, &json!("upgrading")),
                "via {via}: {body}"
            );
        }
        let (status, body) = cluster.post(via, "/v1/sessions/open", json!({})).await;
        assert_eq!(
            (status, &body["error"]),
            (503, &json!("upgrading")),
            "via {via}: {body}"
        );
    }
    let (status, body) = cluster
        .post(
            2,
            "/v1/locks/renew",
            json!({ "name": "leader", "id": lock["id"] }),
        )
        .await;
    assert_eq!(status, 200, "a renewal without data goes through: {body}");
    assert_eq!(body["lock"]["data"], json!("v1"), "{body}");

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, vec!["--protocol".into(), "2".into()]);
    cluster.spawn(3);
    cluster.wait_protocol(2).await;
    let (status, body) = cluster.post(3, "/v1/locks/renew", proclaim.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lock"]["data"], json!("v2"), "{body}");
    assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
    let reader = json!({ "name": "readers", "shared": true });
    let (status, body) = cluster.post(2, "/v1/locks/acquire", reader).await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("upgrading")),
        "{body}"
    );

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, vec!["--protocol".into(), "3".into()]);
    cluster.spawn(3);
    cluster.wait_protocol(3).await;
    for via in [3, 2] {
        let reader = json!({ "shared": true, "lease_ms": 60000 });
        let granted = cluster.must_acquire(via, "readers", reader).await;
        assert_eq!(granted["mode"], json!("shared"), "{granted}");
        let set = json!({ "names": ["s1", "s2"] });
        let (status, body) = cluster.post(via, "/v1/locks/acquire", set).await;
        assert_eq!(
            (status, &body["error"]),
            (503, &json!("upgrading")),
            "via {via}: {body}"
        );
    }

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, vec!["--protocol".into(), "4".into()]);
    cluster.spawn(3);
    cluster.wait_protocol(4).await;
    for via in [3, 2] {
        let set = json!({ "names": [format!("s{via}a"), format!("s{via}b")], "lease_ms": 60000 });
        let (status, body) = cluster.post_settled(via, "/v1/locks/acquire", set).await;
        assert_eq!(status, 200, "via {via}: {body}");
        assert_eq!(body["locks"].as_array().map(Vec::len), Some(2), "{body}");
        let delayed = json!({ "name": format!("slow{via}"), "lock_delay_ms": 1000 });
        let (status, body) = cluster.post(via, "/v1/locks/acquire", delayed).await;
        assert_eq!(
            (status, &body["error"]),
            (503, &json!("upgrading")),
            "via {via}: {body}"
        );
    }

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, vec!["--protocol".into(), "5".into()]);
    cluster.spawn(3);
    cluster.wait_protocol(5).await;
    for via in [3, 2] {
        let delayed =
            json!({ "name": format!("slow{via}"), "lock_delay_ms": 1000, "lease_ms": 60000 });
        let (status, body) = cluster
            .post_settled(via, "/v1/locks/acquire", delayed)
            .await;
        assert_eq!(status, 200, "via {via}: {body}");
        assert_eq!(body["lock"]["lock_delay_ms"], json!(1000), "{body}");
        let (status, body) = cluster.post(via, "/v1/sessions/open", json!({})).await;
        assert_eq!(
            (status, &body["error"]),
            (503, &json!("upgrading")),
            "via {via}: {body}"
        );
    }

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, Vec::new());
    cluster.spawn(3);
    cluster.wait_protocol(SPEAKS).await;
    for via in [3, 2] {
        let (status, body) = cluster
            .post_settled(via, "/v1/sessions/open", json!({}))
            .await;
        assert_eq!(status, 200, "via {via}: {body}");
        let session = json!({ "name": format!("in{via}"), "session": body["session"]["id"] });
        let (status, body) = cluster.post(via, "/v1/locks/acquire", session).await;
        assert_eq!(status, 200, "via {via}: {body}");
    }

    assert_eq!(cluster.terminate(3, PATIENCE), Some(0));
    cluster.set_node_args(3, vec!["--protocol".into(), below.clone()]);
    cluster.spawn(3);
    assert_eq!(
        cluster.wait_exit(3, PATIENCE),
        Some(64),
        "{}",
        cluster.log(3)
    );
    assert!(
        cluster.log(3).contains(&format!("protocol {SPEAKS}")),
        "{}",
        cluster.log(3)
    );
    cluster.set_node_args(3, Vec::new());
    cluster.spawn(3);
    cluster.all_follow_one().await;
    let lock = cluster.must_acquire(3, "after", json!({})).await;
    assert!(lock["fence"].as_u64().unwrap() > 0);

    // A newcomer held below asks to join: the first message from the
    // cluster says it speaks more, and the newcomer stops.
    cluster.set_node_args(4, vec!["--protocol".into(), below]);
    cluster.spawn_joining(4);
    assert_eq!(
        cluster.wait_exit(4, PATIENCE),
        Some(64),
        "{}",
        cluster.log(4)
    );
}
